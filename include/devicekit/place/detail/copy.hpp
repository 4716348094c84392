#pragma once
/// \file
/// The copy engine behind placement: moves a list of leaves (`copy_item`: source bytes and where
/// they go in one destination block) from wherever they are to the block's device.
///
///   host -> host      one memcpy per leaf into the block
///   host -> cuda      packed into pinned staging and sent in one cudaMemcpyAsync; above
///                     `single_stage_limit` in chunks (staging_ring): the host packs chunk k+1
///                     while the copy engine moves chunk k, taking fresh buffers rather than
///                     waiting for a busy stream; leaves of 1 MiB or more that are pinned already
///                     are copied directly (no host memcpy)
///   cuda -> same cuda device-to-device copies; leaves that lie in one allocation in the same order
///                     are one copy; many small ones go to `cub::DeviceMemcpy::Batched` when a .cu
///                     file of the program includes place/batched_copy.cuh, else several go in
///                     one cudaMemcpyBatchAsync (CUDA >= 12.8)
///   cuda -> other     peer copies where the pair supports peer access (enabled on first use, and
///                     granted by devicekit's driver pools): one cudaMemcpyBatchAsync, or one
///                     cudaMemcpyPeerAsync per run; else through pinned staging in chunks, the
///                     destination stream waiting for each chunk on an event
///   cuda -> host      into pinned staging in chunks through two buffers, then unpacked
///
/// Which of these a list of runs takes is the copy planner's decision (place/detail/copy_planner.hpp);
/// copy_runs is the entry for a list of runs that is not a tree (the NCCL layer's bucket packing).
#include <devicekit/core/device.hpp>
#include <devicekit/core/device_ops.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/detail/copy_planner.hpp>
#include <devicekit/place/detail/host_copy.hpp>
#include <devicekit/memory/registry.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace devicekit::detail {

struct copy_item {
  const std::byte* src = nullptr;
  device src_device;
  const void* src_owner = nullptr;  ///< identity of the allocation holding src; null: unknown
  std::byte* dst = nullptr;         ///< on the destination device
  std::size_t bytes = 0;
};

/// A copy of consecutive bytes: one or more items merged.
struct copy_run {
  const std::byte* src = nullptr;
  device src_device;
  std::byte* dst = nullptr;
  std::size_t bytes = 0;
};

/// Merges consecutive items that come from one allocation and keep their relative positions
/// (a placed tree copied elsewhere is one run). Gaps between them are copied along: they lie in
/// the same source allocation and, because the positions match, in the destination's.
[[nodiscard]] inline std::vector<copy_run> coalesce(std::span<const copy_item> items) {
  std::vector<copy_run> runs;
  const copy_item* prev = nullptr;
  for (const auto& it : items) {
    if (it.bytes == 0) continue;
    if (prev != nullptr && it.src_owner != nullptr && it.src_owner == prev->src_owner &&
        it.src_device == prev->src_device && it.src >= prev->src + prev->bytes && it.dst > prev->dst &&
        it.src - runs.back().src == it.dst - runs.back().dst) {
      runs.back().bytes = static_cast<std::size_t>(it.dst + it.bytes - runs.back().dst);
    } else {
      runs.push_back({it.src, it.src_device, it.dst, it.bytes});
    }
    prev = &it;
  }
  return runs;
}

/// Transfers at or below this size go through one staging area in one copy; larger ones are
/// pipelined in `staging_chunk_bytes` chunks, in every direction, so a transfer never pins its
/// whole size at once.
inline constexpr std::size_t single_stage_limit = std::size_t{16} << 20;
inline constexpr std::size_t staging_chunk_bytes = std::size_t{8} << 20;
/// Staging one transfer toward a stream may hold while the stream has not yet reached its copies
/// (a stream busy with earlier work): up to this much, the host takes fresh buffers and returns
/// without waiting for the stream; beyond it, it waits for the oldest chunk's copy.
inline constexpr std::size_t max_staging_in_flight = std::size_t{256} << 20;

/// Set by place/batched_copy.cuh when a .cu file includes it: copies `count` buffers on `stream`
/// in one launch (device pointers, all on the stream's device). Returns false to decline.
using batched_copy_fn = bool (*)(const void* const* srcs, void* const* dsts, const std::size_t* sizes,
                                 std::size_t count, native_stream_handle stream);
inline std::atomic<batched_copy_fn> batched_copy_hook{nullptr};

/// Counts what the engine did: tests check the paths taken; reports show them.
struct copy_stats {
  std::atomic<std::size_t> host_copies{0};
  std::atomic<std::size_t> host_to_device_transfers{0};
  std::atomic<std::size_t> device_to_device_copies{0};
  std::atomic<std::size_t> batched_launches{0};
  std::atomic<std::size_t> peer_copies{0};
  std::atomic<std::size_t> staged_device_copies{0};
  std::atomic<std::size_t> device_to_host_transfers{0};
  std::atomic<std::size_t> batch_api_calls{0};   ///< cudaMemcpyBatchAsync calls (any direction)
  std::atomic<std::size_t> batch_api_copies{0};  ///< the copies those calls carried
  std::atomic<std::size_t> device_memsets{0};    ///< cudaMemsetAsync of padding (shard with uneven::pad)
};
inline copy_stats& stats() {
  static copy_stats s;
  return s;
}

