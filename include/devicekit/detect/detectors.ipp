#pragma once
/// \file
/// The definitions behind detect/detectors.hpp: the CUDA and CPU detectors, the CUDA probe and
/// the reasons detection gives. Inline in a header-only build; compiled once under
/// DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/start_environment.hpp>

#include <string>
#include <utility>

namespace devicekit {

namespace detail {

DEVICEKIT_DECL std::string platform_list_text(const settings& s) {
  const std::string list = format_platform_list(s.get_platforms());
  if (s.platforms_source() == "DEVICEKIT_PLATFORMS") return "DEVICEKIT_PLATFORMS=" + list;
  return "the platform list " + list + " (settings::set_platforms)";
}

DEVICEKIT_DECL void exclude_unlisted_platform(capabilities& caps, const settings& s) {
  caps.fallback_reason = "found " + std::to_string(caps.device_count) + " " + std::string(to_string(caps.device_type)) +
                         " device(s), but " + platform_list_text(s) + " excludes platform '" +
                         std::string(to_string(caps.device_type)) + "'";
  caps.device_count = 0;
  caps.gpu_count = 0;
  caps.devices.clear();
  caps.total_memory_bytes = 0;
  caps.supports_distributed = false;
}

DEVICEKIT_DECL void append_detector_reason(std::string& reasons, const capabilities& c) {
  if (!reasons.empty()) reasons += "; ";
  reasons += c.detector + ": " + (c.fallback_reason.empty() ? "no device" : c.fallback_reason);
}

DEVICEKIT_DECL void fill_cuda_versions(capabilities& caps) {
#if DEVICEKIT_HAS_CUDA
  // Neither call initialises the driver or creates a context; both answer without a driver.
  if (cudaRuntimeGetVersion(&caps.cuda_runtime_version) != cudaSuccess) caps.cuda_runtime_version = 0;
  if (cudaDriverGetVersion(&caps.driver_version) != cudaSuccess) caps.driver_version = 0;
  (void)cudaGetLastError();
#else
  (void)caps;
#endif
}

#if DEVICEKIT_HAS_CUDA
DEVICEKIT_DECL std::string explain_no_gpu(cudaError_t r) {
  const std::string name = cudaGetErrorName(r);
  const std::string text = cudaGetErrorString(r);
  std::string why;
  if (r == cudaErrorInsufficientDriver) {
    why = "no usable NVIDIA driver: cudaGetDeviceCount returned cudaErrorInsufficientDriver (" + text +
          "); install or update the NVIDIA driver to use a GPU";
  } else if (r == cudaErrorNoDevice) {
    why = "no CUDA-capable device: cudaGetDeviceCount returned cudaErrorNoDevice (" + text + ")";
  } else {
    why = "the CUDA runtime could not be initialised: cudaGetDeviceCount returned " + name + " (" + text + ")";
  }
  if (auto v = getenv_string("CUDA_VISIBLE_DEVICES")) {
    why += "; CUDA_VISIBLE_DEVICES='" + *v + "'";
  }
  return why;
}

DEVICEKIT_DECL cuda_probe probe_cuda() {
  cuda_probe p;
  auto variables = cuda_environment_now();  // the runtime reads its variables now, once
  const cudaError_t r = cudaGetDeviceCount(&p.count);
  // cudaErrorInsufficientDriver: no driver, or one older than the runtime (CUDA runtime API,
  // cudaError_t), so the runtime does not start and no CUDA work can run in this process: no
  // variable it reads can come too late. With cudaErrorNoDevice it did start: the driver read
  // CUDA_VISIBLE_DEVICES and found nothing to list.
  if (r != cudaErrorInsufficientDriver) note_cuda_start_environment(std::move(variables));
  if (r != cudaSuccess) {
    // The failure is sticky in the runtime's last-error slot: clear it so that a later,
    // unrelated check does not report it.
    (void)cudaGetLastError();
    p.count = 0;
    p.failure = explain_no_gpu(r);
    return p;
  }
  note_cuda_runtime_used();
  if (p.count == 0) {
    p.failure = "cudaGetDeviceCount found 0 devices";
    return p;
  }
  p.devices.reserve(static_cast<std::size_t>(p.count));
  for (int i = 0; i < p.count; ++i) p.devices.push_back(query_device_properties(i, p.count));
  return p;
}
#endif

DEVICEKIT_DECL std::string gpus_hidden_reason(const settings& s) {
  if (s.get_prefer() == device_preference::cpu) {
    return "the CPU was requested (device preference 'cpu', e.g. DEVICEKIT_PREFER=cpu)";
  }
  if (auto v = getenv_string("CUDA_VISIBLE_DEVICES")) {
    if (v->find_first_not_of(" \t") == std::string::npos) {
      return "CUDA_VISIBLE_DEVICES is set to an empty string, which hides every GPU";
    }
  }
  return {};
}

DEVICEKIT_DECL std::string cuda_excluded_reason(const settings& s) {
#if !DEVICEKIT_HAS_CUDA
  (void)s;
  return "devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)";
#else
  return gpus_hidden_reason(s);
#endif
}

}  // namespace detail

DEVICEKIT_DECL capabilities cuda_detector::detect(const settings& s) const {
  capabilities caps;
  caps.detector = std::string(name());
  caps.device_type = device_kind::cuda;
  caps.host = query_host();
  detail::fill_cuda_versions(caps);
  caps.fallback_reason = detail::cuda_excluded_reason(s);
  if (!caps.fallback_reason.empty()) return caps;
#if DEVICEKIT_HAS_CUDA
  const auto& probe = detail::cached_cuda_probe();
  if (probe.count == 0) {
    caps.fallback_reason = probe.failure;
    return caps;
  }
  caps.devices = probe.devices;
  caps.device_count = caps.gpu_count = probe.count;
  compute_capability lowest = probe.devices.front().cc;
  for (const auto& d : probe.devices) {
    caps.total_memory_bytes += d.total_memory_bytes;
    if (d.cc < lowest) lowest = d.cc;
  }
  caps.cc = lowest;
  caps.precision = precision_for(lowest);
  caps.supports_distributed = caps.device_count > 1;
#endif
  return caps;
}

DEVICEKIT_DECL capabilities cpu_detector::detect(const settings&) const {
  capabilities caps;
  caps.detector = std::string(name());
  caps.device_type = device_kind::cpu;
  caps.device_count = 1;
  caps.host = query_host();
  detail::fill_cuda_versions(caps);
  device_properties p;
  p.id = device::cpu(0);
  p.name = caps.host.model_name;
  p.total_memory_bytes = caps.host.total_memory_bytes;
  p.hardware = hardware_type::cpu;
  caps.total_memory_bytes = p.total_memory_bytes;
  caps.devices.push_back(std::move(p));
  return caps;
}

}  // namespace devicekit
