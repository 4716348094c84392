// Devices: count, current device, properties, attributes, PCI ids, peer access, memory info.
// Locking: each call holds the state's mutex (SIM_ENTER). Also cudaDeviceSynchronize and the
// driver and runtime versions; every value comes from the configuration.
#include "capture.hpp"
#include "entry.hpp"
#include "memory_model.hpp"
#include "scheduler.hpp"

#include <cstddef>
#include <cstdio>
#include <cstring>

using namespace devicekit::cuda_sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaDriverGetVersion(int* v) {
  if (v == nullptr) return fail(cudaErrorInvalidValue);
  *v = 13000;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return fail(cudaErrorInvalidValue);
  *v = 13000;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  SIM_ENTER("cudaGetDeviceCount");
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = static_cast<int>(g.devices.size());
  return g.devices.empty() ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  SIM_ENTER("cudaSetDevice");
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  tl_device = device;
  bind_current(g);  // since CUDA 12.0 cudaSetDevice initialises the primary context at once
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  SIM_ENTER("cudaGetDevice");
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  if (g.devices.empty()) return fail(cudaErrorNoDevice);
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  SIM_ENTER("cudaDeviceGetAttribute");
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  const device_spec& d = g.devices[static_cast<std::size_t>(device)];
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = d.cc_major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = d.cc_minor; break;
    case cudaDevAttrMultiProcessorCount: *value = d.sms; break;
    case cudaDevAttrClockRate: *value = 1'980'000; break;
    case cudaDevAttrMemoryClockRate: *value = 2'619'000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; break;
    case cudaDevAttrL2CacheSize: *value = 50 << 20; break;
    case cudaDevAttrAsyncEngineCount: *value = 3; break;
    case cudaDevAttrEccEnabled: *value = 1; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrIntegrated: *value = 0; break;
    case cudaDevAttrManagedMemory: *value = 1; break;
    case cudaDevAttrConcurrentManagedAccess: *value = 1; break;
    case cudaDevAttrPciDomainId: *value = 0; break;
    case cudaDevAttrPciBusId: *value = d.pci_bus; break;
    case cudaDevAttrPciDeviceId: *value = 0; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  SIM_ENTER("cudaGetDeviceProperties");
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  const device_spec& d = g.devices[static_cast<std::size_t>(device)];
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "%s", d.name.c_str());
  std::memcpy(prop->uuid.bytes, d.uuid_bytes, 16);
  prop->totalGlobalMem = d.total_memory;
  prop->major = d.cc_major;
  prop->minor = d.cc_minor;
  prop->multiProcessorCount = d.sms;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 << 20;
  prop->asyncEngineCount = 3;
  prop->ECCEnabled = 1;
  prop->maxThreadsPerBlock = 1024;
  prop->warpSize = 32;
  prop->managedMemory = 1;
  prop->concurrentManagedAccess = 1;
  prop->pciBusID = d.pci_bus;
  prop->unifiedAddressing = 1;
  prop->memoryPoolsSupported = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  SIM_ENTER("cudaDeviceGetPCIBusId");
  if (pciBusId == nullptr || len <= 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  // "[domain]:[bus]:[device].[function]" with a 4-digit domain, as an H100 reports it.
  std::snprintf(pciBusId, static_cast<std::size_t>(len), "0000:%02X:00.0",
                g.devices[static_cast<std::size_t>(device)].pci_bus);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  SIM_ENTER("cudaDeviceCanAccessPeer");
  if (canAccessPeer == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device) || !valid_device(g, peerDevice)) return fail(cudaErrorInvalidDevice);
  *canAccessPeer =
      device != peerDevice && g.peer_possible[static_cast<std::size_t>(device)][static_cast<std::size_t>(peerDevice)];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  SIM_ENTER("cudaDeviceEnablePeerAccess");
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, peerDevice) || peerDevice == tl_device) return fail(cudaErrorInvalidDevice);
  bind_current(g);
  if (!g.peer_possible[static_cast<std::size_t>(tl_device)][static_cast<std::size_t>(peerDevice)]) {
    return fail(cudaErrorPeerAccessUnsupported);
  }
  if (!g.peer_enabled[static_cast<std::size_t>(tl_device)].insert(peerDevice).second) {
    return fail(cudaErrorPeerAccessAlreadyEnabled);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  SIM_ENTER("cudaMemGetInfo");
  if (free_bytes == nullptr || total == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  bind_current(g);
  const device_spec& d = g.devices[static_cast<std::size_t>(tl_device)];
  *total = d.total_memory;
  *free_bytes = free_device_bytes(d, g.bytes_in_use[static_cast<std::size_t>(tl_device)]);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  SIM_ENTER("cudaDeviceSynchronize");
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  bind_current(g);
  if (cudaError_t c = capture_device_wait(g, tl_device); c != cudaSuccess) return fail(c);
  ++g.spinning_host_waits;  // spins under cudaDeviceScheduleAuto (see spinning_host_waits())
  wait_device_idle(g, e_.lk, tl_device);
  return cudaSuccess;
}

}  // extern "C"