inline void copy_host_items(std::span<const copy_item> items) {
  for (const auto& it : items) {
    bulk_copy(it.dst, it.src, it.bytes);
  }
  stats().host_copies.fetch_add(items.size(), std::memory_order_relaxed);
}

#if DEVICEKIT_HAS_CUDA

/// A stream per device and thread for placement without a caller's stream (destroyed at thread
/// exit, before the CUDA runtime's teardown).
[[nodiscard]] inline const stream& placement_stream(device dev) {
  thread_local std::map<int, stream> streams;
  auto it = streams.find(dev.ordinal());
  if (it == streams.end()) it = streams.emplace(dev.ordinal(), stream(dev)).first;
  return it->second;
}

/// Creates an event on the current device, records it on `s` (a stream of that device), and
/// returns it (the caller owns it). cudaEventBlockingSync: a host thread that waits for it
/// sleeps instead of spinning a core, which under cudaDeviceScheduleAuto it otherwise does
/// whenever the process has fewer active contexts than cores (CUDA runtime API,
/// cudaEventCreateWithFlags and cudaSetDeviceFlags). Costs nothing to events only queried or
/// waited for by streams.
[[nodiscard]] inline cudaEvent_t record_event(cudaStream_t s) {
  cudaEvent_t ev = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync));
  const cudaError_t r = cudaEventRecord(ev, s);
  if (r != cudaSuccess) {
    (void)cudaEventDestroy(ev);
    DEVICEKIT_CUDA_CHECK(r);
  }
  return ev;
}

/// Makes `waiter` (a stream of any device) wait for the work queued so far on `source`, a stream
/// of the current device: an event recorded there, waited for, and destroyed once the wait is
/// queued (cudaStreamWaitEvent accepts an event of another device; cudaEventDestroy allows it).
inline void stream_waits_for(cudaStream_t waiter, cudaStream_t source) {
  const cudaEvent_t ev = record_event(source);
  const cudaError_t r = cudaStreamWaitEvent(waiter, ev, 0);
  (void)cudaEventDestroy(ev);
  DEVICEKIT_CUDA_CHECK(r);
}

/// Waits on the host for the work queued on `s` so far, blocking the thread instead of spinning
/// in cudaStreamSynchronize (cuda_events::wait_for, memory/resources.hpp).
inline void host_wait(stream_ref s) {
  scoped_device on(s.get_device().ordinal());
  DEVICEKIT_CUDA_CHECK(cuda_events::wait_for(s.native_handle()));
}

/// How a call that takes no stream is ordered (README, "Calls without a stream"). Such a call
/// queues its work on devicekit's own non-blocking stream (placement_stream), which CUDA orders
/// against nothing, so it is ordered as cudaMemcpy is, by hand: its stream first waits for the
/// work queued so far on the legacy default stream of each cuda device it touches. An event
/// recorded on the legacy default stream completes only after the work queued before it on every
/// blocking stream of that device too, the per-thread default streams included (CUDA runtime
/// API, "Stream synchronization behavior"), so a kernel of the caller's on any of those is seen.
/// Work on the caller's own non-blocking streams is not, as with cudaMemcpy: pass that stream.
/// The calls of this kind all finish before they return (or, for prefetch, make the legacy
/// default stream wait for their copies), so work queued after them is ordered after them too.
inline void order_after_default_stream(cudaStream_t s, device d) {
  if (!d.is_cuda()) return;
  // cudaStreamLegacy names the legacy default stream of the current device: hence the guard.
  scoped_device on(d.ordinal());
  stream_waits_for(s, cudaStreamLegacy);
}

/// The stream of a call without a stream that works on `dev` and reads memory of `from` too (the
/// source tree's device, if any): dev's placement stream, ordered after the legacy default
/// streams of both (order_after_default_stream).
[[nodiscard]] inline const stream& default_ordered_stream(device dev, std::optional<device> from = std::nullopt) {
  const stream& s = placement_stream(dev);
  order_after_default_stream(s.native_handle(), dev);
  if (from && *from != dev) order_after_default_stream(s.native_handle(), *from);
  return s;
}

/// Whether `dst` can read `src`'s memory directly; enables it the first time (per process),
/// through enable_peer_access's implementation (core/device_ops.hpp), which also grants access
/// to devicekit's driver pools on `src`. False when the pair has no peer support or enabling
/// failed: the caller stages through host memory instead of failing the copy.
[[nodiscard]] inline bool ensure_peer_access(int dst, int src) {
  if (dst == src) return true;
  return try_enable_peer_access(dst, src).result == peer_access_state::status::enabled;
}

/// Whether cudaMemcpyBatchAsync may be used on `s`. It exists from CUDA runtime 12.8 on (the
/// headers this is compiled with); the driver must be as new (a newer runtime on an older driver
/// fails the call, "CUDA Compatibility"); the legacy NULL stream is refused by the call itself
/// ("Must not be legacy NULL stream"). Once a call is refused as not supported, no more are made.
inline std::atomic<bool> batch_api_refused{false};

