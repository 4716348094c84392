#pragma once
/// \file
/// The definitions behind report/report.hpp: the routing line, the recommendations and the text
/// report. Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION
/// (core/config.hpp).
#include <devicekit/report/report.hpp>

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

DEVICEKIT_DECL std::string routing_info::mode() const {
  std::string list;
  for (const auto& p : platforms) list += (list.empty() ? "" : ",") + p;
  std::string s = platforms.empty() ? "detector order " + detector
                                    : "platform list " + list + " (" + platforms_source + ") over " + detector;
  if (preference != "auto") s += ", preference " + preference;
  return s;
}

DEVICEKIT_DECL recommendations recommend_for(const capabilities& caps) {
  recommendations r;
  r.hardware = batch_hardware(caps);
  r.batch = recommend_batch_size(r.hardware);
  r.batch_multiplier = batch_multiplier(r.hardware);
  // The precision of hardware that can run the work: none when only unusable GPUs were found.
  const bool runs_on_gpu = r.hardware != hardware_type::cpu;
  const auto preset = runs_on_gpu ? generative_model_preset(caps) : generative_model_preset(false, false);
  r.memory_strategy = preset.strategy.name;
  r.precision = std::string(preset.compute_dtype);
  r.mixed_precision = preset.mixed_precision;
  return r;
}

DEVICEKIT_DECL const device_memory_info* device_report::memory_of(device d) const {
  for (const auto& m : memory) {
    if (m.id == d) return &m;
  }
  return nullptr;
}

DEVICEKIT_DECL const clock_rates* device_report::clocks_of(device d) const {
  for (const auto& c : clocks) {
    if (c.id == d) return &c.clocks;
  }
  return nullptr;
}

DEVICEKIT_DECL hardware_type device_report::default_hardware() const {
  for (const auto& d : caps.devices) {
    if (d.id == default_device) return d.hardware;
  }
  return default_device.is_cpu() ? hardware_type::cpu : hardware_type::unknown;
}

namespace detail {
inline void add_once(std::vector<std::string>& list, std::string item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(std::move(item));
}
inline std::string join_comma(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) {
    if (!out.empty()) out += ", ";
    out += i;
  }
  return out;
}
}  // namespace detail

DEVICEKIT_DECL std::vector<std::string> device_report::platforms() const {
  std::vector<std::string> out;
  for (const auto& d : caps.devices) detail::add_once(out, std::string(to_string(d.id.kind())));
  if (out.empty()) out.emplace_back(to_string(caps.device_type));
  return out;
}

DEVICEKIT_DECL std::vector<std::string> device_report::device_kinds() const {
  std::vector<std::string> out;
  for (const auto& d : caps.devices) detail::add_once(out, d.name);
  return out;
}

namespace detail {
DEVICEKIT_DECL std::string format_bytes(std::uint64_t bytes) {
  char buf[64];
  const double gib = static_cast<double>(bytes) / static_cast<double>(1ull << 30);
  if (gib >= 1.0) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", gib);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / static_cast<double>(1ull << 20));
  }
  return buf;
}

DEVICEKIT_DECL std::string format_fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

