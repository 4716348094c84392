#pragma once
/// \file
/// The definitions behind manager/detail/detection.hpp: a detector's answer made consistent, the default
/// device, and the checks on a device given to the manager.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/manager/detail/detection.hpp>

#include <devicekit/detect/host.hpp>
#include <devicekit/distribute/assignment.hpp>
#include <devicekit/manager/detail/errors.hpp>
#include <devicekit/place/default_device.hpp>

#include <algorithm>
#include <string>
#include <utility>

namespace devicekit::detail {

DEVICEKIT_DECL void normalize_capabilities(capabilities& caps, const settings& config) {
  if (!caps.usable()) throw no_usable_device_error(caps, config);
  if (caps.devices.empty()) {
    for (int i = 0; i < caps.device_count; ++i) {
      device_properties p;
      p.id = device(caps.device_type, i);
      p.name = caps.device_type == device_kind::cpu ? caps.host.model_name : "custom device";
      p.total_memory_bytes = caps.total_memory_bytes / static_cast<std::uint64_t>(caps.device_count);
      if (caps.cc) p.cc = *caps.cc;
      p.hardware = caps.device_type == device_kind::cpu ? hardware_type::cpu : hardware_type::unknown;
      caps.devices.push_back(std::move(p));
    }
  }
  // A detector that names a device but leaves its hardware unknown (a custom one: the concept asks
  // for capabilities, not for a classification) gets the class the stock detectors give the same
  // name, so that batch advice, costs and the report use its table row rather than a stand-in.
  for (auto& p : caps.devices) {
    if (p.hardware == hardware_type::unknown) p.hardware = classify_hardware(p.name, p.id.kind());
  }
  caps.device_count = static_cast<int>(caps.devices.size());
  caps.gpu_count = static_cast<int>(std::count_if(caps.devices.begin(), caps.devices.end(),
                                                  [](const auto& p) { return p.id.is_cuda() && p.usable(); }));
  if (caps.host.logical_cores == 0 || caps.host.total_memory_bytes == 0) caps.host = query_host();
  if (caps.gpu_count == 0 && config.get_prefer() == device_preference::cuda) {
    caps.fallback_reason = "CUDA was requested (device preference 'cuda') but is unavailable: " +
                           (caps.fallback_reason.empty() ? std::string("no GPU found") : caps.fallback_reason);
  }
}

DEVICEKIT_DECL device choose_default_device(const capabilities& caps, const settings& config) {
  std::vector<device> visible;
  for (const auto& p : caps.devices) visible.push_back(p.id);
  if (!config.has_device()) return assign_device(visible, config, local_rank_from_environment());
  const device wanted = config.get_device();
  if (wanted == device::cpu(0)) return wanted;
  if (std::find(visible.begin(), visible.end(), wanted) != visible.end()) return assign_device(visible, config);
  throw unavailable_default_device_error(wanted, caps);
}

DEVICEKIT_DECL const device_properties& properties_of(const capabilities& caps, device d) {
  for (const auto& p : caps.devices) {
    if (p.id == d) return p;
  }
  if (auto missing = missing_device_of_manager(d, "properties", device_names(caps))) throw *missing;
  throw not_a_device_error(d, device_names(caps));
}

DEVICEKIT_DECL std::uint64_t total_memory_of(const capabilities& caps, device d, const char* operation) {
  for (const auto& p : caps.devices) {
    if (p.id == d) return p.total_memory_bytes;
  }
  if (d == device::cpu()) return caps.host.total_memory_bytes;
  if (auto missing = missing_device_of_manager(d, operation, device_names(caps))) throw *missing;
  throw not_a_memory_device_error(d, device_names(caps));
}

DEVICEKIT_DECL void check_usable(const capabilities& caps, device d) {
  for (const auto& p : caps.devices) {
    if (p.id == d && p.compile_only) throw compile_only_device_error(d, p);
    if (p.id == d && !p.usable()) throw unusable_device_error(d, p);
  }
}

DEVICEKIT_DECL void check_usable(const capabilities& caps, const std::vector<device>& devs) {
  for (const device d : devs) check_usable(caps, d);
}

DEVICEKIT_DECL std::vector<device> memory_devices_of(const capabilities& caps) {
  std::vector<device> out;
  for (const auto& p : caps.devices) {
    const device d = p.id.is_cpu() ? device::cpu() : p.id;
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  if (std::find(out.begin(), out.end(), device::cpu()) == out.end()) out.push_back(device::cpu());
  return out;
}

DEVICEKIT_DECL void check_placement_device(const capabilities& caps, device dev, const char* operation) {
  if (dev.is_cpu()) return;
  for (const auto& p : caps.devices) {
    if (p.id == dev) return;
  }
  if (auto missing = missing_device_of_manager(dev, operation, device_names(caps))) throw *missing;
  throw not_a_placement_device_error(dev, device_names(caps));
}

DEVICEKIT_DECL device placement_default_of(const capabilities& caps, device fallback, const char* operation) {
  const auto scoped = scoped_default_device();
  if (!scoped) return fallback;
  try {
    check_placement_device(caps, *scoped, operation);
  } catch (const device_mismatch&) {
    throw scoped_device_mismatch_error(operation, *scoped, device_names(caps));
  } catch (const config_error& e) {  // a device the process does not have: that error, naming the scope
    throw config_error(std::string(e.what()) + "; the default_device_scope asks for it");
  }
  return *scoped;
}

}  // namespace devicekit::detail