[[nodiscard]] inline bool batch_api_available([[maybe_unused]] cudaStream_t s) noexcept {
#  if CUDART_VERSION >= 12080
  if (s == nullptr || s == cudaStreamLegacy || batch_api_refused.load(std::memory_order_relaxed)) return false;
  static const bool driver_ok = [] {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return v >= 12080;
  }();
  return driver_ok;
#  else
  return false;
#  endif
}

/// What a copy of runs on `s` may use (the planner's input).
[[nodiscard]] inline copy_paths_available paths_available(cudaStream_t s, bool peer_access = true,
                                                          bool host_pinned = false) noexcept {
  return {batch_api_available(s), batched_copy_hook.load() != nullptr, peer_access, host_pinned};
}

/// Queues `runs` on `s` as one cudaMemcpyBatchAsync. The sources are device memory or pinned
/// staging written in stream order before, so they are read in stream order
/// (cudaMemcpySrcAccessOrderStream); one attribute entry covers every copy (attrsIdxs {0}).
/// Returns false, having queued nothing, when the runtime or driver does not support the call
/// (remembered: later calls go straight to single copies); throws cuda_error for other failures,
/// naming the copy that failed where the runtime says (failIdx, CUDA 12.8 and 12.9).
[[nodiscard]] inline bool copy_runs_batch_api([[maybe_unused]] std::span<const copy_run> runs,
                                              [[maybe_unused]] cudaStream_t s) {
#  if CUDART_VERSION >= 12080
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<std::size_t> sizes;
  dsts.reserve(runs.size());
  srcs.reserve(runs.size());
  sizes.reserve(runs.size());
  for (const auto& r : runs) {
    if (r.bytes == 0) continue;
    dsts.push_back(r.dst);
    srcs.push_back(r.src);
    sizes.push_back(r.bytes);
  }
  if (sizes.empty()) return true;
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagDefault;
  std::size_t attr_index = 0;
#    if CUDART_VERSION >= 13000
  const cudaError_t r =
      cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &attr_index, 1, s);
  const std::size_t fail_index = SIZE_MAX;
#    else
  std::size_t fail_index = SIZE_MAX;
  const cudaError_t r =
      cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &attr_index, 1, &fail_index, s);
#    endif
  if (r == cudaErrorNotSupported || r == cudaErrorCallRequiresNewerDriver) {
    (void)cudaGetLastError();
    batch_api_refused.store(true, std::memory_order_relaxed);
    return false;
  }
  if (r != cudaSuccess && fail_index < sizes.size()) {
    check_cuda(r, "cudaMemcpyBatchAsync (copy " + std::to_string(fail_index) + " of " + std::to_string(sizes.size()) +
                      ", " + std::to_string(sizes[fail_index]) + " bytes)");
  }
  check_cuda(r, "cudaMemcpyBatchAsync(" + std::to_string(sizes.size()) + " copies)");
  stats().batch_api_calls.fetch_add(1, std::memory_order_relaxed);
  stats().batch_api_copies.fetch_add(sizes.size(), std::memory_order_relaxed);
  return true;
#  else
  return false;
#  endif
}

/// `runs` on `s` by cudaMemcpyBatchAsync where the planner's count allows and the call is
/// available, else one cudaMemcpyAsync each (`kind` as for cudaMemcpyAsync). For the pieces of
/// a staged transfer, whose host end is pinned staging.
inline void copy_runs_batch_or_single(std::span<const copy_run> runs, cudaMemcpyKind kind, cudaStream_t s) {
  if (runs.size() >= batch_api_min_count && batch_api_available(s) && copy_runs_batch_api(runs, s)) return;
  for (const auto& r : runs) DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(r.dst, r.src, r.bytes, kind, s));
}

/// Host leaves at least this large are checked for being pinned already; those are read by the
/// copy engine directly instead of being staged (a host memcpy would cost more than the copy).
inline constexpr std::size_t pinned_source_min_bytes = direct_pinned_min_average_bytes;

