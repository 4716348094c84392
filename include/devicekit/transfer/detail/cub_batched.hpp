#pragma once
/// \file
/// The host side of CUB batched copies: the hook that transfer/batched_copy.cuh sets when a .cu
/// file includes it, and the plumbing that stages its three tables and scratch in stream order.
/// No locks: the hook is an atomic pointer, set once at static initialisation.
#include <devicekit/core/config.hpp>
#include <devicekit/core/stream.hpp>

#include <atomic>
#include <cstddef>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/detail/host_access.hpp>
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/memory/cuda_resources.hpp>
#  include <devicekit/memory/registry.hpp>

#  include <cstring>
#  include <optional>
#endif

namespace devicekit::detail {

/// Set by transfer/batched_copy.cuh when a .cu file includes it: copies `count` buffers on
/// `stream` in one launch (device pointers, all on the stream's device). Returns false to decline.
using batched_copy_fn = bool (*)(const void* const* srcs, void* const* dsts, const std::size_t* sizes,
                                 std::size_t count, native_stream_handle stream);
inline std::atomic<batched_copy_fn> batched_copy_hook{nullptr};

#if DEVICEKIT_HAS_CUDA

/// The host side of one batched copy (transfer/batched_copy.cuh launches the kernel): on the
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

#endif  // DEVICEKIT_HAS_CUDA

}  // namespace devicekit::detail
