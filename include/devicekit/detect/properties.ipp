#pragma once
/// \file
/// The definitions behind detect/properties.hpp: reading a device's properties from the runtime
/// and the driver, and its free memory. Inline in a header-only build; compiled once under
/// DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/detect/properties.hpp>

#include <devicekit/core/stream.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

namespace devicekit {

DEVICEKIT_DECL std::string format_gpu_uuid(const unsigned char (&b)[16]) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

DEVICEKIT_DECL std::string format_pci_bus_id(int domain, int bus, int dev) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08X:%02X:%02X.0", static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                static_cast<unsigned>(dev));
  return buf;
}

#if DEVICEKIT_HAS_CUDA
namespace detail {

DEVICEKIT_DECL int attribute(cudaDeviceAttr attr, int ordinal) {
  int value = 0;
  // A failed attribute read (an attribute this driver does not know) reads as 0 rather than
  // failing the whole detection.
  if (cudaDeviceGetAttribute(&value, attr, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return value;
}

DEVICEKIT_DECL const driver_identity_api& driver_identity_api::get() {
  static const driver_identity_api api = [] {
    driver_identity_api a;
    a.get_device = lookup<get_device_fn>("cuDeviceGet");
    a.get_name = lookup<get_name_fn>("cuDeviceGetName");
    a.get_uuid = lookup<get_uuid_fn>("cuDeviceGetUuid");
    a.total_mem = lookup<total_mem_fn>("cuDeviceTotalMem");
    return a;
  }();
  return api;
}

DEVICEKIT_DECL void query_identity(int ordinal, device_properties& p) {
  const auto& api = driver_identity_api::get();
  int cu_device = 0;
  if (api.complete() && api.get_device(&cu_device, ordinal) == 0) {
    char name[256] = {};
    unsigned char uuid[16] = {};
    std::size_t bytes = 0;
    if (api.get_name(name, static_cast<int>(sizeof name), cu_device) == 0 && api.get_uuid(uuid, cu_device) == 0 &&
        api.total_mem(&bytes, cu_device) == 0) {
      p.name = name;
      p.uuid = format_gpu_uuid(uuid);
      p.total_memory_bytes = bytes;
      return;
    }
  }
  cudaDeviceProp prop{};
  DEVICEKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  p.name = prop.name;
  unsigned char uuid[16];
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(prop.uuid.bytes[i]);
  p.uuid = format_gpu_uuid(uuid);
  p.total_memory_bytes = prop.totalGlobalMem;
}

}  // namespace detail

DEVICEKIT_DECL device_properties query_device_properties(int ordinal, int device_count) {
  using detail::attribute;
  device_properties p;
  p.id = device::cuda(ordinal);
  detail::query_identity(ordinal, p);
  p.cc = {attribute(cudaDevAttrComputeCapabilityMajor, ordinal), attribute(cudaDevAttrComputeCapabilityMinor, ordinal)};
  p.multiprocessor_count = attribute(cudaDevAttrMultiProcessorCount, ordinal);
  p.clock_rate_khz = attribute(cudaDevAttrClockRate, ordinal);
  p.memory_clock_rate_khz = attribute(cudaDevAttrMemoryClockRate, ordinal);
  p.memory_bus_width_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, ordinal);
  p.l2_cache_bytes = attribute(cudaDevAttrL2CacheSize, ordinal);
  p.async_engine_count = attribute(cudaDevAttrAsyncEngineCount, ordinal);
  p.ecc_enabled = attribute(cudaDevAttrEccEnabled, ordinal) != 0;
  p.max_threads_per_block = attribute(cudaDevAttrMaxThreadsPerBlock, ordinal);
  p.warp_size = attribute(cudaDevAttrWarpSize, ordinal);
  p.integrated = attribute(cudaDevAttrIntegrated, ordinal) != 0;
  p.managed_memory = attribute(cudaDevAttrManagedMemory, ordinal) != 0;
  p.concurrent_managed_access = attribute(cudaDevAttrConcurrentManagedAccess, ordinal) != 0;
  p.pci_domain = attribute(cudaDevAttrPciDomainId, ordinal);
  p.pci_bus = attribute(cudaDevAttrPciBusId, ordinal);
  p.pci_device = attribute(cudaDevAttrPciDeviceId, ordinal);
  p.pci_bus_id = format_pci_bus_id(p.pci_domain, p.pci_bus, p.pci_device);
  p.peer_access.assign(static_cast<std::size_t>(device_count), false);
  for (int j = 0; j < device_count; ++j) {
    int can = 0;
    if (j != ordinal && cudaDeviceCanAccessPeer(&can, ordinal, j) == cudaSuccess) {
      p.peer_access[static_cast<std::size_t>(j)] = can != 0;
    } else {
      (void)cudaGetLastError();
    }
  }
  p.hardware = classify_hardware(p.name);
  return p;
}
#endif

DEVICEKIT_DECL memory_info query_free_memory(device d) {
  if (d.is_cpu()) {
    const long avail = ::sysconf(_SC_AVPHYS_PAGES);
    const long total = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGE_SIZE);
    return {static_cast<std::uint64_t>(avail > 0 ? avail : 0) * static_cast<std::uint64_t>(page),
            static_cast<std::uint64_t>(total > 0 ? total : 0) * static_cast<std::uint64_t>(page)};
  }
#if DEVICEKIT_HAS_CUDA
  std::size_t free_b = 0;
  std::size_t total_b = 0;
  {
    scoped_device on(d.ordinal());
    DEVICEKIT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  }
  note_cuda_runtime_used();
  return {free_b, total_b};
#else
  throw config_error("query_free_memory(" + d.str() + "): devicekit was built without CUDA");
#endif
}

}  // namespace devicekit
