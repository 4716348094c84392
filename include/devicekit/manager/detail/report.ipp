#pragma once
/// \file
/// The definitions behind manager/detail/report.hpp: the parts of a report that do not depend on the
/// manager's type (routing from the settings, a device's memory entry, the clock rates).
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/manager/detail/report.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace devicekit::detail {

DEVICEKIT_DECL void fill_report_routing(routing_info& routing, const settings& config) {
  for (const auto k : config.get_platforms()) routing.platforms.emplace_back(to_string(k));
  routing.platforms_source = config.platforms_source();
  routing.preference = std::string(to_string(config.get_prefer()));
  if (config.has_device()) {
    routing.default_device_choice = "requested: " + config.get_device().str() + " (DEVICEKIT_DEVICE or settings)";
  }
}

DEVICEKIT_DECL device_memory_info report_memory_info(device d, const memory_budget& b, const manager_pools& pools) {
  device_memory_info info{d, b, std::nullopt, 0, 0, 0, {}};
  if (const device_memory* p = pools.find(d)) {
    info.pool = p->stats();
    info.clients = p->client_stats();
  }
  // NCCL's, beside the pools; not "other", whose measure would make the device's CUDA context (a
  // report makes none).
  devicekit::add_device_clients(info.clients, d, false);
  const scratch_stats scratch = devicekit::scratch_memory_stats(d);
  info.scratch_in_use_bytes = scratch.in_use_bytes;
  info.scratch_peak_bytes = scratch.peak_bytes;
  info.scratch_allocations = scratch.allocations;
  return info;
}

DEVICEKIT_DECL void fill_report_clocks(device_report& r) {
#if DEVICEKIT_HAS_CUDA
  const cuda_probe* probe = cuda_probe_if_done();
  if (probe == nullptr) return;
  for (const auto& p : r.caps.devices) {
    if (!p.id.is_cuda() || !p.usable() || p.compile_only) continue;
    const auto ordinal = static_cast<std::size_t>(p.id.ordinal());
    if (ordinal >= probe->devices.size() || probe->devices[ordinal].uuid != p.uuid) continue;
    r.clocks.push_back({p.id, devicekit::query_clock_rates(p.id)});
  }
#else
  (void)r;
#endif
}

}  // namespace devicekit::detail
