#pragma once
/// \file
/// Detector policies. A detector is any copyable type with
///     capabilities detect(const settings&) const;   or   capabilities detect() const;
/// (the concept `device_detector`). Stock ones: `cuda_detector`, `cpu_detector`,
/// `first_available<D...>` (platform priority: the first that finds a device wins) and
/// `fixed_detector` (returns capabilities given to it: simulations, tests, exotic platforms).
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/capabilities.hpp>

#include <concepts>
#include <mutex>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace devicekit {

template <class D>
concept device_detector =
    std::copy_constructible<D> &&
    (requires(const D& d, const settings& s) {
      { d.detect(s) } -> std::convertible_to<capabilities>;
    } || requires(const D& d) {
      { d.detect() } -> std::convertible_to<capabilities>;
    });

/// Runs a detector with whichever signature it has and fills in its name if it left it empty.
template <device_detector D>
[[nodiscard]] capabilities run_detector(const D& d, const settings& s) {
  capabilities caps = [&]() -> capabilities {
    if constexpr (requires { d.detect(s); }) {
      return d.detect(s);
    } else {
      return d.detect();
    }
  }();
  if (caps.detector.empty()) {
    if constexpr (requires { D::name(); }) {
      caps.detector = std::string(D::name());
    } else {
      caps.detector = "custom";
    }
  }
  return caps;
}

namespace detail {

inline void fill_cuda_versions(capabilities& caps) {
#if DEVICEKIT_HAS_CUDA
  // Neither call initialises the driver or creates a context; both answer without a driver.
  if (cudaRuntimeGetVersion(&caps.cuda_runtime_version) != cudaSuccess) caps.cuda_runtime_version = 0;
  if (cudaDriverGetVersion(&caps.driver_version) != cudaSuccess) caps.driver_version = 0;
  (void)cudaGetLastError();
#else
  (void)caps;
#endif
}

/// The process-wide result of probing the CUDA runtime: the device list cannot change while the
/// process runs (CUDA_VISIBLE_DEVICES is read once by the runtime), so it is probed once.
struct cuda_probe {
  int count = 0;
  std::string failure;  ///< why there are no GPUs; empty when count > 0
  std::vector<device_properties> devices;
};

#if DEVICEKIT_HAS_CUDA
[[nodiscard]] inline std::string explain_no_gpu(cudaError_t r) {
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

[[nodiscard]] inline cuda_probe probe_cuda() {
  cuda_probe p;
  const cudaError_t r = cudaGetDeviceCount(&p.count);
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

[[nodiscard]] inline const cuda_probe& cached_cuda_probe() {
  static const cuda_probe probe = probe_cuda();
  return probe;
}
#endif

/// Why CUDA is not to be used, before touching the runtime; empty when it may be probed.
[[nodiscard]] inline std::string cuda_excluded_reason(const settings& s) {
#if !DEVICEKIT_HAS_CUDA
  (void)s;
  return "devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)";
#else
  if (s.get_prefer() == device_preference::cpu) {
    return "the CPU was requested (device preference 'cpu', e.g. DEVICEKIT_PREFER=cpu)";
  }
  if (auto v = getenv_string("CUDA_VISIBLE_DEVICES")) {
    if (v->find_first_not_of(" \t") == std::string::npos) {
      return "CUDA_VISIBLE_DEVICES is set to an empty string, which hides every GPU";
    }
  }
  return {};
#endif
}

}  // namespace detail

/// Finds CUDA devices through the runtime. No device, no driver, CUDA_VISIBLE_DEVICES="" or a
/// 'cpu' preference give zero devices and a reason, never an exception.
struct cuda_detector {
  static constexpr std::string_view name() noexcept { return "cuda"; }

  [[nodiscard]] capabilities detect(const settings& s) const {
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
};

/// The host as one device, `cpu:0`: its cores, memory and model name.
struct cpu_detector {
  static constexpr std::string_view name() noexcept { return "cpu"; }

  [[nodiscard]] capabilities detect(const settings&) const {
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
};

/// Platform priority: runs the detectors in order and keeps the first that finds a device. The
/// reasons of those that found none become the fallback reason.
template <class... Detectors>
struct first_available {
  static_assert(sizeof...(Detectors) > 0, "first_available<D...> needs at least one detector");
  static_assert((device_detector<Detectors> && ...),
                "first_available<D...>: every D must be a device_detector (capabilities detect(const settings&) const)");

  static constexpr std::string_view name() noexcept { return "first_available"; }

  first_available() = default;
  /// For detectors that carry state (a custom detector configured at run time).
  explicit first_available(Detectors... detectors) : detectors_(std::move(detectors)...) {}

  [[nodiscard]] capabilities detect(const settings& s) const {
    std::string reasons;
    capabilities chosen;
    bool found = false;
    auto attempt = [&](const auto& d) {
      if (found) return;
      capabilities c = run_detector(d, s);
      if (c.usable()) {
        chosen = std::move(c);
        found = true;
        return;
      }
      if (!reasons.empty()) reasons += "; ";
      reasons += c.detector + ": " + (c.fallback_reason.empty() ? "no device" : c.fallback_reason);
      chosen = std::move(c);
    };
    std::apply([&](const auto&... d) { (attempt(d), ...); }, detectors_);
    if (!reasons.empty()) chosen.fallback_reason = reasons;
    return chosen;
  }

 private:
  [[no_unique_address]] std::tuple<Detectors...> detectors_{};
};

/// Returns the capabilities it was given: Artifex's "custom detector" as a value. Handy for
/// simulating hardware in tests and for platforms devicekit does not probe itself.
struct fixed_detector {
  capabilities caps;
  [[nodiscard]] capabilities detect() const {
    capabilities c = caps;
    if (c.detector.empty()) c.detector = "fixed";
    return c;
  }
};

}  // namespace devicekit
