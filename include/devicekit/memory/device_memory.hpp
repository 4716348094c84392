#pragma once
/// \file
/// `device_memory`: the caching pool of one device, whatever its upstream. Placement code takes
/// a `device_memory&` and allocates on any device the same way; `memory_pool<Upstream>`
/// (memory/pool.hpp) is the concrete pool, and `device_manager::memory(dev)` owns one per device.
///
/// Small requests (up to `small_size_limit`) take size-class slots (detail::slab_cache), larger
/// ones the best fit among free blocks (detail::block_heap); every block is 256-byte aligned, as
/// cudaMalloc's. The pool grows by chunks from its upstream (at least `min_chunk_size`, at most
/// `max_chunk_size`, by `growth_factor`), never past `max_size` (the budget).
///
/// `allocate(bytes, stream)` / `deallocate(p, bytes, stream)` are stream-ordered: a block freed on
/// a stream is reused at once by that stream, and by others once an event recorded on the stream
/// after the free has completed or the device has been fenced (detail::pool_stream_registry: over
/// cuda_device_resource, one stream allocating and freeing makes no CUDA call; the event is
/// recorded only when another stream needs the memory); call release_stream(s) for a stream that
/// is done. The synchronous forms mean "no work in flight uses this block". Upstreams without
/// events (host memory) treat every free as synchronous.
///
/// Out of memory: the recovery ladder is: other streams' completed frees -> grow -> wait for
/// other streams' frees (their events, then the device fence for frees no event covers) -> release cached blocks (empty slabs and chunks) and grow -> the user's
/// on_out_of_memory callback (called without the lock held, so it may free memory) -> throw
/// out_of_memory with the request, the budget, the stats and what to do.
///
/// Bad input, defined behaviour (the pool is intact after each):
///   allocate(0) returns nullptr and counts nothing; deallocate(nullptr, n) does nothing;
///   an alignment that is not a power of two is invalid_request, and so is a size that overflows
///   the pool's arithmetic (rounding to the granule, alignment padding, growth by whole chunks:
///   near SIZE_MAX, usually a negative value converted to size_t), refused before it is used and
///   not counted in the stats; a request over the budget is out_of_memory; a double free, a
///   foreign pointer and a free with the wrong size are invalid_free. These checks are always on
///   (the pool keeps a record of every live allocation anyway).
///
/// Tracking (opt-in: pool_config::tracking, the `tracked<Strategy>` policy, or
/// DEVICEKIT_MEMORY_DEBUG=1): each live allocation keeps the std::source_location of the
/// allocating call; `live_allocations()` lists them; the pool reports leaks when destroyed.
///
/// Inside a CUDA graph capture (core/capture.hpp): on a capturing stream, `allocate(bytes, s)`
/// makes a graph memory node instead of taking a cached block (memory/detail/graph_blocks.hpp),
/// without querying or recording any event, and `deallocate(p, bytes, s)` of such a block makes
/// its free node; CUDA reuses what the graph freed for the graph's later allocations. The graph's
/// memory counts against the budget (stats().graph_bytes) until the graph is destroyed; a request
/// that would pass the budget throws out_of_memory before anything is recorded. Freeing a block of
/// the pool's own on a capturing stream is refused (capture_error): every replay would still use
/// a block the pool had handed on.
///
/// Thread-safe: one lock per pool (detail::pool_mutex). Safe at exit: no CUDA call once the process
/// is exiting.
///
/// This class is the façade: the API, the recovery ladder and the one lock. The work is done
/// under that lock by components in memory/detail/ (RMM and Thrust split their pools the same
/// way): block_heap (chunks, best fit, coalescing, growth), slab_cache (size classes),
/// block_router (which of them serves or takes back a block), pool_stream_registry (per-stream
/// frees and events), allocation_registry (live records, invalid frees, leak reports),
/// pool_counters (figures and stats), pool_invariants (the tests' consistency check),
/// pool_upstream (the upstream resource), pool_observers (memory_profiler). pool_config is in
/// memory/pool_config.hpp, the errors in memory/errors.hpp.
#include <devicekit/core/capture.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/detail/allocation_registry.hpp>
#include <devicekit/memory/clients.hpp>
#include <devicekit/memory/detail/block_heap.hpp>
#include <devicekit/memory/detail/block_router.hpp>
#include <devicekit/memory/detail/graph_blocks.hpp>
#include <devicekit/memory/detail/memory_trace.hpp>
#include <devicekit/memory/detail/pool_counters.hpp>
#include <devicekit/memory/detail/pool_invariants.hpp>
#include <devicekit/memory/detail/pool_mutex.hpp>
#include <devicekit/memory/detail/pool_observers.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/detail/pool_upstream.hpp>
#include <devicekit/memory/detail/slab_cache.hpp>
#include <devicekit/memory/detail/pool_stream_registry.hpp>
#include <devicekit/memory/errors.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/memory/resources.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace devicekit {

