#pragma once
/// \file
/// `device_memory`: the caching pool of one device, whatever its upstream. Placement code takes
/// a `device_memory&` and allocates on any device the same way; `memory_pool<Upstream>`
/// (memory/pool.hpp) is the concrete pool, and `device_manager::memory(dev)` owns one per device.
///
/// How it allocates
///   * Requests up to `small_size_limit` are served from size classes (4 per power of two,
///     multiples of 256 bytes), carved from slabs; a slab goes back to the large blocks when
///     all its slots are free (one empty slab per class is kept, against churn).
///   * Larger requests take the best fit among the free blocks (segregated lists, bounded scan,
///     see detail::free_index), split off the rest, and coalesce with free neighbours when freed.
///   * Every block is 256-byte aligned (cudaMalloc's guarantee); larger power-of-two alignments
///     are honoured by splitting off the front.
///   * When nothing fits, the pool grows by a chunk from its upstream: at least the request, at
///     least `min_chunk_size`, at least (growth_factor - 1) x reserved (capped at
///     `max_chunk_size`), never past `max_size` (the budget).
///
/// Streams
///   `allocate(bytes, stream)` / `deallocate(p, bytes, stream)` are stream-ordered: a block freed
///   on stream s is reused at once by later allocations on s (stream order makes that safe), and
///   by other streams only after an event recorded on s has completed. Events are recorded
///   lazily, when another stream needs memory, so the common one-stream case records none. The
///   synchronous forms mean "no work in flight uses this block": it is reusable at once by any
///   stream. Upstreams without events (host memory) treat every free as synchronous. Synchronise
///   a stream before destroying it if pool memory was freed on it.
///
/// Out of memory: the recovery ladder is: other streams' completed frees -> grow -> wait for
/// other streams' frees -> release cached blocks (empty slabs and chunks) and grow -> the user's
/// on_out_of_memory callback (called without the lock held, so it may free memory) -> throw
/// out_of_memory with the request, the budget, the stats and what to do.
///
/// Bad input, defined behaviour (the pool is intact after each):
///   allocate(0) returns nullptr and counts nothing; deallocate(nullptr, n) does nothing;
///   an alignment that is not a power of two is invalid_request; a request over the budget is
///   out_of_memory; a double free, a foreign pointer and a free with the wrong size are
///   invalid_free. These checks are always on (the pool keeps a record of every live allocation
///   anyway).
///
/// Tracking (opt-in: pool_config::tracking, the `tracked<Strategy>` policy, or
/// DEVICEKIT_MEMORY_DEBUG=1): each live allocation keeps the std::source_location of the
/// allocating call; `live_allocations()` lists them; the pool reports leaks when destroyed.
///
/// Thread-safe: one mutex per pool. Safe at exit: no CUDA call once the process is exiting.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/detail/pool_observers.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/detail/pool_upstream.hpp>
#include <devicekit/memory/errors.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/memory/resources.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace devicekit {

/// One live allocation.
struct allocation_record {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;     ///< as requested; 0 unless tracking
  std::source_location where{};  ///< the allocating call; empty unless tracking
};

struct defragment_result {
  double fragmentation_before = 0.0;
  double fragmentation_after = 0.0;
  std::size_t released_bytes = 0;  ///< handed back upstream
  std::size_t chunks_released = 0;
};

class memory_profiler;

namespace detail {
[[nodiscard]] inline std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}
[[nodiscard]] inline std::string where_text(const std::source_location& w) {
  if (w.file_name() == nullptr || w.file_name()[0] == '\0') return "unknown (tracking off)";
  return std::string(w.file_name()) + ":" + std::to_string(w.line()) + " in " + w.function_name();
}
}  // namespace detail

class device_memory {
 public:
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
  virtual ~device_memory() = default;