[[nodiscard]] inline bool is_pinned_host(const void* p) noexcept {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

/// Pinned staging buffers of one size for one transfer, from the process's staging pool
/// (staging_memory(), memory/registry.hpp). `next()` gives a buffer no queued copy uses any more:
/// an idle one, the oldest one whose copy has completed, or a fresh one from the pool while fewer
/// than `max_in_flight` bytes are out, so the host does not wait for a stream that is still busy
/// with earlier work; past that it waits for the oldest. The pool's synchronous allocate hands
/// out only blocks whose stream-ordered frees have completed, so the host may write a fresh
/// buffer at once. `used(b, ev, s)` hands a buffer back with the event after its last copy (the
/// ring owns the event) and the stream that copy was queued on. The destructor returns every
/// buffer to the pool: those still in use with a stream-ordered free on their stream (RMM's and
/// the CUDA stream-ordered allocator's rule: a free queued after the last use), the others at
/// once; a buffer taken and not handed back goes back at once, so on an error path the caller
/// first waits for the copies it queued.
class staging_ring {
 public:
  staging_ring(std::size_t buffer_bytes, std::size_t max_in_flight)
      : pool_(&staging_memory()),
        bytes_(buffer_bytes),
        max_buffers_(std::max<std::size_t>(2, max_in_flight / std::max<std::size_t>(1, buffer_bytes))) {}
  staging_ring(const staging_ring&) = delete;
  staging_ring& operator=(const staging_ring&) = delete;
  ~staging_ring() {
    for (auto& b : busy_) {
      if (cuda_calls_allowed()) (void)cudaEventDestroy(b.done);
      try {
        pool_->deallocate_async(b.p, bytes_, 256, b.stream);
      } catch (...) {
        // The free's event could not be recorded: wait for the copy, then free at once.
        if (cuda_calls_allowed()) (void)cudaStreamSynchronize(b.stream);
        free_now(b.p);
      }
    }
    for (std::byte* p : idle_) free_now(p);
  }

  [[nodiscard]] std::byte* next() {
    if (idle_.empty() && !busy_.empty()) {
      const cudaError_t r = cudaEventQuery(busy_.front().done);  // NotReady: a status, not the last error
      if (r != cudaErrorNotReady || busy_.size() >= max_buffers_) {
        if (r == cudaErrorNotReady) DEVICEKIT_CUDA_CHECK(cudaEventSynchronize(busy_.front().done));
        (void)cudaEventDestroy(busy_.front().done);
        idle_.push_back(busy_.front().p);
        busy_.pop_front();
      }
    }
    if (idle_.empty()) idle_.push_back(static_cast<std::byte*>(pool_->allocate(bytes_)));
    std::byte* p = idle_.back();
    idle_.pop_back();
    taken_.push_back(p);
    return p;
  }

  void used(std::byte* p, cudaEvent_t done, cudaStream_t s) {
    std::erase(taken_, p);
    busy_.push_back({p, done, s});
  }

  /// Buffers taken and not handed back become idle (their copies were not queued, or the caller
  /// has waited for them).
  void abandon_taken() noexcept {
    idle_.insert(idle_.end(), taken_.begin(), taken_.end());
    taken_.clear();
  }

 private:
  struct busy_buffer {
    std::byte* p;
    cudaEvent_t done;
    cudaStream_t stream;
  };

  void free_now(std::byte* p) noexcept {
    try {
      pool_->deallocate(p, bytes_);
    } catch (...) {
      // Only a foreign pointer or a wrong size throws, neither of which the ring can produce.
    }
  }

  device_memory* pool_;
  std::size_t bytes_;
  std::size_t max_buffers_;
  std::deque<busy_buffer> busy_;
  std::vector<std::byte*> idle_;
  std::vector<std::byte*> taken_;
};

/// A byte range of a transfer's staging space [0, total) that holds part of one source or
/// destination range: `at` is where the range begins in the staging space.
struct staged_range {
  std::size_t at;
  std::size_t bytes;
};

/// Calls f(range index, offset in range, offset in [lo, hi), length) for each part of `ranges`
/// (sorted by `at`, not overlapping) inside [lo, hi); `cursor` carries the first range that may
/// still overlap from one call to the next (chunks come in increasing order).
template <class F>
void for_each_part(std::span<const staged_range> ranges, std::size_t& cursor, std::size_t lo, std::size_t hi, F&& f) {
  while (cursor < ranges.size() && ranges[cursor].at + ranges[cursor].bytes <= lo) ++cursor;
  for (std::size_t k = cursor; k < ranges.size() && ranges[k].at < hi; ++k) {
    const std::size_t a = std::max(lo, ranges[k].at);
    const std::size_t z = std::min(hi, ranges[k].at + ranges[k].bytes);
    if (a < z) f(k, a - ranges[k].at, a - lo, z - a);
  }
}

/// The staging buffer size for a transfer of `total` bytes: all of it up to single_stage_limit.
[[nodiscard]] inline std::size_t staging_buffer_bytes(std::size_t total) noexcept {
  return total <= single_stage_limit ? total : staging_chunk_bytes;
}

inline void copy_staged_host_items_to_device(std::span<const copy_item> items, cudaStream_t s);

/// Host items -> device memory on stream `s`. Large leaves in pinned memory go directly (the
/// copy engine reads them after this returns: keep them unchanged until `s` gets there); the
/// rest through pinned staging.
inline void copy_host_items_to_device(std::span<const copy_item> items, cudaStream_t s) {
  std::vector<copy_item> staged;
  std::vector<copy_item> direct;
  staged.reserve(items.size());
  for (const auto& it : items) {
    (it.bytes >= pinned_source_min_bytes && is_pinned_host(it.src) ? direct : staged).push_back(it);
  }
  // Staged first: its one copy spans the gaps between its leaves, which may hold direct ones.
  copy_staged_host_items_to_device(staged, s);
  std::vector<copy_run> pinned;
  pinned.reserve(direct.size());
  for (const auto& it : direct) pinned.push_back({it.src, it.src_device, it.dst, it.bytes});
  copy_runs_batch_or_single(pinned, cudaMemcpyHostToDevice, s);
  stats().host_to_device_transfers.fetch_add(direct.size(), std::memory_order_relaxed);
}

/// Host items -> device memory on stream `s`, through pinned staging (see the file comment). The
/// destinations lie in one block in increasing order (placement lays them out so); the range they
/// span goes in one copy per chunk, gaps included. The host packs chunk k+1 while the copy engine
/// moves chunk k, and does not wait for `s` (see staging_ring).
inline void copy_staged_host_items_to_device(std::span<const copy_item> items, cudaStream_t s) {
  std::byte* begin = nullptr;
  std::byte* end = nullptr;
  for (const auto& it : items) {
    if (it.bytes == 0) continue;
    if (begin == nullptr || it.dst < begin) begin = it.dst;
    if (end == nullptr || it.dst + it.bytes > end) end = it.dst + it.bytes;
  }
  if (begin == nullptr) return;
  const auto len = static_cast<std::size_t>(end - begin);
  std::vector<staged_range> ranges;
  ranges.reserve(items.size());
  for (const auto& it : items) ranges.push_back({static_cast<std::size_t>(it.dst - begin), it.bytes});
  const std::size_t chunk = staging_buffer_bytes(len);
  staging_ring ring(chunk, max_staging_in_flight);
  std::size_t cursor = 0;
  std::size_t chunks = 0;
  try {
    for (std::size_t lo = 0; lo < len; lo += chunk, ++chunks) {
      const std::size_t hi = std::min(len, lo + chunk);
      std::byte* buf = ring.next();
      for_each_part(ranges, cursor, lo, hi, [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
        bulk_copy(buf + to, items[k].src + from, n);
      });
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(begin + lo, buf, hi - lo, cudaMemcpyHostToDevice, s));
      ring.used(buf, record_event(s), s);
    }
  } catch (...) {
    // Copies queued before the failure still read their buffers (the one whose event was not
    // recorded would otherwise go back at once): let them finish first.
    (void)cudaStreamSynchronize(s);
    ring.abandon_taken();
    throw;
  }
  stats().host_to_device_transfers.fetch_add(chunks, std::memory_order_relaxed);
}