DEVICEKIT_DECL std::string memory_line(const device_memory_info& m) {
  std::string share = format_fixed(m.budget.fraction, 2) + " x " + format_bytes(m.budget.total_bytes) + " - " +
                      format_bytes(m.budget.headroom_bytes) + " headroom";
  if (m.budget.capped_to_available && m.budget.available_bytes) {
    share = "min(" + share + ", " + format_bytes(*m.budget.available_bytes) + " available)";
  }
  // The reserve for collectives comes off after the cap (memory_budget::collective_reserve_bytes).
  if (m.budget.collective_reserve_bytes > 0) {
    share += " - " + format_bytes(m.budget.collective_reserve_bytes) + " kept for collectives";
  }
  std::string s = "budget " + format_bytes(m.budget.budget_bytes) + " = " + share;
  if (m.budget.start_bytes > 0) s += ", " + format_bytes(m.budget.start_bytes) + " preallocated";
  if (m.pool) {
    s += "; pool: " + format_bytes(m.pool->allocated_bytes) + " allocated (peak " +
         format_bytes(m.pool->peak_allocated_bytes) + "), " + format_bytes(m.pool->reserved_bytes) + " reserved, " +
         std::to_string(m.pool->active_blocks) + " blocks, fragmentation " + format_fixed(m.pool->fragmentation, 2);
  } else {
    s += "; pool not created yet";
  }
  // Only devicekit's own: the pool's figures say it all.
  if (m.clients.size() > 1 || (m.clients.size() == 1 && m.clients[0].client != "devicekit")) {
    s += "; by client:";
    for (std::size_t i = 0; i < m.clients.size(); ++i) {
      s += (i == 0 ? " " : ", ") + m.clients[i].client + " " + format_bytes(m.clients[i].bytes_in_use);
    }
  }
  if (m.scratch_allocations > 0) {
    s += "; scratch: " + format_bytes(m.scratch_in_use_bytes) + " in use (peak " + format_bytes(m.scratch_peak_bytes) +
         ", " + std::to_string(m.scratch_allocations) + " allocations)";
  }
  return s;
}

DEVICEKIT_DECL std::string staging_line(const pool_stats& p) {
  return format_bytes(p.allocated_bytes) + " in use (peak " + format_bytes(p.peak_allocated_bytes) + "), " +
         format_bytes(p.reserved_bytes) + " reserved (peak " + format_bytes(p.peak_reserved_bytes) + "), " +
         std::to_string(p.pending_stream_frees) + " frees pending on streams";
}
}  // namespace detail