  // --- synchronous ------------------------------------------------------------------------------
  /// `bytes` bytes aligned to `alignment` (a power of two; at least 256 is always given).
  /// Returns nullptr for 0 bytes. Throws out_of_memory, invalid_request.
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
  /// Returns empty chunks (except the preallocated initial one) to the upstream, after taking in
  /// other streams' completed frees. Never blocks on a stream. Returns the bytes released.
  std::size_t trim() {
    std::lock_guard lock(mutex_);
    poll_streams(0, false);
    release_empty_slabs();
    const std::size_t released = release_empty_chunks(true).first;
    notify(detail::pool_event::other, 0);
    upstream_->trim();
    return released;
  }

  /// Waits for every stream's pending frees, then returns all unused memory (the initial chunk
  /// too) to the upstream. Live allocations stay valid: clear() never frees them.
  void clear() {
    std::lock_guard lock(mutex_);
    poll_streams(0, true);
    release_empty_slabs();
    release_empty_chunks(false);
    notify(detail::pool_event::other, 0);
    upstream_->trim();
  }

  /// Forgets stream `s`: waits for the event that covers its pending frees (a host wait, on the
  /// event only: `s` itself may already be destroyed), makes those blocks ready for every stream,
  /// and frees the pool's slot for `s`. Call it before or after destroying a stream the pool has
  /// seen, in particular before a new stream could get the same handle: a pool tells streams
  /// apart by handle, and would otherwise hand the new stream the old one's frees without waiting
  /// for the old stream's work. A stream the pool has not seen is ignored.
  void release_stream(native_stream_handle s) {
    std::lock_guard lock(mutex_);
    for (auto& st : streams_) {
      if (st->retired || st->handle != s) continue;
      if (st->pending() != 0) {
        upstream_->wait_event(st->event);
        migrate(*st, st->recorded_seq);
      }
      retire_slot(*st);
    }
  }
  void release_stream(stream_ref s) { release_stream(s.native_handle()); }

  /// Coalesces what can be coalesced (other streams' completed frees, empty slabs) and, when
  /// fragmentation then exceeds `defrag_threshold` (or `force`), returns empty chunks upstream.
  /// Live pointers never move.
  defragment_result defragment(bool force = false) {
    std::lock_guard lock(mutex_);
    defragment_result r;
    r.fragmentation_before = compute_stats().fragmentation;
    poll_streams(0, false);
    release_empty_slabs();
    if (force || compute_stats().fragmentation > config_.defrag_threshold) {
      std::tie(r.released_bytes, r.chunks_released) = release_empty_chunks(true);
      upstream_->trim();
    }
    r.fragmentation_after = compute_stats().fragmentation;
    notify(detail::pool_event::other, 0);
    return r;
  }

  // --- observation ------------------------------------------------------------------------------
  [[nodiscard]] pool_stats stats() const {
    std::lock_guard lock(mutex_);
    return compute_stats();
  }
  /// Resets the peaks to the current values.
  void reset_peak_stats() {
    std::lock_guard lock(mutex_);
    peak_allocated_ = allocated_;
    peak_reserved_ = reserved_;
    peak_active_ = active_;
  }
  [[nodiscard]] device get_device() const noexcept { return device_; }
  [[nodiscard]] const pool_config& config() const noexcept { return config_; }
  /// How the budget (max_size) was reached.
  [[nodiscard]] const memory_budget& budget() const noexcept { return budget_; }
  [[nodiscard]] bool tracking() const noexcept { return tracking_; }

