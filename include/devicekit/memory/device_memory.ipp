#pragma once
/// \file
/// The definitions behind memory/device_memory.hpp: the pool's maintenance, allocation, recovery
/// ladder and free.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/device_memory.hpp>

#include <algorithm>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace devicekit {

namespace detail {
/// Every pool alive in the process (pool_held_bytes). Its lock is taken before a pool's, never
/// after: a pool joins once it is made and leaves before its destructor takes its own lock.
struct pool_census {
  std::mutex mutex;
  std::vector<const device_memory*> pools;

  [[nodiscard]] static pool_census& instance() {
    static auto* census = new pool_census();  // never destroyed: pools may outlive static destructors
    return *census;
  }
};
}  // namespace detail

DEVICEKIT_DECL std::uint64_t pool_held_bytes(device dev) {
  auto& census = detail::pool_census::instance();
  std::lock_guard lock(census.mutex);
  std::uint64_t held = 0;
  for (const device_memory* p : census.pools) {
    if (p->get_device() != dev) continue;
    const pool_stats s = p->stats();
    held += s.reserved_bytes + s.graph_bytes;
  }
  return held;
}

DEVICEKIT_DECL void detail::finish_memory_trace() noexcept {
  if (active_memory_trace.load(std::memory_order_acquire) != nullptr) {
    auto& census = pool_census::instance();
    std::lock_guard lock(census.mutex);
    for (const device_memory* p : census.pools) p->trace_finish();
  }
  memory_trace_writer::instance().flush_transfers();
  memory_trace_writer::instance().close();
}

DEVICEKIT_DECL void device_memory::trace_finish() const noexcept {
  std::lock_guard lock(mutex_);
  if (!trace_log_.joined(detail::memory_trace_writer::instance().epoch())) return;
  const pool_stats s = stats_locked();
  trace_log_.finish(s.peak_allocated_bytes, s.peak_reserved_bytes, s.allocation_count, s.oom_count);
}

DEVICEKIT_DECL std::size_t device_memory::trim() {
  std::lock_guard lock(mutex_);
  trace_maintenance(detail::trace_maintenance::trim);
  take_in_frees(false);
  const std::size_t released = heap_.release_empty_chunks(true).first;
  notify(detail::pool_event::other, 0);
  upstream_->trim();
  return released;
}

DEVICEKIT_DECL std::size_t device_memory::release_cached() {
  std::lock_guard lock(mutex_);
  trace_maintenance(detail::trace_maintenance::release_cached);
  take_in_frees(true);
  const std::size_t released = heap_.release_empty_chunks(false).first;
  notify(detail::pool_event::other, 0);
  upstream_->trim();
  return released;
}

DEVICEKIT_DECL std::shared_ptr<client_ledger> device_memory::client_ledger_for(const std::string& client) {
  std::lock_guard lock(mutex_);
  for (const auto& c : clients_) {
    if (c->name() == client) return c;
  }
  clients_.push_back(std::make_shared<client_ledger>(client));
  return clients_.back();
}

DEVICEKIT_DECL std::vector<client_memory_stats> device_memory::client_stats() const {
  std::lock_guard lock(mutex_);
  const pool_stats s = stats_locked();
  std::vector<client_memory_stats> out;
  out.reserve(clients_.size() + 1);
  out.push_back({"devicekit", s.allocated_bytes, s.peak_allocated_bytes, s.allocation_count});
  for (const auto& c : clients_) {
    client_memory_stats m = c->stats();
    // A ledger counts after the pool's figures change (a client allocates or frees, then counts):
    // a reader in between may see a free in the pool and not yet in the ledger, hence the clamp.
    out.front().bytes_in_use -= std::min(out.front().bytes_in_use, m.bytes_in_use);
    out.front().num_allocs -= std::min(out.front().num_allocs, m.num_allocs);
    out.push_back(std::move(m));
  }
  return out;
}

DEVICEKIT_DECL defragment_result device_memory::defragment(bool force) {
  std::lock_guard lock(mutex_);
  trace_maintenance(force ? detail::trace_maintenance::defragment_forced : detail::trace_maintenance::defragment);
  defragment_result r;
  r.fragmentation_before = stats_locked().fragmentation;
  take_in_frees(false);
  if (force || stats_locked().fragmentation > config_.defrag_threshold) {
    std::tie(r.released_bytes, r.chunks_released) = heap_.release_empty_chunks(true);
    upstream_->trim();
  }
  r.fragmentation_after = stats_locked().fragmentation;
  notify(detail::pool_event::other, 0);
  return r;
}

