#pragma once
/// \file
/// What the manager makes of a detector's answer: `normalize_capabilities` makes it
/// self-consistent (a custom detector may give only counts) and refuses one with no usable device;
/// `choose_default_device` picks the default device as the communicators pick theirs; the checks
/// that a device given to the manager is one of those detected (and usable) follow. Kept apart
/// from the façade so that the rules for detection live in one place, as the detectors'
/// (detect/detectors.hpp) do.
#include <devicekit/core/device.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/capabilities.hpp>

#include <cstdint>
#include <vector>

namespace devicekit::detail {

/// Makes a detector's answer self-consistent: a custom detector may give only counts, and may
/// leave a device's hardware unknown, which is then classified by its name (classify_hardware),
/// as the stock detectors do. Throws config_error when no device is usable, saying how to widen
/// the search.
DEVICEKIT_DECL void normalize_capabilities(capabilities& caps, const settings& config);

/// The default device as the communicators choose theirs (assign_device,
/// distribute/assignment.hpp): the configured device (DEVICEKIT_DEVICE or settings; cpu:0 is
/// always allowed), else visible[local rank % count] under a launcher that exports a node-local
/// rank (Kokkos does the same), else the first device found. config_error when the configured
/// device is not among those found.
[[nodiscard]] DEVICEKIT_DECL device choose_default_device(const capabilities& caps, const settings& config);

/// The properties of `d`, one of the detected devices; config_error naming them otherwise.
[[nodiscard]] DEVICEKIT_DECL const device_properties& properties_of(const capabilities& caps, device d);

/// The total memory of `d`, one of the detected devices or cpu:0; config_error otherwise (for a
/// device this process does not have, the one every call gives, named after `operation`).
[[nodiscard]] DEVICEKIT_DECL std::uint64_t total_memory_of(const capabilities& caps, device d,
                                                           const char* operation = "device_manager");

/// A device a detector listed but devicekit cannot use (a GPU only NVML sees) is refused here,
/// before any CUDA call, with the reason, rather than failing deep in the runtime.
DEVICEKIT_DECL void check_usable(const capabilities& caps, device d);
/// check_usable for each of `devs`, before placement over several devices places on any: a
/// described or unusable device says so, rather than that the process lacks it.
DEVICEKIT_DECL void check_usable(const capabilities& caps, const std::vector<device>& devs);

/// The devices whose device-kind pools a manager reports: its devices and cpu:0.
[[nodiscard]] DEVICEKIT_DECL std::vector<device> memory_devices_of(const capabilities& caps);

/// Placement goes to the host or to one of the detected devices; device_mismatch otherwise, and
/// config_error for a device this process does not have (core/detail/device_exists.hpp).
DEVICEKIT_DECL void check_placement_device(const capabilities& caps, device dev, const char* operation = "place");

/// Where a manager's placement without a device goes: the innermost default_device_scope's device
/// (place/default_device.hpp), checked to be the host or one of the detected devices (a
/// device_mismatch that names the scope and `operation` otherwise; the config_error of a device the
/// process does not have, naming the scope too), else `fallback` (the manager's default device).
[[nodiscard]] DEVICEKIT_DECL device placement_default_of(const capabilities& caps, device fallback,
                                                         const char* operation);

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/manager/detail/detection.ipp>
#endif
