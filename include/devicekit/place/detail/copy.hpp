#pragma once
/// \file
/// The copy engine behind placement: moves a list of leaves (`copy_item`: source bytes and where
/// they go in one destination block) from wherever they are to the block's device.
///
///   host -> host      one memcpy per leaf into the block
///   host -> cuda      packed into pinned staging and sent in one cudaMemcpyAsync; above
///                     `single_stage_limit` in chunks through two pinned buffers, so the host
///                     packs chunk k+1 while the copy engine moves chunk k; leaves of 1 MiB or
///                     more that are pinned already are copied directly (no host memcpy)
///   cuda -> same cuda device-to-device copies; leaves that lie in one allocation in the same order
///                     are one copy; many small ones go to `cub::DeviceMemcpy::Batched` when a .cu
///                     file of the program includes place/batched_copy.cuh
///   cuda -> other     cudaMemcpyPeerAsync where the pair supports peer access (enabled on first
///                     use), else through pinned staging on the host
///   cuda -> host      into pinned staging, then unpacked
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/detail/host_copy.hpp>
#include <devicekit/place/detail/resources.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
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

/// Leaves below these sizes, in these numbers, go to one batched kernel instead of one
/// cudaMemcpyAsync each (about 5-7 us per call): per the CUB measurements in the design notes,
/// batching wins from tens of small buffers on and loses slightly for a few large ones.
inline constexpr std::size_t batched_copy_min_count = 16;
inline constexpr std::size_t batched_copy_max_average_bytes = std::size_t{256} << 10;

/// Transfers at or below this size go through one staging area in one copy; larger ones are
/// pipelined in `staging_chunk_bytes` chunks.
inline constexpr std::size_t single_stage_limit = std::size_t{16} << 20;
inline constexpr std::size_t staging_chunk_bytes = std::size_t{8} << 20;

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

/// Creates an event, records it on `s`, and returns it (the caller owns it).
[[nodiscard]] inline cudaEvent_t record_event(cudaStream_t s) {
  cudaEvent_t ev = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const cudaError_t r = cudaEventRecord(ev, s);
  if (r != cudaSuccess) {
    (void)cudaEventDestroy(ev);
    DEVICEKIT_CUDA_CHECK(r);
  }
  return ev;
}

/// Whether `dst` can read `src`'s memory directly; enables it the first time (per process).
[[nodiscard]] inline bool ensure_peer_access(int dst, int src) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, bool> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find({dst, src}); it != known.end()) return it->second;
  int can = 0;
  DEVICEKIT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, dst, src));
  bool ok = can != 0;
  if (ok) {
    scoped_device on(dst);
    const cudaError_t r = cudaDeviceEnablePeerAccess(src, 0);
    if (r == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
    } else if (r != cudaSuccess) {
      (void)cudaGetLastError();
      ok = false;  // fall back to staging rather than fail the copy
    }
  }
  known[{dst, src}] = ok;
  return ok;
}

/// Host leaves at least this large are checked for being pinned already; those are read by the
/// copy engine directly instead of being staged (a host memcpy would cost more than the copy).
inline constexpr std::size_t pinned_source_min_bytes = std::size_t{1} << 20;

[[nodiscard]] inline bool is_pinned_host(const void* p) noexcept {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
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
  for (const auto& it : direct) {
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(it.dst, it.src, it.bytes, cudaMemcpyHostToDevice, s));
  }
  stats().host_to_device_transfers.fetch_add(direct.size(), std::memory_order_relaxed);
}