DEVICEKIT_DECL device_memory::device_memory(device dev, pool_config config)
    : device_(dev), config_(detail::validated(std::move(config))) {
  live_.set_tracking(detail::tracking_enabled(config_));
  // Each allocation its own chunk, of exactly its (rounded) size, with release_on_free: nothing
  // is cached, so no size classes and no growth beyond the request.
  const int classes = config_.release_on_free ? 0 : detail::size_classes::count_for(config_.small_size_limit);
  slabs_.configure(classes, config_.small_size_limit);
  min_chunk_ = config_.release_on_free ? detail::pool_granule
                                       : detail::round_up_pow2(config_.min_chunk_size, detail::pool_granule);
  if (config_.release_on_free) after_free_ = release_after_free;
}

DEVICEKIT_DECL bool device_memory::report_when_idle(void (*on_idle)(device_memory*)) {
  std::lock_guard lock(mutex_);
  if (counters_.active == 0 && graph_blocks_.empty()) return false;
  on_idle_ = on_idle;
  after_free_ = static_cast<std::uint8_t>(after_free_ | report_idle_after_free);
  return true;
}

DEVICEKIT_DECL bool device_memory::idle_after_free() noexcept {
  if (counters_.active != 0 || !graph_blocks_.empty()) return false;
  try {
    if (streams_.pending() != 0) streams_.poll(0, false, heap_, slabs_);
  } catch (...) {
    return false;  // an event the runtime cannot answer for: the registry's next sweep decides
  }
  // Frees still pending on a stream may be used by its queued work: destroying the pool now would
  // have to wait for them (its destructor does), which a free must not. The registry destroys
  // such a pool at its next sweep instead.
  return streams_.pending() == 0;
}

DEVICEKIT_DECL void device_memory::start(detail::pool_upstream& upstream, std::size_t default_total_bytes,
                                         std::optional<std::uint64_t> default_available_bytes) {
  upstream_ = &upstream;
  events_ = upstream.has_events();
  heap_.configure(upstream_, min_chunk_, detail::round_up_pow2(config_.max_chunk_size, detail::pool_granule),
                  config_.growth_factor);
  streams_.configure(upstream_, slabs_.class_count(), &trace_log_);
  detail::memory_trace_from_environment(&detail::finish_memory_trace);
  budget_ = detail::budget_of(config_, device_.kind(), default_total_bytes, default_available_bytes);
  max_size_ = config_.max_size ? *config_.max_size : static_cast<std::size_t>(budget_.budget_bytes);
  {
    std::lock_guard lock(mutex_);
    preallocate();  // throws: a pool that cannot preallocate is not made
  }
  auto& census = detail::pool_census::instance();
  std::lock_guard lock(census.mutex);
  census.pools.push_back(this);
}

DEVICEKIT_DECL void device_memory::preallocate() {
  const std::size_t bytes = detail::block_heap::initial_chunk(config_.initial_size, max_size_);
  std::string refused;
  try {
    heap_.preallocate(bytes);
  } catch (const std::bad_alloc& e) {  // host memory (operator new)
    refused = e.what();
  }
#if DEVICEKIT_HAS_CUDA
  catch (const cuda_error& e) {
    if (e.code() != static_cast<int>(cudaErrorMemoryAllocation)) throw;  // not a refusal for want of memory
    refused = e.what();
  }
#endif
  if (refused.empty()) return;
  // The upstream refused for want of memory: an out_of_memory as any other, with its own remedy (a
  // smaller start, not a larger budget).
  throw out_of_memory(device_, bytes, stats_locked(), detail::budget_text(budget_),
                      "preallocating the pool's start (pool_config::initial_size, a strategy's start fraction), "
                      "which the upstream refused (" +
                          refused + ")",
                      out_of_memory::shortage::preallocation);
}

DEVICEKIT_DECL void device_memory::release_everything() noexcept {
  {
    auto& census = detail::pool_census::instance();
    std::lock_guard lock(census.mutex);
    std::erase(census.pools, this);
  }
  // First, and without the pool's lock: the ledger calls holders under its own lock.
  detail::graph_memory_ledger::instance().withdraw(this);
  trace_finish();  // takes the lock itself
  std::lock_guard lock(mutex_);
  live_.report_leaks(device_, config_.on_leak);
  if (cuda_calls_allowed()) {
    try {
      streams_.poll(0, true, heap_, slabs_);  // in-flight work may still use pending blocks
      streams_.fence(heap_, slabs_);
    } catch (...) {}
  }
  streams_.destroy_events();
  heap_.release_all();
}

