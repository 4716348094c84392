#pragma once
/// \file
/// `settings`: what a program (or its environment) asks of device selection. Modelled on
/// Kokkos' InitializationSettings: optional fields with set_x / has_x / get_x.
///
/// Settings a program builds start from the environment: what is set in code wins, and the
/// environment variables below fill what code left unset when the settings are used (a manager's
/// constructor, default_manager, or `with_environment()`). `settings::without_environment()`
/// reads none (tests, and programs that configure everything in code);
/// `settings::from_environment()` reads them all at once. A variable whose field code set is never
/// read, so a bad value there is no error; a bad value of one that is read is a config_error
/// naming the variable.
///
/// Environment variables read:
///   DEVICEKIT_PREFER   auto | cuda | cpu   (anything else: config_error listing these)
///   DEVICEKIT_DEVICE   the default device, e.g. cuda:1 or cpu
///   DEVICEKIT_ALLOCATOR               pool | async | platform (see core/allocator_kind.hpp)
///   DEVICEKIT_COLLECTIVE_MEMORY_SIZE  bytes of each GPU kept out of the budget for collectives
///   DEVICEKIT_PLATFORMS  platform priority at run time, e.g. cuda,cpu or cpu (see
///                      `set_platforms`; an unknown name is a config_error listing the valid ones)
///   DEVICEKIT_NVML_LIBRARY  the NVML library nvml_detector loads (default libnvidia-ml.so.1)
///   CUDA_VISIBLE_DEVICES is honoured by the CUDA runtime itself; devicekit reads it only to say
///   why it fell back ("set to an empty string" means: no GPU on purpose).
#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/core/device.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace devicekit {

/// Which platform the detector should pick when several are present.
enum class device_preference { automatic, cuda, cpu };

[[nodiscard]] constexpr std::string_view to_string(device_preference p) noexcept {
  switch (p) {
    case device_preference::cuda: return "cuda";
    case device_preference::cpu: return "cpu";
    default: return "auto";
  }
}

/// Parses `auto`, `cuda` (or `gpu`) and `cpu`. `source` names where the text came from so the
/// message can point at it (for example "DEVICEKIT_PREFER").
[[nodiscard]] DEVICEKIT_DECL device_preference parse_device_preference(std::string_view text,
                                                                       std::string_view source = "preference");

/// The platform names DEVICEKIT_PLATFORMS accepts, for messages.
inline constexpr std::string_view valid_platform_names = "cuda (or gpu), cpu";

/// Parses a comma-separated platform priority such as `cuda,cpu` (spaces around names are
/// ignored). Unknown names, repeated names and an empty list are config_errors naming `source`.
[[nodiscard]] DEVICEKIT_DECL std::vector<device_kind> parse_platform_list(std::string_view text,
                                                                          std::string_view source = "platforms");

/// `cuda,cpu`: a platform list as DEVICEKIT_PLATFORMS spells it.
[[nodiscard]] DEVICEKIT_DECL std::string format_platform_list(const std::vector<device_kind>& platforms);

namespace detail {
[[nodiscard]] DEVICEKIT_DECL std::optional<std::string> getenv_string(const char* name);
}  // namespace detail

class settings {
 public:
  /// Nothing set in code; the environment fills every field when the settings are used.
  settings() = default;

  /// Reads every variable above now: the settings with_environment() gives for settings{}.
  /// Throws config_error on a bad value.
  [[nodiscard]] static settings from_environment();

  /// Settings that ignore the environment: what is not set in code keeps its default (for tests,
  /// and for programs that want no variable to change what they configured).
  [[nodiscard]] static settings without_environment() {
    settings s;
    s.use_environment_ = false;
    return s;
  }

  /// Whether the environment still fills what code left unset when these settings are used:
  /// true for settings{} until with_environment() has read it, false for without_environment().
  [[nodiscard]] bool reads_environment() const noexcept { return use_environment_; }

  /// The effective settings: these, with every field code left unset filled from its environment
  /// variable (when reads_environment()); variables of fields set in code are not read. What a
  /// manager does with the settings it is given (its config() shows the result). Throws
  /// config_error naming the variable on a bad value. The result no longer reads the environment.
  [[nodiscard]] settings with_environment() const;

  settings& set_prefer(device_preference p) {
    prefer_ = p;
    return *this;
  }
  [[nodiscard]] bool has_prefer() const noexcept { return prefer_.has_value(); }
  [[nodiscard]] device_preference get_prefer() const noexcept { return prefer_.value_or(device_preference::automatic); }