/// Device items of one device -> host memory (any host destinations), through pinned staging:
/// items that lie close together in one allocation come down in one copy. Above
/// single_stage_limit in chunks through two buffers: the host unpacks chunk k while the copy
/// engine brings chunk k+1. The copies are queued on `*s` (a stream of `dev`), or, for nullptr,
/// on dev's stream for calls without a stream (default_ordered_stream). Returns when the bytes
/// are there.
inline void copy_device_group_to_host(std::span<const copy_item> items, device dev, const stream_ref* s = nullptr) {
  struct run {
    const std::byte* src;
    std::size_t bytes;
  };
  std::vector<run> runs;
  std::vector<staged_range> run_ranges;   // where each run lies in the staging space
  std::vector<staged_range> item_ranges;  // where each item lies in it
  std::size_t total = 0;
  const copy_item* prev = nullptr;
  for (const auto& it : items) {
    // Merge with the previous run when in the same allocation, after it, with a gap below 64 KiB.
    if (prev != nullptr && it.src_owner != nullptr && it.src_owner == prev->src_owner &&
        it.src >= prev->src + prev->bytes && it.src - (prev->src + prev->bytes) <= (std::ptrdiff_t{64} << 10)) {
      const auto grown = static_cast<std::size_t>(it.src + it.bytes - runs.back().src);
      total += grown - runs.back().bytes;
      runs.back().bytes = grown;
      run_ranges.back().bytes = grown;
    } else {
      runs.push_back({it.src, it.bytes});
      run_ranges.push_back({total, it.bytes});
      total += it.bytes;
    }
    item_ranges.push_back({run_ranges.back().at + static_cast<std::size_t>(it.src - runs.back().src), it.bytes});
    prev = &it;
  }
  if (total == 0) return;
  const std::size_t chunk = staging_buffer_bytes(total);
  const std::size_t chunks = (total + chunk - 1) / chunk;
  scoped_device on(dev.ordinal());
  const stream_ref st = s != nullptr ? *s : stream_ref(default_ordered_stream(dev));
  // Two buffers: a buffer is free again once the host has unpacked it (its copy had completed), so
  // both go back with synchronous frees.
  device_memory& pool = staging_memory();
  std::byte* buf[2] = {static_cast<std::byte*>(pool.allocate(chunk)), nullptr};
  cudaEvent_t arrived[2] = {nullptr, nullptr};
  std::size_t run_cursor = 0;
  std::size_t item_cursor = 0;
  auto bring = [&](std::size_t c) {
    const std::size_t lo = c * chunk;
    const std::size_t hi = std::min(total, lo + chunk);
    if (buf[c % 2] == nullptr) buf[c % 2] = static_cast<std::byte*>(pool.allocate(chunk));
    std::byte* b = buf[c % 2];
    std::vector<copy_run> pieces;
    for_each_part(run_ranges, run_cursor, lo, hi, [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
      pieces.push_back({runs[k].src + from, dev, b + to, n});
    });
    copy_runs_batch_or_single(pieces, cudaMemcpyDeviceToHost, st.native_handle());
    arrived[c % 2] = record_event(st.native_handle());
  };
  auto give_back = [&] {
    for (std::byte* b : buf) {
      if (b != nullptr) pool.deallocate(b, chunk);
    }
  };
  try {
    bring(0);
    for (std::size_t c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) bring(c + 1);
      const cudaEvent_t ev = std::exchange(arrived[c % 2], nullptr);
      const cudaError_t r = cudaEventSynchronize(ev);
      (void)cudaEventDestroy(ev);
      DEVICEKIT_CUDA_CHECK(r);
      const std::size_t lo = c * chunk;
      for_each_part(item_ranges, item_cursor, lo, std::min(total, lo + chunk),
                    [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
                      bulk_copy(items[k].dst + from, buf[c % 2] + to, n);
                    });
    }
  } catch (...) {
    // Copies queued before the failure still write into the staging: it goes back to the cache
    // only once they are done, or the next user's data would be overwritten.
    (void)cudaStreamSynchronize(st.native_handle());
    for (cudaEvent_t& ev : arrived) {
      if (ev != nullptr) (void)cudaEventDestroy(ev);
    }
    give_back();
    throw;
  }
  give_back();
  stats().device_to_host_transfers.fetch_add(runs.size(), std::memory_order_relaxed);
}

