#pragma once
/// \file
/// `nvml_detector`: finds NVIDIA GPUs through NVML (the library behind nvidia-smi), loaded at run
/// time with dlopen, so devicekit has no link dependency on it. NVML ships with the driver, not
/// with the toolkit, so it sees the GPUs even where the CUDA runtime cannot use them (a driver
/// older than the toolkit needs: cudaErrorInsufficientDriver; a toolkit built without CUDA).
///
/// What a device it reports means:
///  - When the CUDA runtime works, only the GPUs it can address are reported, matched by UUID,
///    with the runtime's ordinals and properties (CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER
///    apply as they do for cuda_detector).
///  - When the runtime cannot work, every GPU NVML lists is reported as `cuda:<NVML index>` with
///    its `unusable_reason` set: the report shows it, `gpu_count` (usable GPUs) is 0, and a
///    manager refuses to make memory or place data on it with a config_error that says why.
///
/// The library: settings::set_nvml_library, else DEVICEKIT_NVML_LIBRARY, else libnvidia-ml.so.1.
/// Function names and types are those of the NVML API Reference (docs.nvidia.com/deploy/nvml-api),
/// declared here because nvml.h is not part of the CUDA toolkit install everywhere.
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/detect/detectors.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace devicekit {

namespace detail::nvml {

// The NVML ABI (NVML API Reference, "Device Structs", "Device Queries"). nvmlDevice_t is an
// opaque handle; nvmlReturn_t an enum (int-sized).
using return_t = int;
struct device_st;
using device_t = device_st*;
inline constexpr return_t success = 0;
inline constexpr return_t error_driver_not_loaded = 9;
inline constexpr return_t error_lib_rm_version_mismatch = 18;
inline constexpr return_t error_no_permission = 4;

struct memory_t {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct pci_info_t {  // nvmlPciInfo_t, as filled by nvmlDeviceGetPciInfo_v3
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_sub_system_id;
  char bus_id[32];
};

/// NVML's buffer sizes for names and UUIDs (NVML_DEVICE_NAME_V2_BUFFER_SIZE,
/// NVML_DEVICE_UUID_V2_BUFFER_SIZE).
inline constexpr unsigned int name_buffer_size = 96;
inline constexpr unsigned int uuid_buffer_size = 96;

/// The functions devicekit calls, looked up in one loaded library.
struct api {
  return_t (*init)() = nullptr;                                    // nvmlInit_v2
  return_t (*shutdown)() = nullptr;                                // nvmlShutdown
  const char* (*error_string)(return_t) = nullptr;                 // nvmlErrorString
  return_t (*device_count)(unsigned int*) = nullptr;               // nvmlDeviceGetCount_v2
  return_t (*handle_by_index)(unsigned int, device_t*) = nullptr;  // nvmlDeviceGetHandleByIndex_v2
  return_t (*name)(device_t, char*, unsigned int) = nullptr;       // nvmlDeviceGetName
  return_t (*memory)(device_t, memory_t*) = nullptr;               // nvmlDeviceGetMemoryInfo
  return_t (*compute_capability)(device_t, int*, int*) = nullptr;  // nvmlDeviceGetCudaComputeCapability
  return_t (*uuid)(device_t, char*, unsigned int) = nullptr;       // nvmlDeviceGetUUID
  return_t (*pci)(device_t, pci_info_t*) = nullptr;                // nvmlDeviceGetPciInfo_v3
  return_t (*cuda_driver_version)(int*) = nullptr;                 // nvmlSystemGetCudaDriverVersion_v2 (optional)

  /// NVML's message for `r`, with the code and a hint for the failures a user can fix.
  [[nodiscard]] std::string describe(return_t r) const;
};

/// The library to load: the settings' path, else DEVICEKIT_NVML_LIBRARY, else the driver's soname.
[[nodiscard]] DEVICEKIT_DECL std::string library_path(const settings& s);

/// Who named the library library_path gives: "settings::set_nvml_library",
/// "DEVICEKIT_NVML_LIBRARY", or "" for the driver's soname, which nobody named.
[[nodiscard]] DEVICEKIT_DECL std::string library_named_by(const settings& s);

/// Loads `path` and looks up the functions. On failure `error` says what was missing, and what
/// to do: where `named_by` (library_named_by) named the path, that the library it names did not
/// load; else that NVML comes with the driver. The library stays loaded: NVML may keep threads of
/// its own, and unloading it under them is undefined (pynvml and nvidia-smi keep it loaded too).
/// dlopen of a loaded library only counts up.
[[nodiscard]] DEVICEKIT_DECL api load(const std::string& path, std::string& error, std::string_view named_by = {});

/// One GPU as NVML sees it.
[[nodiscard]] DEVICEKIT_DECL device_properties query(const api& a, device_t handle, int index);

/// What NVML found, or why it found nothing.
struct listing {
  std::vector<device_properties> devices;
  int cuda_driver_version = 0;
  std::string failure;  ///< empty when devices were listed
};

/// Loads NVML from `path` (named by `named_by`, as for load) and lists the GPUs it finds.
[[nodiscard]] DEVICEKIT_DECL listing list_gpus(const std::string& path, std::string_view named_by = {});

}  // namespace detail::nvml

/// Finds NVIDIA GPUs through NVML (see the file comment). Not available, with a reason, when
/// the library cannot be loaded, nvmlInit fails or it finds no GPU; a 'cpu' preference or
/// CUDA_VISIBLE_DEVICES="" hide the GPUs as they do for cuda_detector. Never throws for a
/// missing or broken NVML.
struct nvml_detector {
  static constexpr std::string_view name() noexcept { return "nvml"; }

  [[nodiscard]] capabilities detect(const settings& s) const;

 private:
  /// Why the CUDA runtime cannot use GPUs here; empty when it can.
  [[nodiscard]] static std::string runtime_unusable_reason();
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/detect/nvml.ipp>
#endif
