#pragma once
/// \file
/// The definitions behind manager/global.hpp: the global manager and the free functions that use it.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/manager/global.hpp>

#include <mutex>
#include <utility>

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
DEVICEKIT_DECL default_manager_type& make_default_manager(std::optional<settings> config,
                                                          std::optional<dynamic_strategy> strategy, bool force_reinit) {
  auto& g = global();
  std::lock_guard lock(g.mutex);
  if (g.instance == nullptr) {
    g.instance = new default_manager_type(config ? std::move(*config) : settings{}, {},
                                          strategy ? std::move(*strategy) : dynamic_strategy{});
  } else if (force_reinit) {
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
