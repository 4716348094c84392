#pragma once
/// \file
/// Driver API functions fetched through the runtime, so that devicekit never links libcuda: the
/// runtime hands out the driver's own entry points (cudaGetDriverEntryPointByVersion, CUDA
/// Runtime API, "Driver Entry Point Access"). The signatures are written out by the callers, with
/// int for CUresult, CUdevice and the driver's enums, so that cuda.h is not needed.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
namespace devicekit::detail {

/// The driver function `symbol` in its CUDA 12.0 form, as a pointer of type Fn; nullptr where the
/// driver does not hand it out (an older driver, or a runtime without a driver). A failed lookup
/// clears the error it left, which is ours and not the program's.
template <class Fn>
[[nodiscard]] Fn driver_entry_point(const char* symbol) noexcept {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace devicekit::detail
#endif