namespace detail {
class process_memory;  // memory/registry.hpp: keeps a pool whose owner went while it had live allocations
/// Closes the process's memory trace (memory/trace.hpp): every pool in it that is still alive hands
/// over its figures and the rest of its log first, as a pool destroyed during the trace does; then
/// the end record.
DEVICEKIT_DECL void finish_memory_trace() noexcept;
}  // namespace detail

struct defragment_result {
  double fragmentation_before = 0.0;
  double fragmentation_after = 0.0;
  std::size_t released_bytes = 0;  ///< handed back upstream
  std::size_t chunks_released = 0;
};

class memory_profiler;

class device_memory : private detail::graph_memory_holder {
 public:
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
  virtual ~device_memory() = default;

  // --- synchronous ------------------------------------------------------------------------------
  /// `bytes` bytes aligned to `alignment` (a power of two; at least 256 is always given).
  /// Returns nullptr for 0 bytes. Throws out_of_memory (over the budget, or the upstream has no
  /// more), invalid_request (an alignment that is not a power of two, a size that overflows the
  /// pool's arithmetic); the pool is unchanged by either.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = detail::pool_granule,
                               std::source_location where = std::source_location::current()) {
    return allocate_impl(bytes, alignment, false, native_stream_handle{}, where);
  }
  /// Frees `p`, which must come from this pool with the same `bytes`, with no work in flight on
  /// it. Throws invalid_free (double free, foreign pointer, wrong size) and leaves the pool as it was.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = detail::pool_granule) {
    (void)alignment;  // the record knows the alignment; CCCL passes it anyway
    deallocate_impl(p, bytes, false, native_stream_handle{});
  }

  // --- stream-ordered ---------------------------------------------------------------------------
  [[nodiscard]] void* allocate(std::size_t bytes, stream_ref s,
                               std::source_location where = std::source_location::current()) {
    return allocate_impl(bytes, detail::pool_granule, true, s.native_handle(), where);
  }
  void deallocate(void* p, std::size_t bytes, stream_ref s) { deallocate_impl(p, bytes, true, s.native_handle()); }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, native_stream_handle s,
                                     std::source_location where = std::source_location::current()) {
    return allocate_impl(bytes, alignment, true, s, where);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, native_stream_handle s) {
    (void)alignment;
    deallocate_impl(p, bytes, true, s);
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref s,
                                     std::source_location where = std::source_location::current()) {
    return allocate_impl(bytes, alignment, true, s.native_handle(), where);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref s) {
    (void)alignment;
    deallocate_impl(p, bytes, true, s.native_handle());
  }
#if DEVICEKIT_HAS_CCCL_MR
  /// CCCL's async_resource form.
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref s) {
    return allocate_impl(bytes, alignment, true, s.get(), std::source_location::current());
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, ::cuda::stream_ref s) {
    (void)alignment;
    deallocate_impl(p, bytes, true, s.get());
  }
