#pragma once
/// \file
/// The definitions behind manager/global.hpp: the global manager and the free functions that use it.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/manager/global.hpp>

#include <devicekit/core/error.hpp>

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

DEVICEKIT_DECL default_manager_type& default_manager() {
  auto& g = detail::global();
  std::lock_guard lock(g.mutex);
  if (g.instance == nullptr) {
    g.instance = new default_manager_type();
    detail::global_manager_access::share_process_pools(*g.instance);
  }
  return *g.instance;
}

namespace detail {
/// "device preference 'cpu' (the global manager's: 'auto')" for each choice of `wanted` (effective
/// settings) that differs from `current` (the global manager's config()).
inline void settings_differences(const settings& wanted, const settings& current, std::vector<std::string>& out) {
  const auto differ = [&out](const std::string& what, const std::string& want, const std::string& have) {
    if (want != have) out.push_back(what + " " + want + " (the global manager's: " + have + ")");
  };
  const auto quoted = [](std::string_view v) { return "'" + std::string(v) + "'"; };
  differ("device preference", quoted(to_string(wanted.get_prefer())), quoted(to_string(current.get_prefer())));
  differ("default device", wanted.has_device() ? wanted.get_device().str() : "none",
         current.has_device() ? current.get_device().str() : "none");
  differ("platform list", wanted.has_platforms() ? format_platform_list(wanted.get_platforms()) : "none",
         current.has_platforms() ? format_platform_list(current.get_platforms()) : "none");
  differ("NVML library", wanted.has_nvml_library() ? quoted(wanted.get_nvml_library()) : "none",
         current.has_nvml_library() ? quoted(current.get_nvml_library()) : "none");
  differ("allocator", std::string(to_string(wanted.get_allocator())), std::string(to_string(current.get_allocator())));
  differ("collective memory size", std::to_string(wanted.get_collective_memory_size()) + " bytes",
         std::to_string(current.get_collective_memory_size()) + " bytes");
  const auto& want_env = wanted.environment_variables();
  const auto& have_env = current.environment_variables();
  const auto value_in = [](const auto& env, const std::string& name) {
    const auto it = env.find(name);
    return it == env.end() ? std::string("unset") : "'" + it->second + "'";
  };
  for (const auto& [name, value] : want_env)
    differ("environment variable " + name, "'" + value + "'", value_in(have_env, name));
  for (const auto& [name, value] : have_env) {
    if (!want_env.contains(name)) differ("environment variable " + name, "unset", "'" + value + "'");
  }
}

inline std::string describe_strategy_info(const strategy_info& s) {
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%.3g", s.fraction);
  std::string out = "'" + s.name + "' (" + fraction;
  if (s.start_fraction > 0) {
    std::snprintf(fraction, sizeof fraction, "%.3g", s.start_fraction);
    out += ", start " + std::string(fraction);
  }
  if (s.headroom_bytes) out += ", headroom " + std::to_string(*s.headroom_bytes) + " bytes";
  return out + ")";
}

inline bool same_strategy(const strategy_info& a, const strategy_info& b) {
  return a.name == b.name && a.fraction == b.fraction && a.start_fraction == b.start_fraction &&
         a.headroom_bytes == b.headroom_bytes;
}

/// A request without force_reinit is for the global manager as it is: settings or a strategy that
/// differ from its own would be ignored silently, so they are refused, saying what differs.
inline void check_matches_existing(const default_manager_type& dm, const std::optional<settings>& config,
                                   const std::optional<dynamic_strategy>& strategy) {
  std::vector<std::string> differences;
  if (config) settings_differences(config->with_environment(), dm.config(), differences);
  if (strategy && !same_strategy(strategy->info(), dm.strategy().info())) {
    differences.push_back("memory strategy " + describe_strategy_info(strategy->info()) +
                          " (the global manager's: " + describe_strategy_info(dm.strategy().info()) + ")");
  }
  if (differences.empty()) return;
  std::string msg =
      "default_manager: the global manager exists already, and without force_reinit it stays as it is, "
      "but this call asks for ";
  for (std::size_t i = 0; i < differences.size(); ++i) msg += (i ? "; " : "") + differences[i];
  throw config_error(msg +
                     ". Pass force_reinit = true to re-detect under what was asked, or call default_manager() to "
                     "use the global manager as it is");
}

DEVICEKIT_DECL default_manager_type& make_default_manager(std::optional<settings> config,
                                                          std::optional<dynamic_strategy> strategy, bool force_reinit) {
  auto& g = global();
  std::lock_guard lock(g.mutex);
  if (g.instance == nullptr) {
    g.instance = new default_manager_type(config ? std::move(*config) : settings{}, {},
                                          strategy ? std::move(*strategy) : dynamic_strategy{});
  } else if (!force_reinit) {
    check_matches_existing(*g.instance, config, strategy);
  } else {
    // What was not given stays as it is: read before the manager is replaced.
    settings next_config = config ? std::move(*config) : g.instance->config();
    dynamic_strategy next_strategy = strategy ? std::move(*strategy) : g.instance->strategy();
    *g.instance = default_manager_type(std::move(next_config), {}, std::move(next_strategy));
  }
  global_manager_access::share_process_pools(*g.instance);
  return *g.instance;
}
}  // namespace detail

DEVICEKIT_DECL default_manager_type& default_manager(settings config, bool force_reinit, dynamic_strategy strategy) {
  return detail::make_default_manager(std::move(config), std::move(strategy), force_reinit);
}

DEVICEKIT_DECL default_manager_type& default_manager(settings config, bool force_reinit) {
  return detail::make_default_manager(std::move(config), std::nullopt, force_reinit);
}

DEVICEKIT_DECL default_manager_type& default_manager(const manager_config& cfg, bool force_reinit) {
  return default_manager(cfg.config, force_reinit, dynamic_strategy(cfg.strategy));
}

DEVICEKIT_DECL device_memory_stats memory_stats(device d, memory_kind kind) {
  return default_manager().memory_stats(d, kind);
}

DEVICEKIT_DECL device_memory_stats memory_stats(device d) { return default_manager().memory_stats(d); }

DEVICEKIT_DECL std::vector<allocation_record> live_buffers(device d) { return default_manager().live_buffers(d); }

DEVICEKIT_DECL generative_preset generative_model_preset() { return generative_model_preset(default_manager()); }

DEVICEKIT_DECL bool has_gpu() { return default_manager().has_gpu(); }

DEVICEKIT_DECL device default_device() { return default_manager().default_device(); }

}  // namespace devicekit
