#pragma once
/// \file
/// Many small device-to-device copies in one launch: `cub::DeviceMemcpy::Batched` (nvcc only).
/// No locks: the hook it registers is set once, at static initialisation.
///
///   devicekit::batched_copy(srcs, dsts, sizes, stream);   // count buffers, one kernel
///
/// Including this header in any .cu file of a program also lets the copy engine use it: moving a
/// tree whose leaves lie in several allocations on one device (place(tree_on_dev, dev)) then takes
/// one launch instead of one cudaMemcpyAsync per leaf, when there are at least
/// detail::batched_copy_min_count leaves averaging at most detail::batched_copy_max_average_bytes
/// (transfer/detail/planner.hpp, which gives the measurements; per-call cudaMemcpyAsync costs
/// about 5-7 us, which a batched launch pays once). bench_place_cuda measures both sides.
#if !defined(__CUDACC__)
#  error "devicekit/transfer/batched_copy.cuh launches CUB kernels: include it from a .cu file compiled by nvcc"
#endif
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/transfer/detail/cub_batched.hpp>

#include <cub/device/device_memcpy.cuh>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace devicekit {

/// Copies `sizes[i]` bytes from `srcs[i]` to `dsts[i]` for every i, device memory of the stream's
/// device (or peers it can access), in one CUB launch queued on `s`, on the stream's device
/// whatever device is current. The pointer arrays are host arrays: they are staged to the device
/// here, with the scratch memory from the device's devicekit pool in stream order
/// (detail::batched_copy_plumbing), so nothing waits on the host.
inline void batched_copy(std::span<const void* const> srcs, std::span<void* const> dsts,
                         std::span<const std::size_t> sizes, cudaStream_t s) {
  if (srcs.size() != dsts.size() || srcs.size() != sizes.size()) {
    throw config_error("batched_copy: srcs, dsts and sizes must have one entry per buffer (got " +
                       std::to_string(srcs.size()) + ", " + std::to_string(dsts.size()) + ", " +
                       std::to_string(sizes.size()) + ")");
  }
  const auto count = static_cast<std::int64_t>(srcs.size());
  detail::batched_copy_plumbing(
      srcs.data(), dsts.data(), sizes.data(), srcs.size(), s,
      [&] {
        std::size_t temp_bytes = 0;
        DEVICEKIT_CUDA_CHECK(cub::DeviceMemcpy::Batched(nullptr, temp_bytes, static_cast<const void* const*>(nullptr),
                                                        static_cast<void* const*>(nullptr),
                                                        static_cast<const std::size_t*>(nullptr), count, s));
        return temp_bytes;
      },
      [&](const void* const* d_srcs, void* const* d_dsts, const std::size_t* d_sizes, void* temp,
          std::size_t temp_bytes) {
        return cub::DeviceMemcpy::Batched(temp, temp_bytes, d_srcs, d_dsts, d_sizes, count, s);
      });
}

inline void batched_copy(std::span<const void* const> srcs, std::span<void* const> dsts,
                         std::span<const std::size_t> sizes, stream_ref s) {
  batched_copy(srcs, dsts, sizes, s.native_handle());
}

namespace detail {

inline bool cub_batched_copy(const void* const* srcs, void* const* dsts, const std::size_t* sizes, std::size_t count,
                             native_stream_handle s) {
  batched_copy(std::span<const void* const>(srcs, count), std::span<void* const>(dsts, count),
               std::span<const std::size_t>(sizes, count), s);
  return true;
}

/// Registers the CUB path with the copy engine when the program starts (once, whichever .cu includes
/// this first).
inline const bool cub_batched_copy_registered = [] {
  batched_copy_hook.store(&cub_batched_copy);
  return true;
}();

}  // namespace detail
}  // namespace devicekit