/// Device items -> host memory, grouped by source device, each group on its device's stream for
/// calls without a stream. Returns when the bytes are there.
inline void copy_device_items_to_host(std::span<const copy_item> items) {
  std::vector<device> sources;
  for (const auto& it : items) {
    if (std::find(sources.begin(), sources.end(), it.src_device) == sources.end()) sources.push_back(it.src_device);
  }
  if (sources.size() == 1) return copy_device_group_to_host(items, sources.front());
  for (const device from : sources) {
    std::vector<copy_item> group;
    for (const auto& it : items) {
      if (it.src_device == from) group.push_back(it);
    }
    copy_device_group_to_host(group, from);
  }
}

/// The host side of one batched copy (place/batched_copy.cuh launches the kernel): on the
/// device of `s` (whatever the caller has current; restored after), the three tables (sources,
/// destinations, sizes) go up through pinned staging (staging_memory()) and the kernel's scratch
/// comes from that device's pool (default_memory(device), counted in scratch_memory_stats), all
/// in stream order, so nothing waits on the host and the scratch is cached: the driver's default
/// pool, with its release threshold of 0, would hand it back to the system at every
/// synchronisation (CUDA runtime API, cudaMemPoolAttrReleaseThreshold). `temp_bytes()` gives the
/// kernel's scratch size; `launch(d_srcs, d_dsts, d_sizes, temp, temp_bytes)` queues the kernel
/// on `s` and returns its error.
template <class TempBytes, class Launch>
void batched_copy_plumbing(const void* const* srcs, void* const* dsts, const std::size_t* sizes, std::size_t count,
                           cudaStream_t s, TempBytes&& temp_bytes, Launch&& launch) {
  if (count == 0) return;
  int ordinal = 0;
  DEVICEKIT_CUDA_CHECK(is_default_stream(s) ? cudaGetDevice(&ordinal) : cudaStreamGetDevice(s, &ordinal));
  scoped_device on(ordinal);
  const std::size_t array_bytes = count * sizeof(void*);
  static_assert(sizeof(void*) == sizeof(std::size_t), "the three tables share one layout");
  const std::size_t tables = (3 * array_bytes + 255) / 256 * 256;
  const std::size_t temp = temp_bytes();
  const std::size_t scratch_bytes = tables + temp;

  device_memory& staging = staging_memory();
  auto* host = static_cast<std::byte*>(staging.allocate(3 * array_bytes));
  note_host_access(host, 3 * array_bytes, true);
  std::memcpy(host, srcs, array_bytes);
  std::memcpy(host + array_bytes, dsts, array_bytes);
  std::memcpy(host + 2 * array_bytes, sizes, array_bytes);

  std::optional<scratch_block> scratch;
  try {
    scratch.emplace(device::cuda(ordinal), scratch_bytes, s);
  } catch (...) {
    staging.deallocate(host, 3 * array_bytes);
    throw;
  }
  auto* dev = static_cast<std::byte*>(scratch->get());
  const cudaError_t up = cudaMemcpyAsync(dev, host, 3 * array_bytes, cudaMemcpyHostToDevice, s);
  if (up != cudaSuccess) {
    staging.deallocate(host, 3 * array_bytes);
    scratch->release(s);
    DEVICEKIT_CUDA_CHECK(up);
  }
  try {
    staging.deallocate_async(host, 3 * array_bytes, 256, s);  // after the upload, in stream order
  } catch (...) {
    (void)cudaStreamSynchronize(s);  // the upload still reads the staging
    staging.deallocate(host, 3 * array_bytes);
    scratch->release(s);
    throw;
  }
  const cudaError_t run =
      launch(reinterpret_cast<const void* const*>(dev), reinterpret_cast<void* const*>(dev + array_bytes),
             reinterpret_cast<const std::size_t*>(dev + 2 * array_bytes), dev + tables, temp);
  scratch->release(s);  // after the kernel, in stream order
  DEVICEKIT_CUDA_CHECK(run);
}