  /// The device `default_device()` should return; validated against the detected devices.
  settings& set_device(device d) {
    device_ = d;
    return *this;
  }
  [[nodiscard]] bool has_device() const noexcept { return device_.has_value(); }
  [[nodiscard]] device get_device() const { return device_.value(); }

  // --- GPU memory (the allocator and the collective reserve) ------------------------------------
  /// Which allocator serves GPU memory (default: pool). jaxlib: XLA_PYTHON_CLIENT_ALLOCATOR.
  settings& set_allocator(allocator_kind k) {
    allocator_ = k;
    return *this;
  }
  [[nodiscard]] bool has_allocator() const noexcept { return allocator_.has_value(); }
  [[nodiscard]] allocator_kind get_allocator() const noexcept { return allocator_.value_or(allocator_kind::pool); }
  /// Bytes of each GPU left out of the memory budget for collectives (NCCL allocates its own
  /// buffers, outside devicekit's pools), as jaxlib's GpuAllocatorConfig::collective_memory_size.
  /// The manager rejects a reserve larger than a device (config_error). Default 0.
  settings& set_collective_memory_size(std::uint64_t bytes) {
    collective_memory_size_ = bytes;
    return *this;
  }
  [[nodiscard]] bool has_collective_memory_size() const noexcept { return collective_memory_size_.has_value(); }
  [[nodiscard]] std::uint64_t get_collective_memory_size() const noexcept {
    return collective_memory_size_.value_or(0);
  }
  /// Platform priority at run time: only detectors whose answer is of a listed platform count,
  /// and among those the earliest platform in the list wins, whatever the compile-time order
  /// of `first_available<D...>` (which still orders detectors of the same platform). A list
  /// that excludes every platform found makes detection fail with a reason naming the list.
  /// Throws config_error for an empty list or a platform listed twice.
  settings& set_platforms(std::vector<device_kind> platforms);
  [[nodiscard]] bool has_platforms() const noexcept { return platforms_.has_value(); }
  /// The run-time platform list; empty when none was given (the detector order decides).
  [[nodiscard]] std::vector<device_kind> get_platforms() const {
    return platforms_.value_or(std::vector<device_kind>{});
  }
  /// Where the platform list came from: "DEVICEKIT_PLATFORMS", "settings", or "" when none.
  [[nodiscard]] const std::string& platforms_source() const noexcept { return platforms_source_; }
  /// Whether `kind` may be chosen: always without a list, else when it is listed.
  [[nodiscard]] bool allows_platform(device_kind kind) const {
    if (!platforms_) return true;
    return std::find(platforms_->begin(), platforms_->end(), kind) != platforms_->end();
  }

  /// The NVML library nvml_detector loads (a path or a soname for dlopen). Without one it
  /// takes DEVICEKIT_NVML_LIBRARY from the environment, else libnvidia-ml.so.1.
  settings& set_nvml_library(std::string path) {
    nvml_library_ = std::move(path);
    return *this;
  }
  [[nodiscard]] bool has_nvml_library() const noexcept { return nvml_library_.has_value(); }
  [[nodiscard]] const std::string& get_nvml_library() const { return nvml_library_.value(); }

  /// An environment variable to set before the first CUDA call (CUDA_DEVICE_ORDER,
  /// CUDA_MODULE_LOADING, ...). Variables the CUDA runtime reads at initialisation only take
  /// effect if the runtime has not been initialised yet in this process.
  settings& set_environment_variable(std::string name, std::string value) {
    environment_[std::move(name)] = std::move(value);
    return *this;
  }
  [[nodiscard]] const std::map<std::string, std::string>& environment_variables() const noexcept {
    return environment_;
  }

  /// Sets the environment variables (overwriting). Returns the names it set.
  std::vector<std::string> apply_environment() const;

 private:
  std::optional<device_preference> prefer_;
  std::optional<device> device_;
  std::optional<std::vector<device_kind>> platforms_;
  std::string platforms_source_;
  std::optional<std::string> nvml_library_;
  std::map<std::string, std::string> environment_;
  std::optional<allocator_kind> allocator_;
  std::optional<std::uint64_t> collective_memory_size_;
  bool use_environment_ = true;

  void read_memory_environment();
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/settings.ipp>
#endif
