#pragma once
/// \file
/// The definitions behind transfer/detail/capture_copy.hpp: checked, then one copy per item.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/capture_copy.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/capture.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/transfer/detail/device_to_device.hpp>
#  include <devicekit/transfer/detail/host_to_device.hpp>

#  include <string>

namespace devicekit::detail {

DEVICEKIT_DECL void copy_items_in_capture(std::span<const copy_item> items, device dst, cudaStream_t s) {
  // Every item is checked before the first is queued: a refusal leaves the capture as it was.
  for (const copy_item& it : items) {
    if (it.bytes == 0) continue;
    if (it.src_device.is_cpu() && !is_pinned_host(it.src)) {
      refuse_in_capture("copy to " + dst.str(),
                        "a source lies in pageable host memory, which the copy engine reads only through staging "
                        "the host does at call time",
                        "place the source in pinned memory first (place(tree, device::cpu(), "
                        "memory_kind::pinned_host)), or place it before the capture");
    }
    if (dst.is_cpu() && !is_pinned_host(it.dst)) {
      refuse_in_capture("copy to the host",
                        "the destination lies in pageable host memory, which the copy engine writes only through "
                        "staging the host unpacks after waiting",
                        "copy into a tree placed in pinned host memory (memory_kind::pinned_host)");
    }
    if (it.src_device.is_cuda() && dst.is_cuda() && it.src_device != dst &&
        !ensure_peer_access(dst.ordinal(), it.src_device.ordinal())) {
      refuse_in_capture("copy from " + it.src_device.str() + " to " + dst.str(),
                        "the two devices have no peer access, so the bytes would pass through host staging",
                        "copy through a tree in pinned host memory (two copies), or outside the capture");
    }
  }
  for (const copy_item& it : items) {
    if (it.bytes == 0) continue;
    if (it.src_device.is_cuda() && dst.is_cuda() && it.src_device != dst) {
      DEVICEKIT_CUDA_CHECK(cudaMemcpyPeerAsync(it.dst, dst.ordinal(), it.src, it.src_device.ordinal(), it.bytes, s));
      continue;
    }
    const cudaMemcpyKind kind = it.src_device.is_cpu()
                                    ? (dst.is_cpu() ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
                                    : (dst.is_cpu() ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(it.dst, it.src, it.bytes, kind, s));
  }
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
