#pragma once
/// \file
/// Detector policies. A detector is any copyable type with
///     capabilities detect(const settings&) const;   or   capabilities detect() const;
/// (the concept `device_detector`). Stock ones: `cuda_detector`, `cpu_detector`,
/// `first_available<D...>` (platform priority: the first that finds a device wins) and
/// `fixed_detector` (returns capabilities given to it: simulations, tests, exotic platforms).
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/capabilities.hpp>

#include <algorithm>
#include <atomic>
#include <concepts>
#include <mutex>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

namespace detail {
/// "DEVICEKIT_PLATFORMS=cuda,cpu" or "the platform list cuda,cpu (settings)", for messages.
[[nodiscard]] DEVICEKIT_DECL std::string platform_list_text(const settings& s);

/// Turns a usable answer of a platform the run-time list leaves out into "not available", with
/// the reason (see run_detector).
DEVICEKIT_DECL void exclude_unlisted_platform(capabilities& caps, const settings& s);

/// Adds "detector: reason" (or "detector: no device") to a `; `-separated list of reasons.
DEVICEKIT_DECL void append_detector_reason(std::string& reasons, const capabilities& c);
}  // namespace detail

template <class D>
concept device_detector = std::copy_constructible<D> &&(
    requires(const D& d, const settings& s) {
      { d.detect(s) } -> std::convertible_to<capabilities>;
    } ||
    requires(const D& d) {
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
  // The run-time platform list (settings::set_platforms, DEVICEKIT_PLATFORMS) may leave this
  // answer out: it then becomes "not available", with the reason, so that first_available moves
  // on and a manager's error names the list.
  if (caps.usable() && !s.allows_platform(caps.device_type)) detail::exclude_unlisted_platform(caps, s);
  return caps;
}

/// How a detector type describes itself in reports: `first_available<cuda, cpu>` for a chain,
/// its name() otherwise, "custom" for a detector without one.
template <class D>
[[nodiscard]] std::string describe_detector() {
  if constexpr (requires { D::describe(); }) {
    return std::string(D::describe());
  } else if constexpr (requires { D::name(); }) {
    return std::string(D::name());
  } else {
    return "custom";
  }
}

namespace detail {

/// The CUDA runtime and driver versions, 0 where there are none.
DEVICEKIT_DECL void fill_cuda_versions(capabilities& caps);

/// The process-wide result of probing the CUDA runtime: the device list cannot change while the
/// process runs (CUDA_VISIBLE_DEVICES is read once by the runtime), so it is probed once.
struct cuda_probe {
  int count = 0;
  std::string failure;  ///< why there are no GPUs; empty when count > 0
  std::vector<device_properties> devices;
};

#if DEVICEKIT_HAS_CUDA
/// Why cudaGetDeviceCount found no GPU, for the fallback reason.
[[nodiscard]] DEVICEKIT_DECL std::string explain_no_gpu(cudaError_t r);

[[nodiscard]] DEVICEKIT_DECL cuda_probe probe_cuda();

/// Where the process-wide probe is published once made, so that a caller can ask for it without
/// making it (cuda_probe_if_done).
[[nodiscard]] inline std::atomic<const cuda_probe*>& cuda_probe_slot() noexcept {
  static std::atomic<const cuda_probe*> slot{nullptr};
  return slot;
}

[[nodiscard]] inline const cuda_probe& cached_cuda_probe() {
  static const cuda_probe probe = probe_cuda();
  cuda_probe_slot().store(&probe, std::memory_order_release);
  return probe;
}

/// The probe if a detector in this process has made it, else nullptr; never touches the runtime.
[[nodiscard]] inline const cuda_probe* cuda_probe_if_done() noexcept {
  return cuda_probe_slot().load(std::memory_order_acquire);
}
#endif

/// Why the settings or the environment hide every GPU from any detector (a 'cpu' preference,
/// CUDA_VISIBLE_DEVICES=""), or "" when they do not. Needs no CUDA: nvml_detector asks it too.
[[nodiscard]] DEVICEKIT_DECL std::string gpus_hidden_reason(const settings& s);

/// Why CUDA is not to be used, before touching the runtime; empty when it may be probed.
[[nodiscard]] DEVICEKIT_DECL std::string cuda_excluded_reason(const settings& s);

}  // namespace detail

/// Finds CUDA devices through the runtime. No device, no driver, CUDA_VISIBLE_DEVICES="" or a
/// 'cpu' preference give zero devices and a reason, never an exception.
struct cuda_detector {
  static constexpr std::string_view name() noexcept { return "cuda"; }

  [[nodiscard]] capabilities detect(const settings& s) const;
};

/// The host as one device, `cpu:0`: its cores, memory and model name.
struct cpu_detector {
  static constexpr std::string_view name() noexcept { return "cpu"; }

  [[nodiscard]] capabilities detect(const settings&) const;
};

/// Platform priority: runs the detectors in order and keeps the first that finds a device. The
/// reasons of those that found none become the fallback reason. A run-time platform list
/// (settings::set_platforms, DEVICEKIT_PLATFORMS) reorders and filters what the chain can
/// produce: see detect_by_platform_list.
template <class... Detectors>
struct first_available {
  static_assert(sizeof...(Detectors) > 0, "first_available<D...> needs at least one detector");
  static_assert(
      (device_detector<Detectors> && ...),
      "first_available<D...>: every D must be a device_detector (capabilities detect(const settings&) const)");

  static constexpr std::string_view name() noexcept { return "first_available"; }

  first_available() = default;
  /// For detectors that carry state (a custom detector configured at run time).
  explicit first_available(Detectors... detectors) : detectors_(std::move(detectors)...) {}

  /// `first_available<cuda, cpu>`: the chain as reports show it.
  [[nodiscard]] static std::string describe() {
    std::string inner;
    ((inner += (inner.empty() ? "" : ", ") + describe_detector<Detectors>()), ...);
    return "first_available<" + inner + ">";
  }

  [[nodiscard]] capabilities detect(const settings& s) const {
    if (s.has_platforms()) return detect_by_platform_list(s);
    std::string reasons;
    capabilities chosen;
    bool found = false;
    auto attempt = [&](const auto& d) {
      if (found) return;
      capabilities c = run_detector(d, s);
      if (c.usable()) {
        chosen = std::move(c);
        found = true;
        if (!chosen.fallback_reason.empty()) append_reason(reasons, chosen);  // e.g. nvml: GPUs the runtime cannot use
        return;
      }
      append_reason(reasons, c);
      chosen = std::move(c);
    };
    std::apply([&](const auto&... d) { (attempt(d), ...); }, detectors_);
    if (!reasons.empty()) chosen.fallback_reason = reasons;
    return chosen;
  }

 private:
  static void append_reason(std::string& reasons, const capabilities& c) { detail::append_detector_reason(reasons, c); }

  /// With a run-time platform list every detector runs (run_detector already turned answers of
  /// unlisted platforms into "not available"); the usable answer whose platform comes first in
  /// the list wins, and among answers of one platform the compile-time order decides. The
  /// reasons are those of the detectors ranked before the winner, as without a list.
  [[nodiscard]] capabilities detect_by_platform_list(const settings& s) const {
    std::vector<capabilities> answers;
    answers.reserve(sizeof...(Detectors));
    std::apply([&](const auto&... d) { (answers.push_back(run_detector(d, s)), ...); }, detectors_);
    const auto platforms = s.get_platforms();
    auto rank = [&](const capabilities& c) {
      return static_cast<std::size_t>(std::find(platforms.begin(), platforms.end(), c.device_type) - platforms.begin());
    };
    std::vector<std::size_t> order(answers.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return rank(answers[a]) < rank(answers[b]); });
    std::string reasons;
    for (const std::size_t i : order) {
      if (answers[i].usable()) {
        capabilities chosen = std::move(answers[i]);
        if (chosen.device_type == device_kind::cpu) {
          // A GPU was found but the list put the CPU first: say so, the CPU is not a fallback
          // here but a choice.
          for (const auto& other : answers) {
            if (other.usable() && other.device_type == device_kind::cuda) {
              if (!reasons.empty()) reasons += "; ";
              reasons += other.detector + ": found " + std::to_string(other.device_count) + " cuda device(s), but " +
                         detail::platform_list_text(s) + " puts cpu first";
              break;
            }
          }
        }
        if (!chosen.fallback_reason.empty()) append_reason(reasons, chosen);
        chosen.fallback_reason = reasons;
        return chosen;
      }
      append_reason(reasons, answers[i]);
    }
    capabilities none = std::move(answers[order.back()]);
    none.fallback_reason = reasons;
    return none;
  }

  [[no_unique_address]] std::tuple<Detectors...> detectors_{};
};

/// Returns the capabilities it was given: a custom detector as a value. Handy for
/// simulating hardware in tests and for platforms devicekit does not probe itself.
struct fixed_detector {
  static constexpr std::string_view name() noexcept { return "fixed"; }
  capabilities caps;
  [[nodiscard]] capabilities detect() const {
    capabilities c = caps;
    if (c.detector.empty()) c.detector = "fixed";
    return c;
  }
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/detect/detectors.ipp>
#endif
