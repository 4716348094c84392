#pragma once
/// \file
/// The definitions behind detect/nvml.hpp: loading NVML with dlopen, listing its GPUs and
/// matching them with the CUDA runtime's. Inline in a header-only build; compiled once under
/// DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/detect/nvml.hpp>

#include <dlfcn.h>

#include <cstring>
#include <string>
#include <utility>

namespace devicekit {

namespace detail::nvml {

DEVICEKIT_DECL std::string api::describe(return_t r) const {
  std::string s = error_string != nullptr ? std::string(error_string(r)) : std::string("NVML error");
  s += " (nvmlReturn_t " + std::to_string(r) + ")";
  if (r == error_driver_not_loaded) s += "; the NVIDIA kernel driver is not loaded";
  if (r == error_lib_rm_version_mismatch)
    s += "; the NVML library and the kernel driver differ in version (reboot after a driver update)";
  if (r == error_no_permission) s += "; this user may not access the GPU device files (/dev/nvidia*)";
  return s;
}

DEVICEKIT_DECL std::string library_path(const settings& s) {
  if (s.has_nvml_library()) return s.get_nvml_library();
  if (auto v = getenv_string("DEVICEKIT_NVML_LIBRARY"); v && !v->empty()) return *v;
  return "libnvidia-ml.so.1";
}

DEVICEKIT_DECL std::string library_named_by(const settings& s) {
  if (s.has_nvml_library()) return "settings::set_nvml_library";
  if (auto v = getenv_string("DEVICEKIT_NVML_LIBRARY"); v && !v->empty()) return "DEVICEKIT_NVML_LIBRARY";
  return "";
}

DEVICEKIT_DECL api load(const std::string& path, std::string& error, std::string_view named_by) {
  api a;
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    error = "NVML is not available: dlopen(\"" + path + "\") failed (" + std::string(why ? why : "unknown error") + ")";
    if (named_by.empty()) {
      error +=
          "; it comes with the NVIDIA driver: install the driver, or set DEVICEKIT_NVML_LIBRARY to the path of "
          "libnvidia-ml.so.1";
    } else {
      error += "; the library that " + std::string(named_by) +
               " names did not load: give the path of the driver's libnvidia-ml.so.1 there, or leave it unset to load "
               "the driver's own";
    }
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

DEVICEKIT_DECL device_properties query(const api& a, device_t handle, int index) {
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

DEVICEKIT_DECL listing list_gpus(const std::string& path, std::string_view named_by) {
  listing out;
  const api a = load(path, out.failure, named_by);
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

DEVICEKIT_DECL capabilities nvml_detector::detect(const settings& s) const {
  capabilities caps;
  caps.detector = std::string(name());
  caps.device_type = device_kind::cuda;
  caps.host = query_host();
  detail::fill_cuda_versions(caps);
  caps.fallback_reason = detail::gpus_hidden_reason(s);
  if (!caps.fallback_reason.empty()) return caps;
  auto found = detail::nvml::list_gpus(detail::nvml::library_path(s), detail::nvml::library_named_by(s));
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

DEVICEKIT_DECL std::string nvml_detector::runtime_unusable_reason() {
#if DEVICEKIT_HAS_CUDA
  const auto& probe = detail::cached_cuda_probe();
  return probe.count > 0 ? std::string() : probe.failure;
#else
  return "devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)";
#endif
}

}  // namespace devicekit
