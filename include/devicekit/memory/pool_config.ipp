#pragma once
/// \file
/// The definitions behind memory/pool_config.hpp: validation, DEVICEKIT_MEMORY_DEBUG and the budget
/// of a pool.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/pool_config.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL bool memory_debug_from_environment() {
  const char* v = std::getenv("DEVICEKIT_MEMORY_DEBUG");
  if (v == nullptr) return false;
  const std::string s(v);
  if (s.empty() || s == "0" || s == "off" || s == "false" || s == "no") return false;
  if (s == "1" || s == "on" || s == "true" || s == "yes") return true;
  throw config_error("DEVICEKIT_MEMORY_DEBUG='" + s +
                     "' is not valid; allowed values: 1, on, true, yes (tracking on) "
                     "or 0, off, false, no, empty (tracking off)");
}

DEVICEKIT_DECL pool_config validated(pool_config config) {
  auto bad = [](const std::string& what) { throw config_error("pool_config: " + what); };
  if (!std::isfinite(config.growth_factor) || config.growth_factor < 1.0) {
    bad("growth_factor " + std::to_string(config.growth_factor) +
        " must be >= 1 (1 grows by what is needed, 2 doubles)");
  }
  if (!(config.defrag_threshold >= 0.0 && config.defrag_threshold <= 1.0)) {
    bad("defrag_threshold " + std::to_string(config.defrag_threshold) + " must lie in [0, 1]");
  }
  if (config.min_chunk_size == 0 || config.min_chunk_size > config.max_chunk_size) {
    bad("min_chunk_size must be > 0 and <= max_chunk_size");
  }
  if (config.small_size_limit > size_classes::max_small) {
    bad("small_size_limit " + std::to_string(config.small_size_limit) + " must be at most 1 MiB");
  }
  // RMM's pool_memory_resource refuses the same pair ("Initial pool size exceeds the maximum pool
  // size"): cutting the start to max_size would hide which of the two was meant.
  if (config.max_size && config.initial_size > *config.max_size) {
    bad("initial_size " + human_bytes(config.initial_size) + " (" + std::to_string(config.initial_size) +
        " bytes) is more than max_size " + human_bytes(*config.max_size) + " (" + std::to_string(*config.max_size) +
        " bytes): a pool cannot preallocate more than it may hold; lower initial_size to at most max_size (0 "
        "preallocates nothing), or raise max_size");
  }
  if (config.release_on_free) {
    config.growth_factor = 1.0;
    config.initial_size = 0;
  }
  return config;
}

DEVICEKIT_DECL memory_budget budget_of(const pool_config& config, device_kind kind, std::size_t total_bytes,
                                       std::optional<std::uint64_t> available_bytes) {
  memory_budget b = config.budget ? *config.budget : budget_for(balanced{}, kind, total_bytes);
  if (!config.budget && !config.max_size && available_bytes) b = cap_to_available(b, *available_bytes);
  if (config.max_size && !config.budget) {
    b.budget_bytes = *config.max_size;
    b.fraction = b.total_bytes > 0
                     ? std::min(1.0, static_cast<double>(*config.max_size) / static_cast<double>(b.total_bytes))
                     : 1.0;
  }
  return b;
}

DEVICEKIT_DECL std::string budget_text(const memory_budget& b) {
  if (b.total_bytes == 0) return {};
  char frac[32];
  std::snprintf(frac, sizeof frac, "%.2f", b.fraction);
  std::string s = std::string(frac) + " of " + human_bytes(b.total_bytes) + " total, less " +
                  human_bytes(b.headroom_bytes) + " headroom";
  if (b.capped_to_available && b.available_bytes) {
    s += ", capped to the " + human_bytes(*b.available_bytes) + " the device had available";
  }
  return s;
}

}  // namespace devicekit::detail