  /// Every live allocation (with its source location when tracking), by address.
  [[nodiscard]] std::vector<allocation_record> live_allocations() const {
    std::lock_guard lock(mutex_);
    std::vector<allocation_record> out;
    out.reserve(live_.size());
    live_.for_each([&](const detail::live_record& r) { out.push_back(record_of(r)); });
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ptr < b.ptr; });
    return out;
  }

  /// The live allocations as a report (what the destructor of a tracking pool prints); empty
  /// when there are none.
  [[nodiscard]] std::string leak_report() const {
    std::lock_guard lock(mutex_);
    return leak_report_locked(false);
  }

  /// Walks every structure and throws std::logic_error naming the first broken invariant: blocks
  /// tile each chunk, free neighbours on the same stream are merged, the free lists hold exactly
  /// the free blocks, and the counters match the records. For tests; O(size of the pool).
  void check_consistency() const {
    std::lock_guard lock(mutex_);
    check_consistency_locked();
  }

  friend bool operator==(const device_memory& a, const device_memory& b) noexcept { return &a == &b; }

 protected:
  device_memory(device dev, pool_config config) : device_(dev), config_(detail::validated(std::move(config))) {
    tracking_ = detail::tracking_enabled(config_);
    class_count_ = detail::size_classes::count_for(config_.small_size_limit);
    classes_.resize(static_cast<std::size_t>(class_count_));
    min_chunk_ = detail::round_up_pow2(config_.min_chunk_size, detail::pool_granule);
    max_chunk_ = detail::round_up_pow2(config_.max_chunk_size, detail::pool_granule);
    if (config_.release_on_free) {
      // Each allocation its own chunk, of exactly its (rounded) size: nothing is cached.
      class_count_ = 0;
      classes_.clear();
      min_chunk_ = detail::pool_granule;
    }
  }

  /// Called by the concrete pool once its upstream exists: sets the budget and preallocates.
  void start(detail::pool_upstream& upstream, std::size_t default_total_bytes) {
    upstream_ = &upstream;
    events_ = upstream.has_events();
    if (config_.budget) {
      budget_ = *config_.budget;
    } else {
      budget_ = budget_for(balanced{}, device_.kind(), default_total_bytes);
    }
    if (config_.max_size) {
      max_size_ = *config_.max_size;
      if (!config_.budget) {
        budget_.budget_bytes = max_size_;
        budget_.fraction = budget_.total_bytes > 0
                               ? std::min(1.0, static_cast<double>(max_size_) / static_cast<double>(budget_.total_bytes))
                               : 1.0;
      }
    } else {
      max_size_ = static_cast<std::size_t>(budget_.budget_bytes);
    }
    if (config_.initial_size > 0) {
      std::lock_guard lock(mutex_);
      const std::size_t n = detail::round_up_pow2(std::min(config_.initial_size, max_size_ & ~(detail::pool_granule - 1)),
                                                  detail::pool_granule);
      if (n > 0) {
        void* p = upstream_->allocate(n, detail::pool_granule);  // throws: a pool that cannot preallocate is not made
        add_chunk(p, n, true);
      }
    }
  }

  /// Called by the concrete pool's destructor, while the upstream still exists.
  void release_everything() noexcept {
    std::lock_guard lock(mutex_);
    if (tracking_ && live_.size() > 0) {
      try {
        const std::string report = leak_report_locked(true);
        if (config_.on_leak) {
          config_.on_leak(report);
        } else {
          std::cerr << report;
        }
      } catch (...) {
      }
    }
    if (cuda_calls_allowed()) {
      try {
        poll_streams(0, true);  // in-flight work may still use pending blocks
      } catch (...) {
      }
    }
    for (auto& st : streams_) {
      if (st->event != nullptr) upstream_->destroy_event(st->event);
      st->event = nullptr;
    }
    for (auto& c : chunks_) {
      if (!c.live) continue;
      upstream_->deallocate(reinterpret_cast<void*>(c.base), c.size, detail::pool_granule);
      c.live = false;
    }
    chunks_.clear();
    chunk_order_.clear();
    reserved_ = 0;
  }

 private:
  friend class memory_profiler;
  using block = detail::pool_block;
  using slab = detail::pool_slab;

  struct chunk {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    block* first = nullptr;
    bool initial = false;
    bool live = false;
  };

  struct taken {
    std::uintptr_t addr = 0;
    void* owner = nullptr;
    std::size_t size = 0;
    detail::live_kind kind = detail::live_kind::large;
  };

  // --- allocation -------------------------------------------------------------------------------
  void* allocate_impl(std::size_t bytes, std::size_t alignment, bool ordered, native_stream_handle s,
                      const std::source_location& where) {
    detail::check_alignment(alignment);
    if (bytes == 0) return nullptr;
    std::unique_lock lock(mutex_);
    const std::uint16_t sid = ordered && events_ ? stream_id(s) : 0;
    // Requests near SIZE_MAX cannot be rounded; they are over any budget anyway.
    const bool impossible = bytes > max_size_ || bytes > std::numeric_limits<std::size_t>::max() / 4 ||
                            alignment > std::numeric_limits<std::size_t>::max() / 4;
    if (impossible) {
      throw_oom(bytes, "the request is larger than the pool's budget (max_size " +
                           std::to_string(max_size_) + " bytes)");
    }
    // Room for the record first: once a block is taken nothing may throw. (Bookkeeping on the
    // host - a few bytes for a free-list entry - is assumed not to fail; if it does, std::bad_alloc
    // propagates.)
    live_.reserve_one();
    if (tracking_) sites_.reserve(sites_.size() + 1);
    taken t = try_take(bytes, alignment, sid);
    if (t.addr == 0) t = recover(lock, bytes, alignment, sid);
    live_.insert({t.addr, bytes, t.owner, t.kind});
    if (tracking_) sites_.insert_or_assign(t.addr, detail::allocation_site{where, alignment});
    allocated_ += bytes;
    in_use_ += t.size;
    ++active_;
    ++alloc_count_;
    largest_alloc_ = std::max(largest_alloc_, bytes);
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    peak_active_ = std::max(peak_active_, active_);
    if (!observers_.empty()) notify(detail::pool_event::allocate, bytes);
    return reinterpret_cast<void*>(t.addr);
  }

  [[nodiscard]] bool is_small(std::size_t bytes, std::size_t alignment) const noexcept {
    return alignment <= detail::pool_granule && bytes <= config_.small_size_limit && class_count_ > 0;
  }

  /// What growing must provide for this request.
  [[nodiscard]] std::size_t growth_need(std::size_t bytes, std::size_t alignment) const noexcept {
    if (is_small(bytes, alignment)) return detail::size_classes::slab_bytes(detail::size_classes::class_of(bytes));
    const std::size_t n = detail::round_up_pow2(bytes, detail::pool_granule);
    return alignment > detail::pool_granule ? n + alignment - detail::pool_granule : n;
  }

  taken try_take(std::size_t bytes, std::size_t alignment, std::uint16_t sid) {
    if (is_small(bytes, alignment)) return take_small(detail::size_classes::class_of(bytes), sid);
    const std::size_t n = detail::round_up_pow2(bytes, detail::pool_granule);
    block* b = take_large(n, alignment, sid, detail::block_state::used);
    if (b == nullptr) return {};
    return {b->addr, b, b->size, detail::live_kind::large};
  }

  taken recover(std::unique_lock<std::mutex>& lock, std::size_t bytes, std::size_t alignment, std::uint16_t sid) {
    const std::size_t need = growth_need(bytes, alignment);
    taken t;
    if (poll_streams(sid, false) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
    if (grow(need) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
    ++retries_;
    if (poll_streams(sid, true) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
    release_empty_slabs();
    release_empty_chunks(false);
    if ((t = try_take(bytes, alignment, sid)).addr != 0) return t;
    if (grow(need) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
    if (config_.on_out_of_memory) {
      const pool_stats snapshot = compute_stats();
      lock.unlock();
      const bool again = config_.on_out_of_memory(bytes, snapshot);
      lock.lock();
      if (again) {
        poll_streams(sid, true);
        if ((t = try_take(bytes, alignment, sid)).addr != 0) return t;
        if (grow(need) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
      }
    }
    std::string cause;
    if (!last_upstream_error_.empty()) {
      cause = "the upstream refused more memory (" + last_upstream_error_ + ")";
    } else if (reserved_ + need > max_size_) {
      cause = "growing by " + detail::human_bytes(need) + " would pass the budget";
    }
    throw_oom(bytes, cause);
  }

  [[noreturn]] void throw_oom(std::size_t bytes, const std::string& cause) {
    ++oom_count_;
    if (!observers_.empty()) notify(detail::pool_event::out_of_memory, bytes);
    const pool_stats s = compute_stats();
    last_upstream_error_.clear();
    throw out_of_memory(device_, bytes, s, budget_text(), cause);
  }

  [[nodiscard]] std::string budget_text() const {
    if (budget_.total_bytes == 0) return {};
    char frac[32];
    std::snprintf(frac, sizeof frac, "%.2f", budget_.fraction);
    return std::string(frac) + " of " + detail::human_bytes(budget_.total_bytes) + " total, less " +
           detail::human_bytes(budget_.headroom_bytes) + " headroom";
  }

  // --- small requests ---------------------------------------------------------------------------
  taken take_small(int cls, std::uint16_t sid);

  slab* make_slab(int cls);

  void partial_push(slab* s) noexcept;
  void partial_remove(slab* s) noexcept;

  /// A slot becomes ready again (freed synchronously, or its stream's event completed).
  void release_slot(slab* s, std::uintptr_t addr);

  void destroy_slab(slab* s);

  void release_empty_slabs();

  // --- large blocks -----------------------------------------------------------------------------
  detail::free_index& index_of(std::uint16_t sid) noexcept { return sid == 0 ? ready_ : streams_[sid - 1u]->large; }

  block* take_large(std::size_t n, std::size_t alignment, std::uint16_t sid, detail::block_state as);

  /// Makes `b` (in no free list) free on stream slot `sid`, merging it with free neighbours on
  /// the same stream.
  void insert_free(block* b, std::uint16_t sid, std::uint64_t seq);

  // --- growth and release -----------------------------------------------------------------------
  bool grow(std::size_t need);

  void add_chunk(void* p, std::size_t bytes, bool initial);

  /// Returns chunks that are one ready free block to the upstream. Returns (bytes, chunks).
  std::pair<std::size_t, std::size_t> release_empty_chunks(bool keep_initial);

  [[nodiscard]] bool inside_chunk(std::uintptr_t a) const noexcept;

  // --- streams ----------------------------------------------------------------------------------
  /// Stream slots the pool keeps at once (block headers store the slot in 16 bits).
  static constexpr std::size_t max_stream_slots = 65535;

  std::uint16_t stream_id(native_stream_handle h);

  /// Records the stream's event at a free, so that it covers that free and every earlier one.
  void record_free_event(detail::stream_state& st);

  /// Makes a slot with no pending frees free for another stream; destroys its event.
  void retire_slot(detail::stream_state& st) noexcept;

  /// Takes in the frees of every stream but `except` whose event has completed (or, with `wait`,
  /// waits for the events). Touches events only, never streams. Returns whether anything became
  /// ready.
  bool poll_streams(std::uint16_t except, bool wait);

  bool migrate(detail::stream_state& st, std::uint64_t upto);

  // --- deallocation -----------------------------------------------------------------------------
  void deallocate_impl(void* p, std::size_t bytes, bool ordered, native_stream_handle s) {
    if (p == nullptr) return;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock(mutex_);
    detail::live_record* rec = live_.find(a);
    if (rec == nullptr) {
      const std::string head = "deallocate(" + detail::pointer_text(p) + ", " + std::to_string(bytes) + ") on " +
                               device_.str() + ": ";
      if (inside_chunk(a)) {
        throw invalid_free(invalid_free::kind::double_free,
                           head + "not a live allocation although it lies in this pool's memory: a double free, "
                                  "or a pointer into the middle of an allocation. The pool is unchanged.");
      }
      throw invalid_free(invalid_free::kind::foreign_pointer,
                         head + "this pointer was not allocated by this pool (it lies outside all of its memory): "
                                "free it with the allocator that made it. The pool is unchanged.");
    }
    if (rec->requested != bytes) {
      throw invalid_free(invalid_free::kind::wrong_size,
                         "deallocate(" + detail::pointer_text(p) + ", " + std::to_string(bytes) + ") on " +
                             device_.str() + ": wrong size: it was allocated with " + std::to_string(rec->requested) +
                             " bytes at " + detail::where_text(site_of(a).where) +
                             "; pass the size given to allocate. The pool is unchanged.");
    }
    const std::uint16_t sid = ordered && events_ ? stream_id(s) : 0;
    // May throw (a CUDA error): nothing has changed yet, so the pool stays as it was.
    if (sid != 0) record_free_event(*streams_[sid - 1u]);
    const detail::live_record r = *rec;
    live_.erase(rec);
    if (tracking_) sites_.erase(a);
    if (r.kind() == detail::live_kind::large) {
      block* b = static_cast<block*>(r.owner());
      in_use_ -= b->size;
      insert_free(b, sid, sid != 0 ? streams_[sid - 1u]->next_seq++ : 0);
    } else {
      slab* sl = static_cast<slab*>(r.owner());
      in_use_ -= sl->slot_size;
      if (sid != 0) {
        detail::stream_state& st = *streams_[sid - 1u];
        st.small[sl->cls].push_back({a, sl, st.next_seq++});
        ++st.small_pending;
      } else {
        release_slot(sl, a);
      }
    }
    allocated_ -= bytes;
    --active_;
    ++free_count_;
    if (config_.release_on_free) {
      poll_streams(0, false);
      release_empty_chunks(false);
    }
    if (!observers_.empty()) notify(detail::pool_event::free, bytes);
  }

  // --- stats ------------------------------------------------------------------------------------
  [[nodiscard]] pool_stats compute_stats() const {
    pool_stats s;
    s.allocated_bytes = allocated_;
    s.peak_allocated_bytes = peak_allocated_;
    s.in_use_bytes = in_use_;
    s.reserved_bytes = reserved_;
    s.peak_reserved_bytes = peak_reserved_;
    s.free_bytes = reserved_ - in_use_;
    std::size_t largest = 0;
    if (const block* b = ready_.largest()) largest = b->size;
    std::size_t pending = 0;
    for (const auto& st : streams_) {
      if (const block* b = st->large.largest()) largest = std::max(largest, b->size);
      pending += st->pending();
    }
    for (std::size_t c = classes_.size(); c-- > 0;) {
      const slab* sl = classes_[c].partial;
      if (sl != nullptr) {
        largest = std::max(largest, static_cast<std::size_t>(sl->slot_size));
        break;
      }
    }
    s.largest_free_block = largest;
    s.fragmentation = s.free_bytes > 0 ? 1.0 - static_cast<double>(largest) / static_cast<double>(s.free_bytes) : 0.0;
    if (s.fragmentation < 0.0) s.fragmentation = 0.0;
    s.active_blocks = active_;
    s.peak_active_blocks = peak_active_;
    s.allocation_count = alloc_count_;
    s.largest_allocation_bytes = largest_alloc_;
    s.free_count = free_count_;
    s.oom_count = oom_count_;
    s.alloc_retries = retries_;
    s.upstream_allocations = upstream_allocs_;
    s.upstream_frees = upstream_frees_;
    s.chunk_count = chunk_order_.size();
    s.pending_stream_frees = pending;
    s.max_size = max_size_;
    return s;
  }

  [[nodiscard]] std::string leak_report_locked(bool destroyed) const {
    if (live_.size() == 0) return {};
    std::vector<allocation_record> live;
    live.reserve(live_.size());
    live_.for_each([&](const detail::live_record& r) { live.push_back(record_of(r)); });
    std::sort(live.begin(), live.end(), [](const auto& x, const auto& y) { return x.ptr < y.ptr; });
    std::size_t total = 0;
    for (const auto& x : live) total += x.bytes;
    std::string s = "devicekit: memory pool on " + device_.str() + (destroyed ? " destroyed with " : " has ") +
                    std::to_string(live.size()) + " live allocation(s), " + detail::human_bytes(total) +
                    (destroyed ? " leaked:\n" : ":\n");
    std::size_t shown = 0;
    for (const auto& x : live) {
      if (++shown > 100) {
        s += "  ... and " + std::to_string(live.size() - 100) + " more\n";
        break;
      }
      s += "  " + detail::pointer_text(x.ptr) + "  " + std::to_string(x.bytes) + " bytes  allocated at " +
           detail::where_text(x.where) + "\n";
    }
    if (!tracking_) s += "  (set DEVICEKIT_MEMORY_DEBUG=1 to see where each was allocated)\n";
    return s;
  }

  [[nodiscard]] detail::allocation_site site_of(std::uintptr_t a) const {
    const auto it = sites_.find(a);
    return it == sites_.end() ? detail::allocation_site{} : it->second;
  }
  [[nodiscard]] allocation_record record_of(const detail::live_record& r) const {
    const detail::allocation_site site = site_of(r.key);
    return {reinterpret_cast<void*>(r.key), r.requested, site.alignment, site.where};
  }

  // --- observers (memory_profiler) -------------------------------------------------------------
  void notify(detail::pool_event e, std::size_t bytes) { observers_.notify(e, bytes, allocated_, reserved_); }
  void attach_observer(detail::pool_observer* o) {
    std::lock_guard lock(mutex_);
    observers_.add(o, allocated_, reserved_);
  }
  void detach_observer(detail::pool_observer* o) {
    std::lock_guard lock(mutex_);
    observers_.remove(o, allocated_, reserved_);
  }

  template <class F>
  auto with_lock(F&& f) const {
    std::lock_guard lock(mutex_);
    return f();
  }

  // --- consistency ------------------------------------------------------------------------------
  void check_consistency_locked() const;

  // --- state ------------------------------------------------------------------------------------
  device device_;
  pool_config config_;
  memory_budget budget_;
  std::size_t max_size_ = 0;
  bool tracking_ = false;
  bool events_ = false;
  detail::pool_upstream* upstream_ = nullptr;  ///< memory_pool's adapter (detail/pool_upstream.hpp)
  int class_count_ = 0;
  std::size_t min_chunk_ = 0;
  std::size_t max_chunk_ = 0;

  mutable std::mutex mutex_;
  detail::block_arena blocks_;
  detail::free_index ready_;
  std::vector<std::unique_ptr<detail::stream_state>> streams_;
  std::uint16_t last_sid_ = 0;
  std::vector<detail::class_state> classes_;
  std::vector<std::unique_ptr<slab>> slab_store_;
  std::vector<slab*> spare_slabs_;
  std::size_t slab_count_ = 0;
  std::vector<chunk> chunks_;
  std::vector<std::uint32_t> spare_chunk_ids_;
  std::vector<std::pair<std::uintptr_t, std::uint32_t>> chunk_order_;
  detail::live_map live_;
  std::unordered_map<std::uintptr_t, detail::allocation_site> sites_;  ///< tracking only
  std::vector<block*> migrate_scratch_;
  detail::observer_list observers_;
  std::string last_upstream_error_;

  std::size_t allocated_ = 0;
  std::size_t peak_allocated_ = 0;
  std::size_t in_use_ = 0;
  std::size_t reserved_ = 0;
  std::size_t peak_reserved_ = 0;
  std::size_t active_ = 0;
  std::size_t peak_active_ = 0;
  std::uint64_t alloc_count_ = 0;
  std::size_t largest_alloc_ = 0;
  std::uint64_t free_count_ = 0;
  std::uint64_t oom_count_ = 0;
  std::uint64_t retries_ = 0;
  std::uint64_t upstream_allocs_ = 0;
  std::uint64_t upstream_frees_ = 0;
};

}  // namespace devicekit

// The longer members (slabs, large blocks, growth, streams, the consistency check) are defined
// out of the class, in a file of their own.
#include <devicekit/memory/detail/device_memory_impl.hpp>
