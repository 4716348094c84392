#pragma once
/// \file
/// `build_report`: a manager's device report (report/report.hpp): what it found, how it routed
/// detection, its strategy, scheme and assignment, and per device the budget, the pool and the
/// scratch in use. The report layer only describes; this is the glue that fills it from a
/// manager, apart from the façade so that the façade does not grow with every field.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/manager/pools.hpp>
#include <devicekit/memory/registry.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/report/report.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// The report of manager `m`, whose pools are `pools` and to which `environment_applied`
/// (settings taken from the environment) was applied; `costs` as the caller measured them.
template <class Manager>
[[nodiscard]] device_report build_report(const Manager& m, const std::vector<std::string>& environment_applied,
                                         const manager_pools& pools, cost_table costs) {
  device_report r;
  r.caps = m.capabilities();
  r.strategy = devicekit::describe_strategy(m.strategy());
  r.scheme = std::string(m.scheme().name());
  try {
    r.assignment = m.plan(tree_summary{}).assignment();
  } catch (const error&) {
    // A custom scheme that cannot plan an empty tree: the report shows no assignment.
  }
  r.default_device = m.default_device();
  r.environment_applied = environment_applied;
  r.costs = std::move(costs);
  r.routing.detector = devicekit::describe_detector<typename Manager::detector_type>();
  const settings& config = m.config();
  for (const auto k : config.get_platforms()) r.routing.platforms.emplace_back(to_string(k));
  r.routing.platforms_source = config.platforms_source();
  r.routing.preference = std::string(to_string(config.get_prefer()));
  if (config.has_device()) {
    r.routing.default_device_choice = "requested: " + config.get_device().str() + " (DEVICEKIT_DEVICE or settings)";
  }
  auto add = [&](device d) {
    device_memory_info info{d, m.budget(d), std::nullopt};
    if (const device_memory* p = pools.find(d)) info.pool = p->stats();
    const scratch_stats scratch = devicekit::scratch_memory_stats(d);
    info.scratch_in_use_bytes = scratch.in_use_bytes;
    info.scratch_peak_bytes = scratch.peak_bytes;
    info.scratch_allocations = scratch.allocations;
    r.memory.push_back(std::move(info));
  };
  for (const auto& p : r.caps.devices) add(p.id);
  if (!r.memory.empty() && r.memory.front().id.is_cuda() && pools.find(device::cpu()) != nullptr) add(device::cpu());
  r.staging = devicekit::staging_memory_stats();
  return r;
}

}  // namespace devicekit::detail
