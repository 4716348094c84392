#pragma once
/// \file
/// The device report as JSON (nlohmann::json). Needs nlohmann-json on the include path; the
/// CMake target links it when it was found.
#include <devicekit/report/report.hpp>

#if !__has_include(<nlohmann/json.hpp>)
#  error "<devicekit/report/json.hpp> needs nlohmann-json (Debian: apt-get install nlohmann-json3-dev)"
#endif
#include <nlohmann/json.hpp>

namespace devicekit {

[[nodiscard]] inline nlohmann::json to_json(const pool_stats& s) {
  return {{"allocated_bytes", s.allocated_bytes},
          {"peak_allocated_bytes", s.peak_allocated_bytes},
          {"in_use_bytes", s.in_use_bytes},
          {"reserved_bytes", s.reserved_bytes},
          {"peak_reserved_bytes", s.peak_reserved_bytes},
          {"free_bytes", s.free_bytes},
          {"largest_free_block", s.largest_free_block},
          {"fragmentation", s.fragmentation},
          {"active_blocks", s.active_blocks},
          {"peak_active_blocks", s.peak_active_blocks},
          {"allocation_count", s.allocation_count},
          {"free_count", s.free_count},
          {"oom_count", s.oom_count},
          {"alloc_retries", s.alloc_retries},
          {"upstream_allocations", s.upstream_allocations},
          {"upstream_frees", s.upstream_frees},
          {"chunk_count", s.chunk_count},
          {"pending_stream_frees", s.pending_stream_frees},
          {"stream_fences", s.stream_fences},
          {"max_size", s.max_size}};
}

/// A device's memory by client: [{client, bytes_in_use, peak_bytes_in_use, num_allocs}].
[[nodiscard]] inline nlohmann::json clients_json(const std::vector<client_memory_stats>& clients) {
  nlohmann::json out = nlohmann::json::array();
  for (const client_memory_stats& c : clients) {
    out.push_back({{"client", c.client},
                   {"bytes_in_use", c.bytes_in_use},
                   {"peak_bytes_in_use", c.peak_bytes_in_use},
                   {"num_allocs", c.num_allocs}});
  }
  return out;
}

/// The budget basis of a device and its pool's stats (null until the pool exists).
[[nodiscard]] inline nlohmann::json to_json(const device_memory_info& m) {
  return {{"total_bytes", m.budget.total_bytes},
          {"headroom_bytes", m.budget.headroom_bytes},
          {"fraction", m.budget.fraction},
          {"start_fraction", m.budget.start_fraction},
          {"budget_bytes", m.budget.budget_bytes},
          {"start_bytes", m.budget.start_bytes},
          {"available_bytes", m.budget.available_bytes ? nlohmann::json(*m.budget.available_bytes) : nlohmann::json()},
          {"capped_to_available", m.budget.capped_to_available},
          {"collective_reserve_bytes", m.budget.collective_reserve_bytes},
          {"pool", m.pool ? to_json(*m.pool) : nlohmann::json(nullptr)},
          {"scratch",
           {{"in_use_bytes", m.scratch_in_use_bytes},
            {"peak_bytes", m.scratch_peak_bytes},
            {"allocations", m.scratch_allocations}}},
          {"clients", clients_json(m.clients)}};
}

[[nodiscard]] inline nlohmann::json to_json(const device_properties& d, const cost_table& costs) {
  nlohmann::json j;
  j["id"] = d.id.str();
  j["kind"] = std::string(to_string(d.id.kind()));
  j["ordinal"] = d.id.ordinal();
  j["name"] = d.name;
  j["total_memory_bytes"] = d.total_memory_bytes;
  j["hardware"] = std::string(to_string(d.hardware));
  j["cost_per_hour_usd"] = costs.per_hour(d.hardware);
  j["usable"] = d.usable();
  j["unusable_reason"] = d.usable() ? nlohmann::json(nullptr) : nlohmann::json(d.unusable_reason);
  if (d.id.is_cuda()) {
    j["uuid"] = d.uuid;
    j["pci_bus_id"] = d.pci_bus_id;
    j["pci"] = {{"domain", d.pci_domain}, {"bus", d.pci_bus}, {"device", d.pci_device}};
    j["compute_capability"] = d.cc.str();
    j["multiprocessor_count"] = d.multiprocessor_count;
    j["memory_bus_width_bits"] = d.memory_bus_width_bits;
    j["l2_cache_bytes"] = d.l2_cache_bytes;
    j["async_engine_count"] = d.async_engine_count;
    j["ecc_enabled"] = d.ecc_enabled;
    j["max_threads_per_block"] = d.max_threads_per_block;
    j["warp_size"] = d.warp_size;
    j["integrated"] = d.integrated;
    j["managed_memory"] = d.managed_memory;
    j["concurrent_managed_access"] = d.concurrent_managed_access;
    auto peers = nlohmann::json::array();
    for (std::size_t k = 0; k < d.peer_access.size(); ++k) {
      if (d.peer_access[k]) peers.push_back("cuda:" + std::to_string(k));
    }
    j["peer_access"] = peers;
  }
  return j;
}

[[nodiscard]] inline nlohmann::json to_json(const device_report& r) {
  const auto& c = r.caps;
  nlohmann::json j;
  j["devicekit_version"] = DEVICEKIT_VERSION_STRING;
  j["backend"] = r.backend();
  j["device_type"] = std::string(to_string(c.device_type));
  j["device_count"] = c.device_count;
  j["platforms"] = r.platforms();
  j["device_kinds"] = r.device_kinds();
  j["gpu_count"] = c.gpu_count;
  j["default_device"] = r.default_device.str();
  j["detector"] = c.detector;
  auto version = [](int v) -> nlohmann::json { return v > 0 ? nlohmann::json(format_cuda_version(v)) : nullptr; };
  j["cuda_runtime_version"] = version(c.cuda_runtime_version);
  j["driver_version"] = version(c.driver_version);
  j["fallback_reason"] = c.fallback_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.fallback_reason);
  j["memory_strategy"] = r.strategy.name;
  j["memory_fraction"] = r.strategy.fraction;
  j["distribution_scheme"] = r.scheme;
  {
    // replica x computation, as jaxlib's DeviceAssignment: rows of device names.
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < r.assignment.replica_count(); ++i) {
      nlohmann::json row = nlohmann::json::array();
      for (std::size_t k = 0; k < r.assignment.computation_count(); ++k) row.push_back(r.assignment.at(i, k).str());
      rows.push_back(std::move(row));
    }
    j["device_assignment"] = {{"replicas", r.assignment.replica_count()},
                              {"computations", r.assignment.computation_count()},
                              {"devices", std::move(rows)}};
  }
  j["total_memory_bytes"] = c.total_memory_bytes;
  j["compute_capability"] = c.cc ? nlohmann::json(c.cc->str()) : nlohmann::json(nullptr);
  j["supports_mixed_precision"] = c.supports_mixed_precision();
  j["precision"] = {{"fp16", c.precision.fp16}, {"bf16", c.precision.bf16}, {"fp8", c.precision.fp8}};
  j["supports_distributed"] = c.supports_distributed;
  j["environment_applied"] = r.environment_applied;
  j["environment_too_late"] = r.environment_too_late;
  j["host"] = {{"model_name", c.host.model_name},
               {"logical_cores", c.host.logical_cores},
               {"total_memory_bytes", c.host.total_memory_bytes}};
  const hardware_type hw = r.default_hardware();
  const auto rec = batch_size_recommendation_for(hw);
  const auto cfg = batch_config_for(hw);
  j["batch_size"] = {{"hardware", std::string(to_string(hw))}, {"min", rec.min_batch_size},
                     {"optimal", rec.optimal_batch_size},      {"critical", rec.critical_batch_size},
                     {"from_table", rec.from_table},           {"multiplier", cfg.multiplier}};
  j["routing"] = {{"mode", r.routing.mode()},
                  {"detector", r.routing.detector},
                  {"platforms", r.routing.platforms},
                  {"platforms_source", r.routing.platforms_source.empty() ? nlohmann::json(nullptr)
                                                                          : nlohmann::json(r.routing.platforms_source)},
                  {"preference", r.routing.preference},
                  {"default_device_choice", r.routing.default_device_choice}};
  {
    const auto advice = recommend_for(c);
    j["recommendations"] = {{"batch_size",
                             {{"hardware", std::string(to_string(advice.hardware))},
                              {"optimal", advice.batch.optimal_batch_size},
                              {"min", advice.batch.min_batch_size},
                              {"critical", advice.batch.critical_batch_size},
                              {"from_table", advice.batch.from_table},
                              {"multiplier", advice.batch_multiplier}}},
                            {"memory_strategy", advice.memory_strategy},
                            {"memory_strategy_by_model_size",
                             {{"conservative_below_parameters", 1'000'000},
                              {"balanced_below_parameters", 100'000'000},
                              {"otherwise", "aggressive"}}},
                            {"precision", advice.precision},
                            {"mixed_precision", advice.mixed_precision}};
  }
  {
    nlohmann::json engines = nlohmann::json::object();
    for (const auto& e : r.engines) {
      auto text = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
      engines[e.name] = {{"built", e.built},
                         {"header_version", text(e.header_version)},
                         {"library_version", text(e.library_version)},
                         {"status", e.status}};
    }
    j["engines"] = std::move(engines);
  }
  auto devices = nlohmann::json::array();
  for (const auto& d : c.devices) {
    auto dj = to_json(d, r.costs);
    if (const auto* m = r.memory_of(d.id)) dj["memory"] = to_json(*m);
    if (d.id.is_cuda()) {
      // Null where the report read no clocks: a device this process cannot use or only describes.
      const auto* clk = r.clocks_of(d.id);
      dj["clock_rate_khz"] = clk != nullptr ? nlohmann::json(clk->sm_khz) : nlohmann::json(nullptr);
      dj["memory_clock_rate_khz"] = clk != nullptr ? nlohmann::json(clk->memory_khz) : nlohmann::json(nullptr);
    }
    devices.push_back(std::move(dj));
  }
  j["devices"] = devices;
  const auto* host = r.memory_of(device::cpu());
  const bool host_listed = std::any_of(c.devices.begin(), c.devices.end(), [](const auto& d) { return d.id.is_cpu(); });
  j["host_memory"] = host != nullptr && !host_listed ? to_json(*host) : nlohmann::json(nullptr);
  j["staging"] = r.staging ? to_json(*r.staging) : nlohmann::json(nullptr);
  return j;
}

}  // namespace devicekit