#endif

  // --- maintenance ------------------------------------------------------------------------------
  // Which call hands cached memory back: release_cached() all of it, now (torch.cuda.empty_cache);
  // trim() what it can without waiting, keeping the preallocated chunk; defragment() only past its
  // threshold. None frees a live allocation, and a chunk that holds one stays, free parts and all
  // (live pointers never move): the pool gives memory back by whole chunks, as PyTorch's caching
  // allocator releases whole segments.

  /// Every cached free block back to the upstream now, as PyTorch's torch.cuda.empty_cache() and
  /// CuPy's free_all_blocks() do: waits for every stream's pending frees (their events, then the
  /// device fence for frees no event covers), returns the empty size-class slabs to the heap, and
  /// releases every chunk without a live block, the preallocated initial one too (the next
  /// allocations grow the pool again); a driver pool under it is trimmed as well. Live allocations
  /// stay valid and keep their chunks. Blocks the calling thread. Returns the bytes of the chunks
  /// released.
  std::size_t release_cached();

  /// Returns empty chunks (except the preallocated initial one) to the upstream, after taking in
  /// other streams' completed frees. Never blocks on a stream, so frees still pending on a stream
  /// stay cached (release_cached() waits for them). Returns the bytes released.
  std::size_t trim();

  /// release_cached() without the count: despite its name it frees no live allocation, only what
  /// the pool caches.
  void clear() { (void)release_cached(); }

  /// Forgets stream `s`: waits for the event that covers its pending frees (a host wait, on the
  /// event only: `s` itself may already be destroyed), makes those blocks ready for every stream,
  /// and frees the pool's slot for `s`. Frees made on `s` after its last event stay unusable, under
  /// no stream, until the pool next fences its device (out of memory, clear(), the destructor).
  /// Call it before or after destroying a stream the pool has
  /// seen, in particular before a new stream could get the same handle: a pool tells streams
  /// apart by handle, and would otherwise hand the new stream the old one's frees without waiting
  /// for the old stream's work. A stream the pool has not seen is ignored.
  void release_stream(native_stream_handle s) {
    std::lock_guard lock(mutex_);
    trace_maintenance(detail::trace_maintenance::release_stream, s);
    streams_.release(s, heap_, slabs_);
  }
  void release_stream(stream_ref s) { release_stream(s.native_handle()); }

  /// Coalesces what can be coalesced (other streams' completed frees, empty slabs) and, only when
  /// fragmentation then exceeds `defrag_threshold` (pool_config, default 0.5) or `force` is true,
  /// returns empty chunks upstream, the preallocated one excepted. Below the threshold and without
  /// `force` it hands nothing back: to empty the cache, call release_cached(). Never blocks on a
  /// stream. Live pointers never move.
  defragment_result defragment(bool force = false);

  // --- observation ------------------------------------------------------------------------------
  [[nodiscard]] pool_stats stats() const {
    std::lock_guard lock(mutex_);
    return stats_locked();
  }
  /// Resets the peaks to the current values.
  void reset_peak_stats() {
    std::lock_guard lock(mutex_);
    counters_.reset_peaks();
    heap_.reset_peak();
  }
  [[nodiscard]] device get_device() const noexcept { return device_; }
  /// A token that expires when this pool is destroyed, for a handle that borrows the pool and may
  /// outlive it (rmm_resource, rmm/resource.hpp): it refuses a call with an error instead of
  /// reaching a pool that is gone.
  [[nodiscard]] std::weak_ptr<const void> lifetime() const noexcept { return alive_; }
  /// The ledger of `client` in this pool (memory/clients.hpp), made at the first call for that name
  /// and shared by every later one: an adaptor that lets a library allocate here counts there.
  [[nodiscard]] std::shared_ptr<client_ledger> client_ledger_for(const std::string& client);
  /// This pool's live allocations by client: "devicekit" (what no ledger holds; its peak is the
  /// pool's, an upper bound) first, then each ledger's. Adds up to stats().allocated_bytes.
  [[nodiscard]] std::vector<client_memory_stats> client_stats() const;
  [[nodiscard]] const pool_config& config() const noexcept { return config_; }
  /// How the budget (max_size) was reached.
  [[nodiscard]] const memory_budget& budget() const noexcept { return budget_; }
  [[nodiscard]] bool tracking() const noexcept { return live_.tracking(); }

  /// Every live allocation (with its source location when tracking), by address.
  [[nodiscard]] std::vector<allocation_record> live_allocations() const {
    std::lock_guard lock(mutex_);
    return live_.snapshot();
  }

  /// The bytes `p` was allocated with, while it is live; 0 for anything else (for callers that free
  /// without the size, as CuPy's allocator interface does).
  [[nodiscard]] std::size_t allocation_size(const void* p) const {
    std::lock_guard lock(mutex_);
    const detail::live_record* r = live_.find(reinterpret_cast<std::uintptr_t>(p));
    return r != nullptr ? r->requested : 0;
  }

  /// The live allocations as a report (what the destructor of a tracking pool prints); empty
  /// when there are none.
  [[nodiscard]] std::string leak_report() const {
    std::lock_guard lock(mutex_);
    return live_.report(device_, false);
  }

  /// Walks every structure and throws std::logic_error naming the first broken invariant: blocks
  /// tile each chunk, free neighbours on the same stream are merged, the free lists hold exactly
  /// the free blocks, and the counters match the records. For tests; O(size of the pool).
  void check_consistency() const {
    std::lock_guard lock(mutex_);
    detail::check_pool_invariants(heap_, slabs_, streams_, live_, counters_);
  }

  friend bool operator==(const device_memory& a, const device_memory& b) noexcept { return &a == &b; }

 protected:
  device_memory(device dev, pool_config config);

  /// Called by the concrete pool once its upstream exists: sets the budget (by default the
  /// balanced strategy's of `default_total_bytes`, capped to `default_available_bytes` where
  /// measured), preallocates, and counts the pool in pool_held_bytes.
  void start(detail::pool_upstream& upstream, std::size_t default_total_bytes,
             std::optional<std::uint64_t> default_available_bytes = std::nullopt);

  /// Called by the concrete pool's destructor, while the upstream still exists.
  void release_everything() noexcept;

 private:
  friend class memory_profiler;
  friend class detail::process_memory;
  friend void detail::finish_memory_trace() noexcept;

  using taken = detail::taken_block;

  /// What deallocate does after returning a block, as bits of after_free_, so that the free path
  /// tests one byte whatever is set: hand empty chunks back (release_on_free), and see whether a
  /// pool the registry keeps has just lost its last live allocation.
  static constexpr std::uint8_t release_after_free = 1;
  static constexpr std::uint8_t report_idle_after_free = 2;

  /// For the registry (memory/registry.hpp), when the pool's owner goes while allocations from it
  /// are live: from now on, the free after which nothing allocated from the pool is live or
  /// pending calls `on_idle(this)` once the pool's lock is released (the registry then destroys
  /// the pool; the free touches nothing of it after). Returns false, and changes nothing, when
  /// nothing is live now.
  bool report_when_idle(void (*on_idle)(device_memory*));
  /// Whether anything allocated from the pool is live: an allocation, or a block of a captured
  /// graph that still exists.
  [[nodiscard]] bool has_live_allocations() const {
    std::lock_guard lock(mutex_);
    return counters_.active != 0 || !graph_blocks_.empty();
  }
  /// After a free of a pool that reports when idle, under the lock: whether nothing is live, and
  /// nothing pending on a stream once the completed frees are taken in (which never blocks).
  bool idle_after_free() noexcept;

  /// Takes in every stream's completed frees (all of them, waiting for events and the fence, when
  /// `wait`) and returns empty slabs to the heap.
  void take_in_frees(bool wait) {
    streams_.poll(0, wait, heap_, slabs_);
    if (wait) streams_.fence(heap_, slabs_);
    slabs_.release_empty(heap_);
  }

  void* allocate_impl(std::size_t bytes, std::size_t alignment, bool ordered, native_stream_handle s,
                      const std::source_location& where);
  /// allocate_impl's work once the lock is held and the stream's slot known. Always inline: it is
  /// the allocation itself, and a call here would cost every allocation (allocate_traced has a copy).
  [[gnu::always_inline]] void* allocate_locked(std::unique_lock<detail::pool_mutex>& lock, std::size_t bytes,
                                               std::size_t alignment, std::uint16_t sid,
                                               const std::source_location& where) {
    if (bytes > max_size_) {
      throw_oom(bytes,
                "the request is larger than the pool's budget (max_size " + std::to_string(max_size_) + " bytes)");
    }
    // Room for the record first: once a block is taken nothing may throw. (Bookkeeping on the
    // host - a few bytes for a free-list entry - is assumed not to fail; if it does, std::bad_alloc
    // propagates.)
    live_.reserve_one();
    taken t = try_take(bytes, alignment, sid);
    if (t.addr == 0) t = recover(lock, bytes, alignment, sid);
    live_.insert({t.addr, bytes, t.owner, t.kind}, where, alignment);
    counters_.allocated_one(bytes, t.size);
    if (!observers_.empty()) notify(detail::pool_event::allocate, bytes);
    return reinterpret_cast<void*>(t.addr);
  }

  // The pool's side of a memory trace (memory/trace.hpp), under the lock, only while one is
  // open: the pool joins it at its first event (its configuration, and what is live but the block
  // at `except`, which the event itself records), then records into its own log. Never inlined
  // (their definitions say so): the operations that call them stay as they are without a trace.
  bool trace_joined(detail::memory_trace_writer& w, std::uintptr_t except) const noexcept;
  /// allocate_impl while a trace is open: the allocation (or its refusal), then its record.
  void* allocate_traced(detail::memory_trace_writer& w, std::unique_lock<detail::pool_mutex>& lock, std::size_t bytes,
                        std::size_t alignment, bool ordered, native_stream_handle s, std::uint16_t sid,
                        const std::source_location& where);
  void trace_free(detail::memory_trace_writer& w, std::uintptr_t addr, std::size_t bytes, bool ordered,
                  native_stream_handle s) noexcept;
  /// The pool's figures and the rest of its log to the trace (when it goes, or the trace ends).
  void trace_finish() const noexcept;
  /// Before the pool grows on a GPU: what other clients hold of it, when it changed since the pool
  /// last recorded it (the replay charges it to the budget, as outside_charge does here).
  void trace_outside(detail::memory_trace_writer& w) noexcept;
  void trace_maintenance(detail::trace_maintenance what, native_stream_handle s = native_stream_handle{}) noexcept {
    if (detail::memory_trace_writer* w = detail::active_memory_trace.load(std::memory_order_relaxed)) [[unlikely]] {
      if (trace_joined(*w, 0)) trace_log_.maintenance(what, s);
    }
  }
  /// allocate on a stream capturing sequence `id`: a graph memory node, within the budget.
  void* allocate_in_capture(std::size_t bytes, std::size_t alignment, native_stream_handle s, unsigned long long id);
  /// deallocate of a block graph_blocks_ knows, on `s` (`c`: its capture state).
  void deallocate_graph_block(void* p, const detail::graph_blocks::block& b, native_stream_handle s,
                              const capture_state& c);

  // graph_memory_holder (core/capture.hpp): the ledger asks, under its own lock.
  [[nodiscard]] std::size_t capture_live_bytes(unsigned long long id) const noexcept override {
    std::lock_guard lock(mutex_);
    return graph_blocks_.live(id);
  }
  [[nodiscard]] std::size_t capture_peak_bytes(unsigned long long id) const noexcept override {
    std::lock_guard lock(mutex_);
    return graph_blocks_.peak(id);
  }
  void release_capture(unsigned long long id) noexcept override {
    std::lock_guard lock(mutex_);
    graph_blocks_.release(id);
  }
  /// What the pool's own chunks may reserve: the budget less what captured graphs hold.
  [[nodiscard]] std::size_t chunk_budget() const {
    const std::size_t cap = max_size_ - std::min<std::size_t>(max_size_, outside_charge());
    return graph_blocks_.reserved() < cap ? cap - graph_blocks_.reserved() : 0;
  }
  /// What libraries hold beside the pools on this GPU (memory/clients.hpp: NCCL's communicators)
  /// past the reserve the budget already left them: the budget holds across clients. Asked only
  /// when the pool grows.
  [[nodiscard]] std::size_t outside_charge() const {
    if (device_.kind() != device_kind::cuda) return 0;
    const std::uint64_t outside = upstream_->outside_bytes(device_);
    return outside > budget_.collective_reserve_bytes
               ? static_cast<std::size_t>(outside - budget_.collective_reserve_bytes)
               : 0;
  }

  taken try_take(std::size_t bytes, std::size_t alignment, std::uint16_t sid) {
    return detail::take_block(heap_, slabs_, streams_, bytes, alignment, sid);
  }

  /// The recovery ladder: other streams' completed frees -> grow -> wait for other streams' frees
  /// (events, then the fence)
  /// -> release cached blocks and grow -> the user's callback (without the lock) -> out_of_memory.
  taken recover(std::unique_lock<detail::pool_mutex>& lock, std::size_t bytes, std::size_t alignment,
                std::uint16_t sid);

  bool grow(std::size_t need) {
    if (detail::memory_trace_writer* w = detail::active_memory_trace.load(std::memory_order_relaxed)) [[unlikely]] {
      trace_outside(*w);
    }
    if (!heap_.grow(need, chunk_budget(), device_)) return false;
    if (!observers_.empty()) notify(detail::pool_event::grew, 0);
    return true;
  }

  [[noreturn]] void throw_oom(std::size_t bytes, const std::string& cause);
  /// The initial chunk (pool_config::initial_size), under the lock; an upstream that refuses it
  /// for want of memory is out_of_memory (shortage::preallocation).
  void preallocate();
  /// invalid_request for a size past detail::largest_request, saying what was asked and the limit.
  [[noreturn]] void throw_overflowing_request(std::size_t bytes, std::size_t alignment) const;

  void deallocate_impl(void* p, std::size_t bytes, bool ordered, native_stream_handle s);

  [[nodiscard]] pool_stats stats_locked() const {
    pool_stats s = detail::compute_stats(counters_, heap_, slabs_, streams_, max_size_);
    s.graph_bytes = graph_blocks_.reserved();
    s.graph_blocks = graph_blocks_.count();
    return s;
  }

  void notify(detail::pool_event e, std::size_t bytes) {
    observers_.notify(e, bytes, counters_.allocated, heap_.reserved());
  }
  void attach_observer(detail::pool_observer* o) {
    std::lock_guard lock(mutex_);
    observers_.add(o, counters_.allocated, heap_.reserved());
  }
  void detach_observer(detail::pool_observer* o) {
    std::lock_guard lock(mutex_);
    observers_.remove(o, counters_.allocated, heap_.reserved());
  }
  template <class F>
  auto with_lock(F&& f) const {
    std::lock_guard lock(mutex_);
    return f();
  }

  device device_;
  pool_config config_;
  memory_budget budget_;
  std::size_t max_size_ = 0;
  std::size_t min_chunk_ = 0;
  bool events_ = false;  ///< the upstream orders frees on streams (a copy of upstream_->has_events())
  detail::pool_upstream* upstream_ = nullptr;
  std::uint8_t after_free_ = 0;                ///< release_after_free | report_idle_after_free (under the lock)
  void (*on_idle_)(device_memory*) = nullptr;  ///< report_when_idle's callback (under the lock)

  std::shared_ptr<const void> alive_ = std::make_shared<char>();  ///< lifetime()'s token
  mutable detail::pool_mutex mutex_;                              // guards everything below
  detail::block_heap heap_;
  detail::slab_cache slabs_;
  detail::pool_stream_registry streams_;
  detail::allocation_registry live_;
  detail::pool_counters counters_;
  detail::observer_list observers_;
  detail::graph_blocks graph_blocks_;
  mutable detail::pool_trace_log trace_log_;  ///< written by const members too (trace_finish)
  std::vector<std::shared_ptr<client_ledger>> clients_;
};

/// Adds `m`'s figures to `out`, and its allocations by client to out.clients
/// (device_manager::memory_stats).
inline void add_pool_stats(device_memory_stats& out, const device_memory& m) {
  out += m.stats();
  for (const client_memory_stats& c : m.client_stats()) add_client_stats(out.clients, c);
}

/// The bytes of `dev`'s memory that this process's devicekit pools hold now: of every pool alive
/// on `dev` (the process's, every manager's, a program's own), what it reserved from its upstream
/// and what its captured graphs hold. A pool keeps that memory to reuse it, so it does not count
/// as taken when a budget is measured (device_available_bytes, memory/pool.hpp).
[[nodiscard]] DEVICEKIT_DECL std::uint64_t pool_held_bytes(device dev);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/device_memory.ipp>
#endif
