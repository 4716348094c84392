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
#include <devicekit/detect/start_environment.hpp>
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/manager/detail/pools.hpp>
#include <devicekit/memory/registry.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/report/report.hpp>

#include <string>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// The parts of `routing` that the settings decide: the platform list and where it came from, the
/// preference, and how the default device was chosen.
DEVICEKIT_DECL void fill_report_routing(routing_info& routing, const settings& config);

/// The report's entry for `d`: its budget `b`, its pool in `pools` once made, and its scratch.
[[nodiscard]] DEVICEKIT_DECL device_memory_info report_memory_info(device d, const memory_budget& b,
                                                                   const manager_pools& pools);

/// The clock rates of each device in r.caps that the CUDA runtime of this process listed (the same
/// ordinal and UUID as the process's probe), read now: detection leaves them out, and a described
/// device (fixed_detector, compile_only_detector) has none to read.
DEVICEKIT_DECL void fill_report_clocks(device_report& r);

/// The report of manager `m`, whose pools are `pools` and whose settings' environment variables
/// did `environment`; `costs` as the caller measured them; `budget_of(d)` the budget of `d` as far
/// as it is known (a report measures no device's free memory: manager/detail/budget.hpp).
template <class Manager, class BudgetOf>
[[nodiscard]] device_report build_report(const Manager& m, const environment_outcome& environment,
                                         const manager_pools& pools, cost_table costs, BudgetOf&& budget_of) {
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
  r.environment_applied = environment.applied;
  r.environment_too_late = environment.too_late;
  r.costs = std::move(costs);
  r.routing.detector = devicekit::describe_detector<typename Manager::detector_type>();
  fill_report_routing(r.routing, m.config());
  auto add = [&](device d) { r.memory.push_back(report_memory_info(d, budget_of(d), pools)); };
  for (const auto& p : r.caps.devices) add(p.id);
  if (!r.memory.empty() && r.memory.front().id.is_cuda() && pools.find(device::cpu()) != nullptr) add(device::cpu());
  fill_report_clocks(r);
  r.staging = devicekit::staging_memory_stats();
  return r;
}

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/manager/detail/report.ipp>
#endif