/// Host items -> device memory on stream `s`, through pinned staging (see the file comment). The
/// destinations lie in one block in increasing order (placement lays them out so); the range they
/// span goes in one copy, gaps included.
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
  auto& pool = staging_pool();
  if (len <= single_stage_limit) {
    auto* staging = static_cast<std::byte*>(pool.allocate(len));
    for (const auto& it : items) {
      bulk_copy(staging + (it.dst - begin), it.src, it.bytes);
    }
    const cudaError_t r = cudaMemcpyAsync(begin, staging, len, cudaMemcpyHostToDevice, s);
    if (r != cudaSuccess) {
      pool.deallocate(staging, len);
      DEVICEKIT_CUDA_CHECK(r);
    }
    cudaEvent_t copied = nullptr;
    try {
      copied = record_event(s);
    } catch (...) {
      // The copy is queued and reads the staging: it goes back only once the copy is done.
      (void)cudaStreamSynchronize(s);
      pool.deallocate(staging, len);
      throw;
    }
    pool.deallocate_after(staging, len, copied);
    stats().host_to_device_transfers.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Two buffers: the host fills one while the copy engine drains the other.
  const std::size_t chunk = staging_chunk_bytes;
  std::byte* buf[2] = {static_cast<std::byte*>(pool.allocate(chunk)), static_cast<std::byte*>(pool.allocate(chunk))};
  cudaEvent_t done[2] = {nullptr, nullptr};
  std::size_t cursor = 0;  // first item that may still overlap the current chunk
  std::size_t chunks = 0;
  auto give_back = [&] {
    for (int b = 0; b < 2; ++b) {
      if (done[b] != nullptr) {
        pool.deallocate_after(buf[b], chunk, done[b]);
      } else {
        pool.deallocate(buf[b], chunk);
      }
    }
  };
  try {
    for (std::size_t lo = 0; lo < len; lo += chunk, ++chunks) {
      const std::size_t hi = std::min(len, lo + chunk);
      const int b = static_cast<int>(chunks % 2);
      if (done[b] != nullptr) {
        DEVICEKIT_CUDA_CHECK(cudaEventSynchronize(done[b]));  // the copy that last read buf[b]
        (void)cudaEventDestroy(done[b]);
        done[b] = nullptr;
      }
      auto first = [&](const copy_item& it) { return static_cast<std::size_t>(it.dst - begin); };
      while (cursor < items.size() && first(items[cursor]) + items[cursor].bytes <= lo) ++cursor;
      for (std::size_t k = cursor; k < items.size() && first(items[k]) < hi; ++k) {
        const auto& it = items[k];
        const std::size_t a = std::max(lo, first(it));
        const std::size_t z = std::min(hi, first(it) + it.bytes);
        if (a < z) bulk_copy(buf[b] + (a - lo), it.src + (a - first(it)), z - a);
      }
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(begin + lo, buf[b], hi - lo, cudaMemcpyHostToDevice, s));
      done[b] = record_event(s);
    }
  } catch (...) {
    // Copies queued before the failure still read the buffers (a buffer whose event was not
    // recorded would otherwise go back at once): let them finish first.
    (void)cudaStreamSynchronize(s);
    give_back();
    throw;
  }
  give_back();
  stats().host_to_device_transfers.fetch_add(chunks, std::memory_order_relaxed);
}

/// Device items -> host memory (any host destinations), through pinned staging: items that lie
/// close together in one allocation come down in one copy. Returns when the bytes are there.
inline void copy_device_items_to_host(std::span<const copy_item> items) {
  struct span_run {
    const std::byte* src;
    device dev;
    std::size_t bytes;
    std::size_t staging_at;
  };
  std::vector<span_run> runs;
  std::vector<std::size_t> run_of(items.size());
  std::size_t total = 0;
  const copy_item* prev = nullptr;
  for (std::size_t k = 0; k < items.size(); ++k) {
    const auto& it = items[k];
    // Merge with the previous run when in the same allocation, after it, with a gap below 64 KiB.
    if (prev != nullptr && it.src_owner != nullptr && it.src_owner == prev->src_owner && it.src_device == prev->src_device &&
        it.src >= prev->src + prev->bytes && it.src - (prev->src + prev->bytes) <= (std::ptrdiff_t{64} << 10)) {
      auto& r = runs.back();
      const auto grown = static_cast<std::size_t>(it.src + it.bytes - r.src);
      total += grown - r.bytes;
      r.bytes = grown;
    } else {
      runs.push_back({it.src, it.src_device, it.bytes, total});
      total += it.bytes;
    }
    run_of[k] = runs.size() - 1;
    prev = &it;
  }
  if (total == 0) return;
  auto& pool = staging_pool();
  auto* staging = static_cast<std::byte*>(pool.allocate(total));
  std::vector<int> used;  // devices whose placement stream has copies into the staging
  try {
    for (const auto& r : runs) {
      if (r.bytes == 0) continue;
      const auto& st = placement_stream(r.dev);
      scoped_device on(r.dev.ordinal());
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(staging + r.staging_at, r.src, r.bytes, cudaMemcpyDeviceToHost, st.native_handle()));
      if (std::find(used.begin(), used.end(), r.dev.ordinal()) == used.end()) used.push_back(r.dev.ordinal());
    }
    for (int ordinal : used) placement_stream(device::cuda(ordinal)).synchronize();
    for (std::size_t k = 0; k < items.size(); ++k) {
      const auto& it = items[k];
      const auto& r = runs[run_of[k]];
      bulk_copy(it.dst, staging + r.staging_at + (it.src - r.src), it.bytes);
    }
  } catch (...) {
    // Copies queued before the failure still write into the staging: it goes back to the
    // cache only once they are done, or the next user's data would be overwritten.
    for (int ordinal : used) {
      scoped_device on(ordinal, std::nothrow);
      (void)cudaStreamSynchronize(placement_stream(device::cuda(ordinal)).native_handle());
    }
    pool.deallocate(staging, total);
    throw;
  }
  pool.deallocate(staging, total);
  stats().device_to_host_transfers.fetch_add(runs.size(), std::memory_order_relaxed);
}

