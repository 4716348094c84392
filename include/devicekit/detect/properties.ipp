#pragma once
/// \file
/// The definitions behind detect/properties.hpp: reading a device's properties from the runtime
/// and the driver, and its free memory. Inline in a header-only build; compiled once under
/// DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/detect/properties.hpp>

#include <devicekit/core/detail/driver_entry_point.hpp>
#include <devicekit/core/stream.hpp>

#include <string>
#include <unistd.h>

namespace devicekit {

// Hex digits by hand rather than with snprintf: a UUID's sixteen "%02x" conversions took about a
// microsecond, several times the cudaGetDeviceProperties call a device's detection makes.
namespace detail {
/// Writes `value` in hex, at least `min_digits` digits, at `out`; returns the end.
inline char* put_hex(char* out, unsigned value, int min_digits, const char* digits) {
  char buf[8];
  int n = 0;
  do {
    buf[n++] = digits[value & 15U];
    value >>= 4U;
  } while (value != 0 && n < 8);
  for (int i = n; i < min_digits; ++i) *out++ = '0';
  while (n > 0) *out++ = buf[--n];
  return out;
}
inline constexpr const char* lower_hex_digits = "0123456789abcdef";
inline constexpr const char* upper_hex_digits = "0123456789ABCDEF";
}  // namespace detail

DEVICEKIT_DECL std::string format_gpu_uuid(const unsigned char (&b)[16]) {
  char text[40] = {'G', 'P', 'U', '-'};
  char* out = text + 4;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *out++ = '-';
    out = detail::put_hex(out, b[i], 2, detail::lower_hex_digits);
  }
  return {text, out};
}

DEVICEKIT_DECL std::string format_pci_bus_id(int domain, int bus, int dev) {
  char text[32];  // at most 8 + 1 + 8 + 1 + 8 + 2 characters
  char* out = detail::put_hex(text, static_cast<unsigned>(domain), 8, detail::upper_hex_digits);
  *out++ = ':';
  out = detail::put_hex(out, static_cast<unsigned>(bus), 2, detail::upper_hex_digits);
  *out++ = ':';
  out = detail::put_hex(out, static_cast<unsigned>(dev), 2, detail::upper_hex_digits);
  *out++ = '.';
  *out++ = '0';
  return {text, out};
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
    a.get_device = driver_entry_point<get_device_fn>("cuDeviceGet");
    a.get_name = driver_entry_point<get_name_fn>("cuDeviceGetName");
    a.get_uuid = driver_entry_point<get_uuid_fn>("cuDeviceGetUuid");
    a.total_mem = driver_entry_point<total_mem_fn>("cuDeviceTotalMem");
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

DEVICEKIT_DECL void query_peer_access(int ordinal, int device_count, device_properties& p) {
  p.peer_access.assign(static_cast<std::size_t>(device_count), false);
  for (int j = 0; j < device_count; ++j) {
    int can = 0;
    if (j != ordinal && cudaDeviceCanAccessPeer(&can, ordinal, j) == cudaSuccess) {
      p.peer_access[static_cast<std::size_t>(j)] = can != 0;
    } else {
      (void)cudaGetLastError();
    }
  }
}

DEVICEKIT_DECL device_properties query_device_properties_by_attributes(int ordinal, int device_count) {
  device_properties p;
  p.id = device::cuda(ordinal);
  query_identity(ordinal, p);
  p.cc = {attribute(cudaDevAttrComputeCapabilityMajor, ordinal), attribute(cudaDevAttrComputeCapabilityMinor, ordinal)};
  p.multiprocessor_count = attribute(cudaDevAttrMultiProcessorCount, ordinal);
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
  query_peer_access(ordinal, device_count, p);
  p.hardware = classify_hardware(p.name);
  return p;
}

DEVICEKIT_DECL device_properties query_device_properties_at_once(int ordinal, int device_count) {
  cudaDeviceProp prop{};
  DEVICEKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  device_properties p;
  p.id = device::cuda(ordinal);
  p.name = prop.name;
  unsigned char uuid[16];
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(prop.uuid.bytes[i]);
  p.uuid = format_gpu_uuid(uuid);
  p.total_memory_bytes = prop.totalGlobalMem;
  p.cc = {prop.major, prop.minor};
  p.multiprocessor_count = prop.multiProcessorCount;
  p.memory_bus_width_bits = prop.memoryBusWidth;
  p.l2_cache_bytes = prop.l2CacheSize;
  p.async_engine_count = prop.asyncEngineCount;
  p.ecc_enabled = prop.ECCEnabled != 0;
  p.max_threads_per_block = prop.maxThreadsPerBlock;
  p.warp_size = prop.warpSize;
  p.integrated = prop.integrated != 0;
  p.managed_memory = prop.managedMemory != 0;
  p.concurrent_managed_access = prop.concurrentManagedAccess != 0;
  p.pci_domain = prop.pciDomainID;
  p.pci_bus = prop.pciBusID;
  p.pci_device = prop.pciDeviceID;
  p.pci_bus_id = format_pci_bus_id(p.pci_domain, p.pci_bus, p.pci_device);
  query_peer_access(ordinal, device_count, p);
  p.hardware = classify_hardware(p.name);
  return p;
}

}  // namespace detail

DEVICEKIT_DECL device_properties query_device_properties(int ordinal, int device_count) {
#  if CUDART_VERSION >= 13000
  return detail::query_device_properties_at_once(ordinal, device_count);
#  else
  return detail::query_device_properties_by_attributes(ordinal, device_count);
#  endif
}
#endif

DEVICEKIT_DECL clock_rates query_clock_rates(device d) {
  if (!d.is_cuda()) {
    throw config_error("query_clock_rates(" + d.str() + "): clock rates are read for cuda devices only");
  }
#if DEVICEKIT_HAS_CUDA
  // Checked, unlike detail::attribute: an ordinal the runtime does not list is the caller's error.
  clock_rates c;
  DEVICEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&c.sm_khz, cudaDevAttrClockRate, d.ordinal()));
  DEVICEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&c.memory_khz, cudaDevAttrMemoryClockRate, d.ordinal()));
  return c;
#else
  throw config_error("query_clock_rates(" + d.str() + "): devicekit was built without CUDA");
#endif
}

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
