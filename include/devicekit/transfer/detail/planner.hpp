#pragma once
/// \file
/// The copy planner: how the copy engine (transfer/detail/copy.hpp) moves a list of runs (source,
/// destination, bytes) of one direction on one stream. No locks: a pure decision on (direction,
/// count, bytes, what is available), so that tests check it without copying anything:
///
///   plan_copy(direction, count, total_bytes, available)   -> copy_path
///
///   single        one cudaMemcpyAsync (cudaMemcpyPeerAsync between devices) per run
///   batch_api     one cudaMemcpyBatchAsync for all runs (CUDA runtime >= 12.8: a runtime API
///                 call, no kernel, so g++ translation units have it too)
///   cub_batched   one cub::DeviceMemcpy::Batched launch (same device; only when a .cu file of
///                 the program includes transfer/batched_copy.cuh)
///   staged        host bytes packed into pinned staging and moved in one transfer (per chunk):
///                 the only asynchronous way for pageable host memory, and cheaper than many
///                 small transfers for small runs; between devices without peer access, the
///                 way through host memory
///
/// The device-to-device thresholds below were set from the paths measured side by side on an H200
/// (benchmarks/bench_place_cuda.cu, "copy_planner.*" entries; benchmarks/results/2026-11-27-h200);
/// the host ones still owe such a measurement.
#include <cstddef>

namespace devicekit::detail {

/// Where the two ends of a list of runs are.
enum class copy_direction {
  host_to_device,
  device_to_host,
  device_to_device,  ///< both ends on one device
  peer,              ///< device memory of two different devices
};

/// How the runs are moved (see the file comment).
enum class copy_path { none, single, batch_api, cub_batched, staged };

[[nodiscard]] constexpr const char* to_string(copy_path p) noexcept {
  switch (p) {
    case copy_path::none: return "none";
    case copy_path::single: return "single";
    case copy_path::batch_api: return "batch_api";
    case copy_path::cub_batched: return "cub_batched";
    case copy_path::staged: return "staged";
  }
  return "?";
}

/// What a call may use: the planner never picks a path that is not there.
struct copy_paths_available {
  bool batch_api = false;    ///< cudaMemcpyBatchAsync: runtime >= 12.8, driver supports it, stream not legacy NULL
  bool cub_batched = false;  ///< batched_copy_hook set (a .cu file included transfer/batched_copy.cuh)
  bool peer_access = true;   ///< for copy_direction::peer: the destination device can access the source's
  bool host_pinned = false;  ///< for host_to_device / device_to_host: the host ends are page-locked
};

/// cub::DeviceMemcpy::Batched for at least this many runs averaging at most this size: the
/// kernel copies many small buffers with all SMs at once ("DeviceMemcpy ... for copying a large
/// number of small buffers", CUB documentation), at the price of a launch plus the upload of the
/// three pointer tables; the per-copy cost of cudaMemcpyAsync is about 2-7 us of host time
/// (driver submission; NVIDIA's "How to Optimize Data Transfers in CUDA C/C++" and the CUDA Best
/// Practices Guide, "Data transfer between host and device", advise batching small transfers for
/// that reason). Measured on an H200 against one cudaMemcpyAsync per run: the launch loses at 4
/// runs (0.79-0.90) and wins from 8 (1.34-1.57 at 8 runs of 256 B to 1 MiB, where
/// cudaMemcpyBatchAsync gains 1.05-1.16), up to 19-44 at 1,024 runs; runs of 1 MiB still gain
/// 1.3-6.6 from 8 to 256 of them. Large buffers gain nothing from SMs that a plain copy already
/// runs at full bandwidth: 4 runs of 16 MiB took 63 us in the kernel against 51 us per run.
inline constexpr std::size_t batched_copy_min_count = 8;
inline constexpr std::size_t batched_copy_max_average_bytes = std::size_t{1} << 20;

/// cudaMemcpyBatchAsync from this many runs on: one runtime call instead of `count`, each of
/// those costing the 2-7 us above; the batch keeps stream order as a whole and only gives up
/// ordering among its own copies, which disjoint runs do not need (CUDA runtime API,
/// cudaMemcpyBatchAsync). No size limit: the copies are the same DMA transfers whatever their
/// size, submitted once. Measured on an H200: 0.99-1.08 of per-run copies at 4 runs, 1.04-1.19
/// from 8 on; at 2 runs it saves nothing (0.99-1.07), so single copies stay below 4.
inline constexpr std::size_t batch_api_min_count = 4;

/// Host runs in pinned memory at least this large on average are copied where they lie rather
/// than packed into staging: packing costs a host memcpy (about 10 GB/s, so ~100 us per MiB),
/// while a direct transfer costs only its submission (2-7 us). Below it, packing many small runs
/// into one transfer is cheaper than their submissions.
inline constexpr std::size_t direct_pinned_min_average_bytes = std::size_t{1} << 20;

/// The path for `count` runs of `total_bytes` in `direction`, given what is available.
[[nodiscard]] constexpr copy_path plan_copy(copy_direction direction, std::size_t count, std::size_t total_bytes,
                                            copy_paths_available available) noexcept {
  if (count == 0 || total_bytes == 0) return copy_path::none;
  const std::size_t average = total_bytes / count;
  const bool batch = available.batch_api && count >= batch_api_min_count;
  switch (direction) {
    case copy_direction::host_to_device:
    case copy_direction::device_to_host:
      // Pageable memory cannot be read or written asynchronously by the copy engine: it must go
      // through pinned staging ("API synchronization behavior", CUDA runtime API).
      if (!available.host_pinned || average < direct_pinned_min_average_bytes) return copy_path::staged;
      return batch ? copy_path::batch_api : copy_path::single;
    case copy_direction::device_to_device:
      if (available.cub_batched && count >= batched_copy_min_count && average <= batched_copy_max_average_bytes) {
        return copy_path::cub_batched;
      }
      return batch ? copy_path::batch_api : copy_path::single;
    case copy_direction::peer:
      // Without peer access the bytes must pass through host memory (cudaDeviceCanAccessPeer).
      if (!available.peer_access) return copy_path::staged;
      return batch ? copy_path::batch_api : copy_path::single;
  }
  return copy_path::single;
}

}  // namespace devicekit::detail
