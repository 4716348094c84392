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

#include <dlfcn.h>

#include <cstring>
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

  [[nodiscard]] std::string describe(return_t r) const {
    std::string s = error_string != nullptr ? std::string(error_string(r)) : std::string("NVML error");
    s += " (nvmlReturn_t " + std::to_string(r) + ")";
    if (r == error_driver_not_loaded) s += "; the NVIDIA kernel driver is not loaded";
    if (r == error_lib_rm_version_mismatch)
      s += "; the NVML library and the kernel driver differ in version (reboot after a driver update)";
    if (r == error_no_permission) s += "; this user may not access the GPU device files (/dev/nvidia*)";
    return s;
  }
};

/// The library to load: the settings' path, else DEVICEKIT_NVML_LIBRARY, else the driver's soname.
[[nodiscard]] inline std::string library_path(const settings& s) {
  if (s.has_nvml_library()) return s.get_nvml_library();
  if (auto v = getenv_string("DEVICEKIT_NVML_LIBRARY"); v && !v->empty()) return *v;
  return "libnvidia-ml.so.1";
}

/// Loads `path` and looks up the functions. On failure `error` says what was missing. The
/// library stays loaded: NVML may keep threads of its own, and unloading it under them is
/// undefined (pynvml and nvidia-smi keep it loaded too). dlopen of a loaded library only counts up.
[[nodiscard]] inline api load(const std::string& path, std::string& error) {
  api a;
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    error = "NVML is not available: dlopen(\"" + path + "\") failed (" + std::string(why ? why : "unknown error") +
            "); it comes with the NVIDIA driver: install the driver, or set DEVICEKIT_NVML_LIBRARY to the path of "
            "libnvidia-ml.so.1";
    return a;
  }
  std::string missing;
  auto sym = [&](auto& fn, const char* name, bool required = true) {
    void* p = ::dlsym(lib, name);
    if (p == nullptr && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
    // POSIX guarantees that a function pointer round-trips through void* (dlsym's contract).
    std::memcpy(&fn, &p, sizeof p);
  };
  sym(a.init, "nvmlInit_v2");
  sym(a.shutdown, "nvmlShutdown");
  sym(a.error_string, "nvmlErrorString", false);
  sym(a.device_count, "nvmlDeviceGetCount_v2");
  sym(a.handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  sym(a.name, "nvmlDeviceGetName");
  sym(a.memory, "nvmlDeviceGetMemoryInfo");
  sym(a.compute_capability, "nvmlDeviceGetCudaComputeCapability");
  sym(a.uuid, "nvmlDeviceGetUUID");
  sym(a.pci, "nvmlDeviceGetPciInfo_v3");
  sym(a.cuda_driver_version, "nvmlSystemGetCudaDriverVersion_v2", false);
  if (!missing.empty()) {
    error = "NVML library \"" + path + "\" lacks " + missing +
            " (a driver older than NVML 5.319 / CUDA 5.5, or not NVML at all); update the NVIDIA driver";
    a = api{};
  }
  return a;
}

/// One GPU as NVML sees it.
[[nodiscard]] inline device_properties query(const api& a, device_t handle, int index) {
  device_properties p;
  p.id = device::cuda(index);
  char text[name_buffer_size] = {};
  if (a.name(handle, text, sizeof text) == success) p.name = text;
  char uuid[uuid_buffer_size] = {};
  if (a.uuid(handle, uuid, sizeof uuid) == success) p.uuid = uuid;
  memory_t mem{};
  if (a.memory(handle, &mem) == success) p.total_memory_bytes = mem.total;
  int major = 0;
  int minor = 0;
  if (a.compute_capability(handle, &major, &minor) == success) p.cc = {major, minor};
  pci_info_t pci{};
  if (a.pci(handle, &pci) == success) {
    p.pci_domain = static_cast<int>(pci.domain);
    p.pci_bus = static_cast<int>(pci.bus);
    p.pci_device = static_cast<int>(pci.device);
    p.pci_bus_id = format_pci_bus_id(p.pci_domain, p.pci_bus, p.pci_device);
  }
  p.hardware = classify_hardware(p.name);
  return p;
}

/// What NVML found, or why it found nothing.
struct listing {
  std::vector<device_properties> devices;
  int cuda_driver_version = 0;
  std::string failure;  ///< empty when devices were listed
};

[[nodiscard]] inline listing list_gpus(const std::string& path) {
  listing out;
  const api a = load(path, out.failure);
  if (!out.failure.empty()) return out;
  if (const return_t r = a.init(); r != success) {
    out.failure = "nvmlInit_v2 failed: " + a.describe(r);
    return out;
  }
  unsigned int count = 0;
  if (const return_t r = a.device_count(&count); r != success) {
    out.failure = "nvmlDeviceGetCount_v2 failed: " + a.describe(r);
  } else if (count == 0) {
    out.failure = "NVML found 0 GPUs";
  }
  for (unsigned int i = 0; i < count && out.failure.empty(); ++i) {
    device_t handle = nullptr;
    if (const return_t r = a.handle_by_index(i, &handle); r != success) {
      // A lost or inaccessible GPU: leave it out, keep the others (nvidia-smi does the same).
      continue;
    }
    out.devices.push_back(query(a, handle, static_cast<int>(i)));
  }
  if (out.failure.empty() && out.devices.empty()) {
    out.failure =
        "NVML listed " + std::to_string(count) + " GPU(s) but could not open any (nvmlDeviceGetHandleByIndex_v2)";
  }
  if (a.cuda_driver_version != nullptr && a.cuda_driver_version(&out.cuda_driver_version) != success) {
    out.cuda_driver_version = 0;
  }
  (void)a.shutdown();
  return out;
}

}  // namespace detail::nvml

