// Driver entry points: the cu* functions devicekit fetches with cudaGetDriverEntryPointByVersion.
// Locking: each holds the state's mutex. devicekit fetches them so that it never links libcuda;
// the answers come from the configuration.
#include "capture.hpp"
#include "entry.hpp"

#include <cuda.h>  // CUresult: what the driver entry points return

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

using namespace devicekit::cuda_sim::detail;

extern "C" {

// devicekit reads a device's name, UUID and total memory through the driver API, and asks whether
// a stream captures (cuStreamIsCapturing, capture.cpp), fetched with
// cudaGetDriverEntryPointByVersion (so it never links libcuda). The simulator hands out its own.
namespace {
int sim_cuDeviceGet(int* device, int ordinal) {
  entry e("cuDeviceGet");
  if (e.early != cudaSuccess || device == nullptr || !valid_device(e.g, ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
int sim_cuDeviceGetName(char* name, int len, int device) {
  entry e("cuDeviceGetName");
  if (e.early != cudaSuccess || name == nullptr || len <= 0 || !valid_device(e.g, device))
    return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "%s", e.g.devices[static_cast<std::size_t>(device)].name.c_str());
  return CUDA_SUCCESS;
}
int sim_cuDeviceGetUuid(unsigned char* uuid, int device) {
  entry e("cuDeviceGetUuid");
  if (e.early != cudaSuccess || uuid == nullptr || !valid_device(e.g, device)) return CUDA_ERROR_INVALID_DEVICE;
  std::memcpy(uuid, e.g.devices[static_cast<std::size_t>(device)].uuid_bytes, 16);
  return CUDA_SUCCESS;
}
int sim_cuCtxGetCurrent(void** ctx) {
  entry e("cuCtxGetCurrent");
  if (e.early != cudaSuccess || ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // No context, or a token naming the current device's primary context.
  *ctx = tl_bound ? reinterpret_cast<void*>(static_cast<std::uintptr_t>(tl_device) + 1) : nullptr;
  return CUDA_SUCCESS;
}
int sim_cuDeviceTotalMem(std::size_t* bytes, int device) {
  entry e("cuDeviceTotalMem");
  if (e.early != cudaSuccess || bytes == nullptr || !valid_device(e.g, device)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = e.g.devices[static_cast<std::size_t>(device)].total_memory;
  return CUDA_SUCCESS;
}
}  // namespace

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int /*cudaVersion*/,
                                                       unsigned long long /*flags*/,
                                                       enum cudaDriverEntryPointQueryResult* driverStatus) {
  SIM_ENTER("cudaGetDriverEntryPointByVersion");
  if (symbol == nullptr || funcPtr == nullptr) return fail(cudaErrorInvalidValue);
  const std::string name = symbol;
  void* fn = nullptr;
  if (name == "cuDeviceGet") fn = reinterpret_cast<void*>(&sim_cuDeviceGet);
  if (name == "cuDeviceGetName") fn = reinterpret_cast<void*>(&sim_cuDeviceGetName);
  if (name == "cuDeviceGetUuid") fn = reinterpret_cast<void*>(&sim_cuDeviceGetUuid);
  if (name == "cuDeviceTotalMem") fn = reinterpret_cast<void*>(&sim_cuDeviceTotalMem);
  if (name == "cuCtxGetCurrent") fn = reinterpret_cast<void*>(&sim_cuCtxGetCurrent);
  if (name == "cuStreamIsCapturing") fn = reinterpret_cast<void*>(&driver_stream_is_capturing);
  *funcPtr = fn;
  if (driverStatus != nullptr)
    *driverStatus = fn != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

}  // extern "C"
