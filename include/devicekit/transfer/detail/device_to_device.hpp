#pragma once
/// \file
/// Device -> device copies: on one device (one CUB launch, one cudaMemcpyBatchAsync, or one
/// cudaMemcpyAsync per run, as the planner says) and between devices (peer copies where the pair
/// has peer access, else through pinned staging in chunks, the destination stream waiting for
/// each chunk on an event). No locks here: peer access is enabled once per pair under
/// core/device_ops.hpp's lock; the staging pool locks itself.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/device_ops.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/transfer/detail/batch_api.hpp>
#  include <devicekit/transfer/detail/cub_batched.hpp>
#  include <devicekit/transfer/detail/planner.hpp>
#  include <devicekit/transfer/detail/runs.hpp>
#  include <devicekit/transfer/detail/staging_ring.hpp>
#  include <devicekit/transfer/detail/streams.hpp>

#  include <algorithm>
#  include <cstddef>
#  include <new>
#  include <span>
#  include <vector>

namespace devicekit::detail {

/// Whether `dst` can read `src`'s memory directly; enables it the first time (per process),
/// through enable_peer_access's implementation (core/device_ops.hpp), which also grants access
/// to devicekit's driver pools on `src`. False when the pair has no peer support or enabling
/// failed: the caller stages through host memory instead of failing the copy.
[[nodiscard]] inline bool ensure_peer_access(int dst, int src) {
  if (dst == src) return true;
  return try_enable_peer_access(dst, src).result == peer_access_state::status::enabled;
}

/// What a copy of runs on `s` may use (the planner's input).
[[nodiscard]] inline copy_paths_available paths_available(cudaStream_t s, bool peer_access = true,
                                                          bool host_pinned = false) noexcept {
  return {batch_api_available(s), batched_copy_hook.load() != nullptr, peer_access, host_pinned};
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

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
