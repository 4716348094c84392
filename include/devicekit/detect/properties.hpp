#pragma once
/// \file
/// Per-device properties. With the CUDA 13 runtime they come from one `cudaGetDeviceProperties`
/// call: the runtime caches that structure (0.09-0.15 us a call on an H100 and an H200), and it no
/// longer carries the clock rates. Before CUDA 13 that call read every property, clocks included,
/// and took milliseconds (NVIDIA's "CUDA Pro Tip: The Fast Way to Query Device Properties"), so
/// there they are read with `cudaDeviceGetAttribute` and the driver's cuDeviceGetName /
/// cuDeviceGetUuid / cuDeviceTotalMem, reached through `cudaGetDriverEntryPointByVersion` (no link
/// against libcuda, so a machine without a driver still runs). Detection never reads the clock
/// rates: `query_clock_rates` does, when asked (the verbose report). None of these create a CUDA
/// context; `query_free_memory` does.
#include <devicekit/core/device.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/detect/hardware.hpp>

#include <cstdint>
#include <string>
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
  /// Described, not present in this process (compile_only_detector, jaxlib's compile-only
  /// devices): a manager plans, shards and budgets for it, and refuses memory and placement.
  bool compile_only = false;

  [[nodiscard]] std::uint64_t total_memory_mb() const noexcept { return total_memory_bytes >> 20; }
  [[nodiscard]] bool usable() const noexcept { return unusable_reason.empty(); }
};

/// Formats a 16-byte UUID the way nvidia-smi does.
[[nodiscard]] DEVICEKIT_DECL std::string format_gpu_uuid(const unsigned char (&b)[16]);

/// `00000000:19:00.0`: a PCI bus id as nvidia-smi prints it.
[[nodiscard]] DEVICEKIT_DECL std::string format_pci_bus_id(int domain, int bus, int dev);

#if DEVICEKIT_HAS_CUDA
namespace detail {

/// A device attribute; 0 when this driver does not know it.
[[nodiscard]] DEVICEKIT_DECL int attribute(cudaDeviceAttr attr, int ordinal);

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

  /// The process-wide table, looked up once.
  static const driver_identity_api& get();
};

/// Name, UUID and total memory: from the driver when it can, else from cudaGetDeviceProperties.
DEVICEKIT_DECL void query_identity(int ordinal, device_properties& p);

/// Fills p.peer_access: for every j < device_count, whether `ordinal` can reach j's memory directly.
DEVICEKIT_DECL void query_peer_access(int ordinal, int device_count, device_properties& p);

/// The properties read attribute by attribute, plus the driver's identity calls: what
/// query_device_properties does with a runtime older than CUDA 13.
[[nodiscard]] DEVICEKIT_DECL device_properties query_device_properties_by_attributes(int ordinal, int device_count);

/// The properties from one cudaGetDeviceProperties call: what query_device_properties does with
/// the CUDA 13 runtime.
[[nodiscard]] DEVICEKIT_DECL device_properties query_device_properties_at_once(int ordinal, int device_count);

}  // namespace detail

/// Reads the properties of CUDA device `ordinal`; `device_count` sizes the peer-access row.
[[nodiscard]] DEVICEKIT_DECL device_properties query_device_properties(int ordinal, int device_count);
#endif

/// The peak SM and memory clocks of a device, in kHz (`cudaDevAttrClockRate`,
/// `cudaDevAttrMemoryClockRate`); nvidia-smi prints them as "Max Clocks".
struct clock_rates {
  int sm_khz = 0;
  int memory_khz = 0;
  friend constexpr bool operator==(const clock_rates&, const clock_rates&) = default;
};

/// The clock rates of cuda device `d`, read now. Kept out of device_properties: CUDA 13 dropped
/// them from cudaDeviceProp, the cached structure detection reads, so they cost queries of their
/// own that a program constructing a manager need not pay for. Throws config_error for the cpu
/// device (CUDA reports no clocks for it) and in a build without CUDA, cuda_error for an ordinal
/// the runtime does not list.
[[nodiscard]] DEVICEKIT_DECL clock_rates query_clock_rates(device d);

/// Free and total bytes of a cuda device, from cudaMemGetInfo. This creates a CUDA context on
/// the device (which itself takes 100-800 MB), so it is never called by detection: only when a
/// caller asks. For the cpu device: the host's available and total physical memory.
struct memory_info {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
};

[[nodiscard]] DEVICEKIT_DECL memory_info query_free_memory(device d);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/detect/properties.ipp>
#endif
