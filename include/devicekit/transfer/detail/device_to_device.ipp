#pragma once
/// \file
/// The definitions behind transfer/detail/device_to_device.hpp: same-device, peer and staged device copies.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/device_to_device.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/device_ops.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/transfer/detail/batch_api.hpp>
#  include <devicekit/transfer/detail/cub_batched.hpp>
#  include <devicekit/transfer/detail/staging_ring.hpp>
#  include <devicekit/transfer/detail/streams.hpp>

#  include <algorithm>
#  include <cstddef>
#  include <new>
#  include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL bool ensure_peer_access(int dst, int src) {
  if (dst == src) return true;
  return try_enable_peer_access(dst, src).result == peer_access_state::status::enabled;
}

DEVICEKIT_DECL copy_paths_available paths_available(cudaStream_t s, bool peer_access, bool host_pinned) noexcept {
  return {batch_api_available(s), batched_copy_hook.load() != nullptr, peer_access, host_pinned};
}

DEVICEKIT_DECL void copy_same_device(std::span<const copy_run> runs, cudaStream_t s) {
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

DEVICEKIT_DECL void copy_other_device(std::span<const copy_run> runs, device from, device to, cudaStream_t s) {
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
