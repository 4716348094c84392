#pragma once
/// \file
/// Per-device properties, read with `cudaDeviceGetAttribute` (about 10 ns a call) and the
/// driver's cuDeviceGetName / cuDeviceGetUuid / cuDeviceTotalMem reached through
/// `cudaGetDriverEntryPointByVersion` (no link against libcuda, so a machine without a driver
/// still runs). `cudaGetDeviceProperties` (milliseconds) is only a fallback when the driver
/// entry points cannot be had. None of these create a CUDA context; `query_free_memory` does.
#include <devicekit/core/device.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/detect/hardware.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace devicekit {

/// Compute capability, printed as `9.0`.
struct compute_capability {
  int major = 0;
  int minor = 0;
  [[nodiscard]] std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
  [[nodiscard]] constexpr int as_int() const noexcept { return major * 10 + minor; }
  friend constexpr bool operator==(const compute_capability&, const compute_capability&) = default;
  friend constexpr auto operator<=>(const compute_capability&, const compute_capability&) = default;
};

/// Reduced-precision arithmetic the hardware runs natively.
struct precision_support {
  bool fp16 = false;  ///< sm_53 and later (tensor cores from sm_70)
  bool bf16 = false;  ///< sm_80 and later
  bool fp8 = false;   ///< sm_89 and later
  friend constexpr bool operator==(const precision_support&, const precision_support&) = default;
};

[[nodiscard]] constexpr precision_support precision_for(compute_capability cc) noexcept {
  const int v = cc.as_int();
  return {v >= 53, v >= 80, v >= 89};
}

/// Everything devicekit knows about one device. For the cpu device only the identity, memory and
/// hardware fields are meaningful.
struct device_properties {
  device id;
  std::string name;
  std::string uuid;        ///< as nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  std::string pci_bus_id;  ///< as nvidia-smi prints it: 00000000:19:00.0
  int pci_domain = 0;
  int pci_bus = 0;
  int pci_device = 0;
  std::uint64_t total_memory_bytes = 0;
  compute_capability cc;
  int multiprocessor_count = 0;
  int clock_rate_khz = 0;
  int memory_clock_rate_khz = 0;
  int memory_bus_width_bits = 0;
  int l2_cache_bytes = 0;
  int async_engine_count = 0;  ///< copy engines
  bool ecc_enabled = false;
  int max_threads_per_block = 0;
  int warp_size = 0;
  bool integrated = false;
  bool managed_memory = false;
  bool concurrent_managed_access = false;
  /// peer_access[j]: this device can access device j's memory directly.
  std::vector<bool> peer_access;
  hardware_type hardware = hardware_type::unknown;
  /// Empty when devicekit can use the device; otherwise why not (a GPU that NVML lists but the
  /// CUDA runtime cannot open: see nvml_detector). Managers refuse memory and placement on it.
  std::string unusable_reason;

  [[nodiscard]] std::uint64_t total_memory_mb() const noexcept { return total_memory_bytes >> 20; }
  [[nodiscard]] bool usable() const noexcept { return unusable_reason.empty(); }
};

/// Formats a 16-byte UUID the way nvidia-smi does.
[[nodiscard]] inline std::string format_gpu_uuid(const unsigned char (&b)[16]) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

[[nodiscard]] inline std::string format_pci_bus_id(int domain, int bus, int dev) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08X:%02X:%02X.0", static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                static_cast<unsigned>(dev));
  return buf;
}

#if DEVICEKIT_HAS_CUDA
namespace detail {

[[nodiscard]] inline int attribute(cudaDeviceAttr attr, int ordinal) {
  int value = 0;
  // A failed attribute read (an attribute this driver does not know) reads as 0 rather than
  // failing the whole detection.
  if (cudaDeviceGetAttribute(&value, attr, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return value;
}

/// The driver functions we need, fetched through the runtime. Signatures are the driver API's
/// (CUdevice is an int ordinal; CUuuid is 16 bytes), written out so cuda.h is not needed.
struct driver_identity_api {
  using get_device_fn = int (*)(int*, int);
  using get_name_fn = int (*)(char*, int, int);
  using get_uuid_fn = int (*)(unsigned char*, int);
  using total_mem_fn = int (*)(std::size_t*, int);
  get_device_fn get_device = nullptr;
  get_name_fn get_name = nullptr;
  get_uuid_fn get_uuid = nullptr;
  total_mem_fn total_mem = nullptr;

  [[nodiscard]] bool complete() const noexcept { return get_device && get_name && get_uuid && total_mem; }

  template <class Fn>
  static Fn lookup(const char* symbol) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<Fn>(fn);
  }

  static const driver_identity_api& get() {
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
};

/// Name, UUID and total memory: from the driver when it can, else from cudaGetDeviceProperties.
inline void query_identity(int ordinal, device_properties& p) {
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

/// Reads the properties of CUDA device `ordinal`; `device_count` sizes the peer-access row.
[[nodiscard]] inline device_properties query_device_properties(int ordinal, int device_count) {
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

/// Free and total bytes of a cuda device, from cudaMemGetInfo. This creates a CUDA context on
/// the device (which itself takes 100-800 MB), so it is never called by detection: only when a
/// caller asks. For the cpu device: the host's available and total physical memory.
struct memory_info {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
};

[[nodiscard]] inline memory_info query_free_memory(device d) {
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