DEVICEKIT_DECL void write_text(std::ostream& os, const device_report& r, bool verbose) {
  const auto& c = r.caps;
  auto line = [&](const std::string& key, const std::string& value) { os << key << ": " << value << '\n'; };
  os << "devicekit " << DEVICEKIT_VERSION_STRING << " device report\n";
  os << "========================================\n";
  line("Backend", r.backend());
  line("Device Type", std::string(to_string(c.device_type)));
  line("Device Count", std::to_string(c.device_count));
  line("GPU Count", std::to_string(c.gpu_count));
  line("Platforms", detail::join_comma(r.platforms()));
  if (const auto kinds = r.device_kinds(); !kinds.empty()) line("Device Kinds", detail::join_comma(kinds));
  line("Memory Strategy", r.strategy.name);
  line("Memory Fraction", detail::format_fixed(r.strategy.fraction, 2));
  line("Distribution", r.scheme);
  if (!r.assignment.empty()) line("Device Assignment", r.assignment.str());
  line("Default Device", r.default_device.str());
  line("CUDA Runtime Version", format_cuda_version(c.cuda_runtime_version));
  line("Driver Version", format_cuda_version(c.driver_version));
  line("Compute Capability", c.cc ? c.cc->str() : std::string("n/a"));
  line("Mixed Precision", std::string(c.precision.fp16 ? "fp16 " : "") + (c.precision.bf16 ? "bf16 " : "") +
                              (c.precision.fp8 ? "fp8" : "") + (c.supports_mixed_precision() ? "" : "none"));
  line("Distributed", c.supports_distributed ? "yes" : "no");
  line("Detector", c.detector);
  line("Routing", r.routing.mode());
  line("Default Device Choice", r.routing.default_device_choice);
  if (!c.fallback_reason.empty()) line("Fallback", c.fallback_reason);
  line("Host", c.host.model_name + ", " + std::to_string(c.host.logical_cores) + " logical cores, " +
                   detail::format_bytes(c.host.total_memory_bytes));
  for (const auto& name : r.environment_applied) line("Environment Set", name);
  for (const auto& text : r.environment_too_late) line("Environment Too Late", text);
  const hardware_type hw = r.default_hardware();
  const auto rec = batch_size_recommendation_for(hw);
  line("Batch Size (" + std::string(to_string(hw)) + ")",
       "min " + std::to_string(rec.min_batch_size) + ", optimal " + std::to_string(rec.optimal_batch_size) +
           ", critical " + std::to_string(rec.critical_batch_size) + (rec.from_table ? "" : " (stand-in)"));
  const auto advice = recommend_for(c);
  os << "Recommendations:\n";
  os << "  Batch Size: " << advice.batch.optimal_batch_size << " per device for " << to_string(advice.hardware)
     << " (min " << advice.batch.min_batch_size << ", critical " << advice.batch.critical_batch_size
     << (advice.batch.from_table ? "" : ", stand-in row") << "; global batch multiplier " << advice.batch_multiplier
     << "x)\n";
  os << "  Memory Strategy: " << advice.memory_strategy
     << " for generative models; by model size: conservative < 1M parameters, balanced < 100M, aggressive above\n";
  os << "  Precision: " << advice.precision
     << (advice.mixed_precision ? " mixed precision (native on this hardware)" : " (no native reduced precision)")
     << '\n';
  os << "Engines:\n";
  for (const auto& e : r.engines) os << "  " << (e.name == "nccl" ? "NCCL" : "MPI") << ": " << e.status << '\n';
  os << "Devices:\n";
  for (const auto& d : c.devices) {
    os << "  " << d.id.str() << "  " << d.name << "  " << detail::format_bytes(d.total_memory_bytes) << "  "
       << to_string(d.hardware) << "  $" << detail::format_fixed(r.costs.per_hour(d.hardware), 2) << "/h\n";
    if (!d.usable()) os << "      Unusable: " << d.unusable_reason << '\n';
    if (const auto* m = r.memory_of(d.id)) os << "      Memory: " << detail::memory_line(*m) << '\n';
    if (!verbose || d.id.is_cpu()) continue;
    auto prop = [&](const char* key, const std::string& value) { os << "      " << key << ": " << value << '\n'; };
    prop("UUID", d.uuid);
    prop("PCI Bus Id", d.pci_bus_id);
    prop("Compute Capability", d.cc.str());
    prop("Multiprocessors", std::to_string(d.multiprocessor_count));
    if (const auto* clk = r.clocks_of(d.id)) {
      prop("Clock Rate", std::to_string(clk->sm_khz / 1000) + " MHz");
      prop("Memory Clock Rate", std::to_string(clk->memory_khz / 1000) + " MHz");
    }
    prop("Memory Bus Width", std::to_string(d.memory_bus_width_bits) + " bits");
    prop("L2 Cache", detail::format_bytes(static_cast<std::uint64_t>(d.l2_cache_bytes)));
    prop("Copy Engines", std::to_string(d.async_engine_count));
    prop("ECC", d.ecc_enabled ? "enabled" : "disabled");
    prop("Max Threads Per Block", std::to_string(d.max_threads_per_block));
    prop("Warp Size", std::to_string(d.warp_size));
    prop("Integrated", d.integrated ? "yes" : "no");
    prop("Managed Memory", d.managed_memory ? "yes" : "no");
    std::string peers;
    for (std::size_t j = 0; j < d.peer_access.size(); ++j) {
      if (d.peer_access[j]) peers += (peers.empty() ? "cuda:" : ", cuda:") + std::to_string(j);
    }
    prop("Peer Access", peers.empty() ? "none" : peers);
  }
  const bool host_listed = std::any_of(c.devices.begin(), c.devices.end(), [](const auto& d) { return d.id.is_cpu(); });
  if (const auto* m = r.memory_of(device::cpu()); m != nullptr && !host_listed) {
    os << "Host Memory: " << detail::memory_line(*m) << '\n';
  }
  if (r.staging) os << "Pinned Staging: " << detail::staging_line(*r.staging) << '\n';
}

}  // namespace devicekit