/// Device items, all on the block's device, on stream `s`.
inline void copy_same_device(std::span<const copy_run> runs, cudaStream_t s) {
  std::size_t total = 0;
  for (const auto& r : runs) total += r.bytes;
  if (auto hook = batched_copy_hook.load(); hook != nullptr && runs.size() >= batched_copy_min_count &&
                                            total / runs.size() <= batched_copy_max_average_bytes) {
    std::vector<const void*> srcs;
    std::vector<void*> dsts;
    std::vector<std::size_t> sizes;
    for (const auto& r : runs) {
      srcs.push_back(r.src);
      dsts.push_back(r.dst);
      sizes.push_back(r.bytes);
    }
    if (hook(srcs.data(), dsts.data(), sizes.data(), runs.size(), s)) {
      stats().batched_launches.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  for (const auto& r : runs) {
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(r.dst, r.src, r.bytes, cudaMemcpyDeviceToDevice, s));
  }
  stats().device_to_device_copies.fetch_add(runs.size(), std::memory_order_relaxed);
}

/// Runs on another device `from` -> the block on `to`, on stream `s` (of `to`).
inline void copy_other_device(std::span<const copy_run> runs, device from, device to, cudaStream_t s) {
  if (ensure_peer_access(to.ordinal(), from.ordinal())) {
    // The copy must not start before the source's queued work: callers order that (see place).
    for (const auto& r : runs) {
      DEVICEKIT_CUDA_CHECK(cudaMemcpyPeerAsync(r.dst, to.ordinal(), r.src, from.ordinal(), r.bytes, s));
    }
    stats().peer_copies.fetch_add(runs.size(), std::memory_order_relaxed);
    return;
  }
  // No peer access: down to pinned host memory, then up to the destination.
  std::size_t total = 0;
  for (const auto& r : runs) total += r.bytes;
  auto& pool = staging_pool();
  auto* staging = static_cast<std::byte*>(pool.allocate(total));
  try {
    const auto& src_stream = placement_stream(from);
    {
      scoped_device on(from.ordinal());
      std::size_t at = 0;
      for (const auto& r : runs) {
        DEVICEKIT_CUDA_CHECK(
            cudaMemcpyAsync(staging + at, r.src, r.bytes, cudaMemcpyDeviceToHost, src_stream.native_handle()));
        at += r.bytes;
      }
    }
    src_stream.synchronize();
    std::size_t at = 0;
    for (const auto& r : runs) {
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(r.dst, staging + at, r.bytes, cudaMemcpyHostToDevice, s));
      at += r.bytes;
    }
  } catch (...) {
    pool.deallocate(staging, total);
    throw;
  }
  pool.deallocate_after(staging, total, record_event(s));
  stats().staged_device_copies.fetch_add(runs.size(), std::memory_order_relaxed);
}

#endif  // DEVICEKIT_HAS_CUDA

/// Copies `items` to their destinations on `dst`. For a cuda `dst` the copies are queued on `s`
/// (a stream of `dst`) and may still run when this returns; for a cpu `dst` they are done. For a
/// cuda `dst`, the destinations of host items must lie in one allocation (see above).
inline void copy_items(std::span<const copy_item> items, device dst, [[maybe_unused]] native_stream_handle s) {
  const bool all_host = std::all_of(items.begin(), items.end(), [](const copy_item& it) { return it.src_device.is_cpu(); });
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

}  // namespace devicekit::detail