/// Runs whose two ends are on the stream's device, on stream `s`: the planner's choice among one
/// CUB launch, one cudaMemcpyBatchAsync and one cudaMemcpyAsync per run.
inline void copy_same_device(std::span<const copy_run> runs, cudaStream_t s) {
  std::size_t total = 0;
  for (const auto& r : runs) total += r.bytes;
  const copy_path path = plan_copy(copy_direction::device_to_device, runs.size(), total, paths_available(s));
  if (path == copy_path::none) return;
  if (path == copy_path::cub_batched) {
    std::vector<const void*> srcs;
    std::vector<void*> dsts;
    std::vector<std::size_t> sizes;
    for (const auto& r : runs) {
      srcs.push_back(r.src);
      dsts.push_back(r.dst);
      sizes.push_back(r.bytes);
    }
    if (auto hook = batched_copy_hook.load();
        hook != nullptr && hook(srcs.data(), dsts.data(), sizes.data(), runs.size(), s)) {
      stats().batched_launches.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  if (path == copy_path::batch_api && copy_runs_batch_api(runs, s)) return;
  for (const auto& r : runs) {
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(r.dst, r.src, r.bytes, cudaMemcpyDeviceToDevice, s));
  }
  stats().device_to_device_copies.fetch_add(runs.size(), std::memory_order_relaxed);
}

/// Runs on another device `from` -> the block on `to`, on stream `s` (of `to`).
inline void copy_other_device(std::span<const copy_run> runs, device from, device to, cudaStream_t s) {
  std::size_t bytes = 0;
  for (const auto& r : runs) bytes += r.bytes;
  const bool peer = ensure_peer_access(to.ordinal(), from.ordinal());
  const copy_path path = plan_copy(copy_direction::peer, runs.size(), bytes, paths_available(s, peer));
  if (path == copy_path::none) return;
  // The copy must not start before the source's queued work: callers order that (see place).
  // With peer access enabled, cudaMemcpyBatchAsync's pointers of both devices are reachable
  // through unified addressing as cudaMemcpyAsync's with cudaMemcpyDefault are.
  if (path == copy_path::batch_api && copy_runs_batch_api(runs, s)) return;
  if (path != copy_path::staged) {
    for (const auto& r : runs) {
      DEVICEKIT_CUDA_CHECK(cudaMemcpyPeerAsync(r.dst, to.ordinal(), r.src, from.ordinal(), r.bytes, s));
    }
    stats().peer_copies.fetch_add(runs.size(), std::memory_order_relaxed);
    return;
  }
  // No peer access: down to pinned host memory on the source's placement stream, then up on `s`,
  // in chunks; `s` waits for each chunk's arrival on an event, the host for nothing but buffers.
  std::vector<staged_range> ranges;
  std::size_t total = 0;
  for (const auto& r : runs) {
    ranges.push_back({total, r.bytes});
    total += r.bytes;
  }
  if (total == 0) return;
  const std::size_t chunk = staging_buffer_bytes(total);
  const auto& src_stream = placement_stream(from);
  // The caller has ordered `s` after the work that writes the sources; the copies down to the
  // host run on the source device's stream, which must be ordered after `s` too, or they could
  // read the sources before that work is done.
  stream_waits_for(src_stream.native_handle(), s);
  staging_ring ring(chunk, max_staging_in_flight);
  std::size_t down_cursor = 0;
  std::size_t up_cursor = 0;
  try {
    for (std::size_t lo = 0; lo < total; lo += chunk) {
      const std::size_t hi = std::min(total, lo + chunk);
      std::byte* buf = ring.next();
      cudaEvent_t arrived = nullptr;
      {
        scoped_device on(from.ordinal());
        std::vector<copy_run> down;
        for_each_part(ranges, down_cursor, lo, hi, [&](std::size_t k, std::size_t at, std::size_t into, std::size_t n) {
          down.push_back({runs[k].src + at, from, buf + into, n});
        });
        copy_runs_batch_or_single(down, cudaMemcpyDeviceToHost, src_stream.native_handle());
        arrived = record_event(src_stream.native_handle());
      }
      // An event may be waited for by a stream of another device (CUDA runtime API,
      // cudaStreamWaitEvent); destroying it once the wait is queued is allowed.
      const cudaError_t waited = cudaStreamWaitEvent(s, arrived, 0);
      (void)cudaEventDestroy(arrived);
      DEVICEKIT_CUDA_CHECK(waited);
      std::vector<copy_run> up;
      for_each_part(ranges, up_cursor, lo, hi, [&](std::size_t k, std::size_t at, std::size_t from_buf, std::size_t n) {
        up.push_back({buf + from_buf, device::cpu(), runs[k].dst + at, n});
      });
      copy_runs_batch_or_single(up, cudaMemcpyHostToDevice, s);
      ring.used(buf, record_event(s), s);
    }
  } catch (...) {
    {
      scoped_device on(from.ordinal(), std::nothrow);
      (void)cudaStreamSynchronize(src_stream.native_handle());
    }
    (void)cudaStreamSynchronize(s);
    ring.abandon_taken();
    throw;
  }
  stats().staged_device_copies.fetch_add(runs.size(), std::memory_order_relaxed);
}

#endif  // DEVICEKIT_HAS_CUDA

/// Copies `items` to their destinations on `dst`. For a cuda `dst` the copies are queued on `s`
/// (a stream of `dst`) and may still run when this returns; for a cpu `dst` they are done. For a
/// cuda `dst`, the destinations of host items must lie in one allocation (see above).
inline void copy_items(std::span<const copy_item> items, device dst, [[maybe_unused]] native_stream_handle s) {
  const bool all_host =
      std::all_of(items.begin(), items.end(), [](const copy_item& it) { return it.src_device.is_cpu(); });
  if (dst.is_cpu() && all_host) {
    copy_host_items(items);  // the common host case, without sorting items by source
    return;
  }
  std::vector<copy_item> host;
  std::vector<copy_item> on_device;
  for (const auto& it : items) {
    if (it.bytes == 0) continue;
    (it.src_device.is_cpu() ? host : on_device).push_back(it);
  }
  if (dst.is_cpu()) {
    copy_host_items(host);
#if DEVICEKIT_HAS_CUDA
    copy_device_items_to_host(on_device);
#endif
    return;
  }
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dst.ordinal());
  copy_host_items_to_device(host, s);  // first: its one copy may span regions the others fill
  // Grouped by source device, in order of first appearance.
  std::vector<device> sources;
  for (const auto& it : on_device) {
    if (std::find(sources.begin(), sources.end(), it.src_device) == sources.end()) sources.push_back(it.src_device);
  }
  for (const device from : sources) {
    std::vector<copy_item> group;
    for (const auto& it : on_device) {
      if (it.src_device == from) group.push_back(it);
    }
    const auto runs = coalesce(group);
    if (from == dst) {
      copy_same_device(runs, s);
    } else {
      copy_other_device(runs, from, dst, s);
    }
  }
#else
  throw config_error("cannot copy to " + dst.str() + ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)");
#endif
}