DEVICEKIT_DECL void* device_memory::allocate_impl(std::size_t bytes, std::size_t alignment, bool ordered,
                                                  native_stream_handle s, const std::source_location& where) {
  detail::check_alignment(alignment);
  if (bytes == 0) return nullptr;
  // Before anything rounds it: a size past this wraps around in the pool's arithmetic.
  if (bytes > detail::largest_request(alignment, min_chunk_)) throw_overflowing_request(bytes, alignment);
  if (ordered && events_) {
    if (const capture_state c = upstream_->capture_of(s); c.active)
      return allocate_in_capture(bytes, alignment, s, c.id);
  }
  std::unique_lock lock(mutex_);
  const std::uint16_t sid = ordered && events_ ? streams_.id_of(s, heap_, slabs_) : 0;
  if (sid != 0) streams_.before_allocate(streams_.at(sid));  // may throw: nothing changed yet
  if (detail::memory_trace_writer* w = detail::active_memory_trace.load(std::memory_order_relaxed)) [[unlikely]] {
    return allocate_traced(*w, lock, bytes, alignment, ordered, s, sid, where);
  }
  return allocate_locked(lock, bytes, alignment, sid, where);
}

[[gnu::noinline]] DEVICEKIT_DECL void* device_memory::allocate_traced(
    detail::memory_trace_writer& w, std::unique_lock<detail::pool_mutex>& lock, std::size_t bytes,
    std::size_t alignment, bool ordered, native_stream_handle s, std::uint16_t sid, const std::source_location& where) {
  void* p = nullptr;
  try {
    p = allocate_locked(lock, bytes, alignment, sid, where);
  } catch (const out_of_memory&) {
    // Not when the user's on_out_of_memory callback threw it: the lock is not held then.
    if (lock.owns_lock() && trace_joined(w, 0)) {
      trace_log_.allocate(w, detail::trace_op::out_of_memory, 0, bytes, alignment, ordered, s, where);
    }
    throw;
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  if (trace_joined(w, addr))
    trace_log_.allocate(w, detail::trace_op::allocate, addr, bytes, alignment, ordered, s, where);
  return p;
}

[[gnu::noinline]] DEVICEKIT_DECL void device_memory::trace_outside(detail::memory_trace_writer& w) noexcept {
  if (device_.kind() != device_kind::cuda || !trace_joined(w, 0)) return;
  try {
    const std::uint64_t bytes = upstream_->outside_bytes(device_);
    if (bytes != trace_log_.last_outside()) trace_log_.outside(bytes);
  } catch (...) {
    // The figure cannot be read (no memory for the ledger's lock): the replay keeps the last one.
  }
}

[[gnu::noinline]] DEVICEKIT_DECL void device_memory::trace_free(detail::memory_trace_writer& w, std::uintptr_t addr,
                                                                std::size_t bytes, bool ordered,
                                                                native_stream_handle s) noexcept {
  if (trace_joined(w, 0)) trace_log_.deallocate(w, addr, bytes, ordered, s);  // the block is still live
}

[[gnu::noinline]] DEVICEKIT_DECL bool device_memory::trace_joined(detail::memory_trace_writer& w,
                                                                  std::uintptr_t except) const noexcept {
  if (trace_log_.joined(w.epoch())) return true;
  try {
    detail::trace_pool_description d;
    d.device_name = device_.str();
    d.gpu = device_.kind() == device_kind::cuda;
    d.has_events = events_;
    d.has_fence = events_ && upstream_->has_fence();
    d.config = &config_;
    d.budget = &budget_;
    d.max_size = max_size_;
    if (!w.join(trace_log_, d)) return false;
    for (const allocation_record& r : live_.snapshot()) {
      if (reinterpret_cast<std::uintptr_t>(r.ptr) == except) continue;
      trace_log_.live(w, reinterpret_cast<std::uintptr_t>(r.ptr), r.bytes, r.alignment,
                      r.where.line() != 0 ? &r.where : nullptr);
    }
  } catch (const std::bad_alloc&) {
    // No memory for the description or the list of what is live: the pool records from here on
    // as well as it can; a replay then refuses a free of what it never saw, with its offset.
  }
  return trace_log_.joined(w.epoch());
}

DEVICEKIT_DECL device_memory::taken device_memory::recover(std::unique_lock<detail::pool_mutex>& lock,
                                                           std::size_t bytes, std::size_t alignment,
                                                           std::uint16_t sid) {
  const std::size_t need = detail::growth_need(slabs_, bytes, alignment);
  taken t;
  if (streams_.poll(sid, false, heap_, slabs_) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
  streams_.want_events(sid);  // other streams record their events at their next allocation or free
  if (grow(need) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
  ++counters_.retries;
  if (streams_.poll(sid, true, heap_, slabs_) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
  // Frees no event covers yet (a fenced stream records one only at its next use, and may never
  // be used again): the device-wide fence orders them all.
  if (streams_.fence(heap_, slabs_) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
  slabs_.release_empty(heap_);
  heap_.release_empty_chunks(false);
  if ((t = try_take(bytes, alignment, sid)).addr != 0) return t;
  if (grow(need) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
  if (config_.on_out_of_memory) {
    const pool_stats snapshot = stats_locked();
    lock.unlock();
    const bool again = config_.on_out_of_memory(bytes, snapshot);
    lock.lock();
    if (again) {
      streams_.poll(sid, true, heap_, slabs_);
      streams_.fence(heap_, slabs_);
      if ((t = try_take(bytes, alignment, sid)).addr != 0) return t;
      if (grow(need) && (t = try_take(bytes, alignment, sid)).addr != 0) return t;
    }
  }
  std::string cause;
  if (!heap_.last_upstream_error().empty()) {
    cause = "the upstream refused more memory (" + heap_.last_upstream_error() + ")";
  } else if (need > max_size_ - std::min(max_size_, heap_.reserved() + graph_blocks_.reserved())) {
    cause = "growing by " + detail::human_bytes(need) + " would pass the budget";
  }
  throw_oom(bytes, cause);
}

DEVICEKIT_DECL void device_memory::throw_overflowing_request(std::size_t bytes, std::size_t alignment) const {
  const std::string request =
      std::to_string(bytes) + " bytes" +
      (alignment > detail::pool_granule ? " aligned to " + std::to_string(alignment) + " bytes" : std::string());
  throw invalid_request("allocate: " + request + " on " + device_.str() +
                        " overflows the pool's size arithmetic (a block is the size rounded up to " +
                        std::to_string(detail::pool_granule) +
                        " bytes, plus the padding a larger alignment needs, grown by whole chunks of " +
                        std::to_string(min_chunk_) + " bytes); the most it can be asked for at this alignment is " +
                        std::to_string(detail::largest_request(alignment, min_chunk_)) +
                        " bytes, far beyond any device. A size this large is usually a negative or wrapped value "
                        "converted to size_t: check how it was computed. Nothing was allocated.");
}

DEVICEKIT_DECL void device_memory::throw_oom(std::size_t bytes, const std::string& cause) {
  ++counters_.ooms;
  if (!observers_.empty()) notify(detail::pool_event::out_of_memory, bytes);
  const pool_stats s = stats_locked();
  // Which advice fits: a larger budget helps only where the upstream did not refuse first and the
  // budget is not already all the device had (capped to what it had available, or the whole of it).
  using shortage = out_of_memory::shortage;
  shortage what = shortage::budget;
  if (!heap_.last_upstream_error().empty()) {
    what = shortage::upstream;
  } else if (budget_.capped_to_available || (budget_.total_bytes > 0 && budget_.fraction >= 1.0)) {
    what = shortage::available;
  }
  heap_.clear_upstream_error();
  std::string why = cause;
  if (const std::size_t outside = outside_charge(); outside > 0) {
    why += "; the budget is " + detail::human_bytes(outside) +
           " smaller while other clients hold that much of the device beyond the reserve for collectives (" +
           detail::human_bytes(budget_.collective_reserve_bytes) +
           "): memory_stats(dev).clients names them; raise settings::set_collective_memory_size to plan for it";
  }
  throw out_of_memory(device_, bytes, s, detail::budget_text(budget_), why, what);
}

DEVICEKIT_DECL void* device_memory::allocate_in_capture(std::size_t bytes, std::size_t alignment,
                                                        native_stream_handle s, unsigned long long id) {
  if (alignment > detail::pool_granule) {
    throw invalid_request("allocate: an alignment of " + std::to_string(alignment) +
                          " bytes on a stream being captured into a CUDA graph; graph memory is " +
                          std::to_string(detail::pool_granule) +
                          "-byte aligned: ask for that, or allocate before the capture");
  }
  const std::size_t rounded = detail::round_up_pow2(bytes, detail::pool_granule);
  // Before the pool's lock: the ledger calls holders under its own lock (core/capture.hpp).
  detail::graph_memory_ledger::instance().enlist(id, this);
  std::lock_guard lock(mutex_);
  const std::size_t growth = graph_blocks_.growth_for(id, rounded);
  if (bytes > max_size_ || heap_.reserved() + graph_blocks_.reserved() + growth > max_size_) {
    throw_oom(bytes, "inside a CUDA graph capture: the pool's chunks (" + detail::human_bytes(heap_.reserved()) +
                         ") and the captured graphs' memory (" + detail::human_bytes(graph_blocks_.reserved()) +
                         ") leave no room for it; nothing was recorded, the capture can be ended cleanly (capture() "
                         "does it); trim() the pool before capturing, or destroy graphs no longer used");
  }
  void* p = upstream_->graph_allocate(bytes, s);  // a CUDA error throws here: nothing recorded yet
  graph_blocks_.add(p, rounded, id);
  return p;
}

DEVICEKIT_DECL void device_memory::deallocate_graph_block(void* p, const detail::graph_blocks::block& b,
                                                          native_stream_handle s, const capture_state& c) {
  if (c.active && c.id != b.id) {
    throw capture_error("deallocate: a block allocated in one CUDA graph capture is freed in another (sequence " +
                        std::to_string(c.id) + "); a graph's memory is its own: free it in the capture that made it");
  }
  // In its own capture: the graph's free node, after which the graph may reuse the memory. After
  // the capture (a block left allocated when it ended, dropped now): the memory is the graph's,
  // CUDA frees it with the graph, so only the record goes.
  if (c.active) upstream_->graph_deallocate(p, b.bytes, s);
  graph_blocks_.remove(p);
}

DEVICEKIT_DECL void device_memory::deallocate_impl(void* p, std::size_t bytes, bool ordered, native_stream_handle s) {
  if (p == nullptr) return;
  const capture_state c = ordered && events_ ? upstream_->capture_of(s) : capture_state{};
  std::unique_lock lock(mutex_);
  if (!graph_blocks_.empty()) {
    if (const detail::graph_blocks::block* b = graph_blocks_.find(p)) return deallocate_graph_block(p, *b, s, c);
  }
  if (c.active) {
    throw capture_error(
        "deallocate: a block allocated before the capture is freed on a stream being captured into a "
        "CUDA graph; every replay of the graph would still use it after the pool had handed it on. "
        "Free it once the capture has ended, or allocate it inside the capture (on the capturing stream)");
  }
  detail::live_record& rec =
      live_.find_for_free(p, bytes, device_, [&](std::uintptr_t a) { return heap_.inside_chunk(a); });
  const std::uint16_t sid = ordered && events_ ? streams_.id_of(s, heap_, slabs_) : 0;
  // May throw (a CUDA error): nothing has changed yet, so the pool stays as it was.
  if (sid != 0) streams_.before_free(streams_.at(sid));
  if (detail::memory_trace_writer* w = detail::active_memory_trace.load(std::memory_order_relaxed)) [[unlikely]] {
    trace_free(*w, reinterpret_cast<std::uintptr_t>(p), bytes, ordered, s);
  }
  const detail::live_record r = rec;
  live_.erase(&rec);
  counters_.in_use -= detail::return_block(r, r.key, sid, heap_, slabs_, streams_);
  counters_.freed_one(bytes);
  if (after_free_ != 0) {
    if ((after_free_ & release_after_free) != 0) {
      streams_.poll(0, false, heap_, slabs_);
      heap_.release_empty_chunks(false);
    }
    if ((after_free_ & report_idle_after_free) != 0 && idle_after_free()) {
      if (!observers_.empty()) notify(detail::pool_event::free, bytes);
      after_free_ = static_cast<std::uint8_t>(after_free_ & ~report_idle_after_free);
      void (*on_idle)(device_memory*) = on_idle_;
      lock.unlock();
      on_idle(this);  // may destroy the pool: nothing of it is touched after this
      return;
    }
  }
  if (!observers_.empty()) notify(detail::pool_event::free, bytes);
}

}  // namespace devicekit