/// Finds NVIDIA GPUs through NVML (see the file comment). Not available, with a reason, when
/// the library cannot be loaded, nvmlInit fails or it finds no GPU; a 'cpu' preference or
/// CUDA_VISIBLE_DEVICES="" hide the GPUs as they do for cuda_detector. Never throws for a
/// missing or broken NVML.
struct nvml_detector {
  static constexpr std::string_view name() noexcept { return "nvml"; }

  [[nodiscard]] capabilities detect(const settings& s) const {
    capabilities caps;
    caps.detector = std::string(name());
    caps.device_type = device_kind::cuda;
    caps.host = query_host();
    detail::fill_cuda_versions(caps);
    caps.fallback_reason = detail::gpus_hidden_reason(s);
    if (!caps.fallback_reason.empty()) return caps;
    auto found = detail::nvml::list_gpus(detail::nvml::library_path(s));
    if (caps.driver_version == 0) caps.driver_version = found.cuda_driver_version;
    if (!found.failure.empty()) {
      caps.fallback_reason = found.failure;
      return caps;
    }
    const std::string runtime_failure = runtime_unusable_reason();
    if (runtime_failure.empty()) {
#if DEVICEKIT_HAS_CUDA
      // The runtime works: report the GPUs it can address, under its ordinals, with its (fuller)
      // properties. NVML lists every GPU of the machine; the runtime only the visible ones.
      for (const auto& rt : detail::cached_cuda_probe().devices) {
        for (const auto& nv : found.devices) {
          if (!nv.uuid.empty() && nv.uuid == rt.uuid) caps.devices.push_back(rt);
        }
      }
      if (caps.devices.empty()) {
        caps.fallback_reason = "NVML found " + std::to_string(found.devices.size()) +
                               " GPU(s), but none has the UUID of a GPU the CUDA runtime sees (" +
                               std::to_string(detail::cached_cuda_probe().count) + " visible)";
        if (auto v = detail::getenv_string("CUDA_VISIBLE_DEVICES"))
          caps.fallback_reason += "; CUDA_VISIBLE_DEVICES='" + *v + "'";
        return caps;
      }
      caps.gpu_count = static_cast<int>(caps.devices.size());
#endif
    } else {
      caps.devices = std::move(found.devices);
      for (auto& d : caps.devices) {
        d.unusable_reason = "found by NVML, but the CUDA runtime cannot use it: " + runtime_failure;
      }
      caps.fallback_reason = "the CUDA runtime cannot use the " + std::to_string(caps.devices.size()) +
                             " GPU(s) NVML found: " + runtime_failure;
    }
    caps.device_count = static_cast<int>(caps.devices.size());
    compute_capability lowest = caps.devices.front().cc;
    for (const auto& d : caps.devices) {
      caps.total_memory_bytes += d.total_memory_bytes;
      if (d.cc < lowest) lowest = d.cc;
    }
    caps.cc = lowest;
    caps.precision = precision_for(lowest);
    caps.supports_distributed = caps.gpu_count > 1;
    return caps;
  }

 private:
  /// Why the CUDA runtime cannot use GPUs here; empty when it can.
  [[nodiscard]] static std::string runtime_unusable_reason() {
#if DEVICEKIT_HAS_CUDA
    const auto& probe = detail::cached_cuda_probe();
    return probe.count > 0 ? std::string() : probe.failure;
#else
    return "devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)";
#endif
  }
};

}  // namespace devicekit