/// Copies a list of runs (each: `bytes` from `src` on `src_device` to `dst`) into memory of
/// `dst_device`, the entry for copies that are not a tree, such as the NCCL layer's bucket packing.
/// For a cuda `dst_device` the copies are queued on `s` (a stream of that device; its
/// destinations must not overlap each other or any source) and may still run when this returns;
/// device sources must be ready (work that writes them on other streams finished or waited for).
/// Runs are grouped by source device, and each group goes the planner's way (copy_planner.hpp):
/// same device: CUB, cudaMemcpyBatchAsync or single copies; other devices: peer copies, batched
/// where several, else staged through host memory when the pair has no peer access; host
/// sources: packed into one pinned buffer (up to single_stage_limit) and scattered from it in one
/// batch, else one staged transfer per run. For a cpu `dst_device` the copies are done on return.
inline void copy_runs(std::span<const copy_run> runs, device dst_device, [[maybe_unused]] native_stream_handle s) {
  std::vector<copy_item> items;
  items.reserve(runs.size());
  for (const auto& r : runs) {
    if (r.bytes != 0) items.push_back({r.src, r.src_device, nullptr, r.dst, r.bytes});
  }
  if (dst_device.is_cpu()) return copy_items(items, dst_device, s);
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dst_device.ordinal());
  std::vector<copy_item> on_device;
  std::vector<copy_item> host;
  std::size_t host_bytes = 0;
  for (const auto& it : items) {
    if (it.src_device.is_cpu()) {
      host.push_back(it);
      host_bytes += it.bytes;
    } else {
      on_device.push_back(it);
    }
  }
  if (!host.empty() && host_bytes <= single_stage_limit && host.size() > 1) {
    // One pack, one submission: the pieces go from pinned staging to their places, freed in
    // stream order after them.
    device_memory& staging = staging_memory();
    auto* buf = static_cast<std::byte*>(staging.allocate(host_bytes));
    std::vector<copy_run> pieces;
    std::size_t at = 0;
    for (const auto& it : host) {
      bulk_copy(buf + at, it.src, it.bytes);
      pieces.push_back({buf + at, device::cpu(), it.dst, it.bytes});
      at += it.bytes;
    }
    try {
      copy_runs_batch_or_single(pieces, cudaMemcpyHostToDevice, s);
      staging.deallocate_async(buf, host_bytes, 256, s);
    } catch (...) {
      (void)cudaStreamSynchronize(s);  // queued pieces still read the buffer
      staging.deallocate(buf, host_bytes);
      throw;
    }
    stats().host_to_device_transfers.fetch_add(1, std::memory_order_relaxed);
  } else {
    for (const auto& it : host) copy_host_items_to_device(std::span<const copy_item>(&it, 1), s);
  }
  copy_items(on_device, dst_device, s);
#else
  throw config_error("cannot copy to " + dst_device.str() +
                     ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)");
#endif
}

}  // namespace devicekit::detail
