#pragma once
/// \file
/// The global manager, `default_manager()`, and the free functions that use it: `has_gpu()`,
/// `default_device()`, `place(tree)`, `memory_stats(dev)`, `live_buffers(dev)`,
/// `generative_model_preset()` and `print_device_info()`. Apart from the façade because it is
/// process-wide state with its own rules: made on first use, never destroyed (no CUDA call from a
/// static destructor after the runtime has shut down), re-initialised in place. Its pools are the
/// process's (memory/registry.hpp), the ones placement uses without a resource, configured by its
/// strategy and allocator kind; re-initialising it replaces them with pools of the new
/// configuration and keeps the old ones alive for what is still allocated from them.
#include <devicekit/core/device.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/manager/device_manager.hpp>
#include <devicekit/memory/detail/allocation_registry.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/report/report.hpp>

#include <concepts>
#include <iostream>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace devicekit {

/// The type of the global manager: CUDA if there is a GPU, else the CPU; its memory strategy is
/// chosen at run time (balanced unless default_manager(..., strategy) says otherwise).
using default_manager_type = device_manager<first_available<cuda_detector, cpu_detector>, dynamic_strategy>;

namespace detail {
/// Makes a manager use the process's pools (memory/registry.hpp): what default_manager() does to
/// the global one each time it is made or re-initialised.
struct global_manager_access {
  template <class M>
  static void share_process_pools(M& m) noexcept {
    m.state_.pools.use_process_pools();
  }
};

struct global_manager {
  std::mutex mutex;
  // Deliberately never destroyed: the global manager may own CUDA resources, and a static
  // destructor running after the CUDA runtime has shut down must not touch them.
  default_manager_type* instance = nullptr;
};
inline global_manager& global() {
  static global_manager* g = new global_manager;
  return *g;
}

/// default_manager's body: the global manager, made from `config` and `strategy` if there is none
/// yet, else re-initialised from them in place when `force_reinit`. What is not given is kept from
/// the current manager (its effective settings, its strategy); on first creation it is the
/// environment's settings and the balanced strategy.
DEVICEKIT_DECL default_manager_type& make_default_manager(std::optional<settings> config,
                                                          std::optional<dynamic_strategy> strategy, bool force_reinit);
}  // namespace detail

/// The process-wide manager, created on first use from the environment.
DEVICEKIT_DECL default_manager_type& default_manager();

/// The process-wide manager under `config` (its unset fields filled from the environment, as any
/// manager's: settings::with_environment) and memory `strategy`. With `force_reinit` an existing
/// manager is re-detected under the new settings and strategy in place (references to it stay
/// valid). Without it, an existing manager is returned unchanged, and only if it already has
/// these effective settings and this strategy: otherwise config_error, naming what differs (the
/// settings would be ignored; pass force_reinit = true to apply them, or call default_manager()
/// to take the manager as it is). Re-initialising while other
/// threads use the manager is a data race: do it at start-up. Its pools are the process's
/// (memory/registry.hpp): those of the old configuration are replaced on the next memory(dev)
/// and kept alive for what is still allocated from them.
DEVICEKIT_DECL default_manager_type& default_manager(settings config, bool force_reinit, dynamic_strategy strategy);

/// The same with any memory strategy policy: `default_manager(settings, true, dk::aggressive{})`,
/// `dk::custom_fraction<1, 2>{}`, a `runtime_fraction` (described by describe_strategy).
template <memory_strategy S>
requires(!std::same_as<S, dynamic_strategy>) default_manager_type& default_manager(settings config, bool force_reinit,
                                                                                   const S& strategy) {
  return default_manager(std::move(config), force_reinit, dynamic_strategy(describe_strategy(strategy)));
}

/// The same with settings alone. A re-initialisation changes the settings only and keeps the
/// manager's current memory strategy (pass one to change it too); a manager made by this call
/// gets the balanced strategy. Without `force_reinit`, settings other than the existing manager's
/// are a config_error, as above: `default_manager(settings, false)` never ignores them.
DEVICEKIT_DECL default_manager_type& default_manager(settings config, bool force_reinit);

/// The same with a memory strategy alone (`default_manager(dk::aggressive{}, true)`). A
/// re-initialisation changes the strategy only and re-detects under the manager's current settings
/// (its config(): what it was given, with what the environment filled in then); a manager made by
/// this call reads its settings from the environment. Without `force_reinit`, a strategy other than
/// the existing manager's is a config_error, as above.
template <memory_strategy S>
default_manager_type& default_manager(const S& strategy, bool force_reinit) {
  return detail::make_default_manager(std::nullopt, dynamic_strategy(describe_strategy(strategy)), force_reinit);
}

/// The same with settings and strategy from `cfg` (e.g. generative_model_preset().manager()).
DEVICEKIT_DECL default_manager_type& default_manager(const manager_config& cfg, bool force_reinit);

/// The memory of `d` on the global manager (see device_manager::memory_stats(device)).
[[nodiscard]] DEVICEKIT_DECL device_memory_stats memory_stats(device d);
/// The memory of `kind` for `d` on the global manager (see device_manager::memory_stats(device,
/// memory_kind)).
[[nodiscard]] DEVICEKIT_DECL device_memory_stats memory_stats(device d, memory_kind kind);
/// The live allocations on `d` on the global manager (see device_manager::live_buffers).
[[nodiscard]] DEVICEKIT_DECL std::vector<allocation_record> live_buffers(device d);

/// The generative-model preset for the devices `dm` found: mixed precision in bf16 where every
/// GPU has it, else fp16, else fp32 (the CPU).
template <class D, class S, class Sc>
[[nodiscard]] generative_preset generative_model_preset(const device_manager<D, S, Sc>& dm) {
  generative_preset p = generative_model_preset(dm.capabilities());
  p.config = dm.config();
  return p;
}
/// The generative-model preset for the global manager's devices.
[[nodiscard]] DEVICEKIT_DECL generative_preset generative_model_preset();

[[nodiscard]] DEVICEKIT_DECL bool has_gpu();
[[nodiscard]] DEVICEKIT_DECL device default_device();

/// `tree` placed by the global manager on the default device: the innermost
/// default_device_scope's on this thread, else default_device(). Finished on return.
template <class T>
[[nodiscard]] auto place(const T& tree) {
  return default_manager().place(tree);
}

/// Prints the report of `dm` (text; `verbose` adds every GPU property: see write_text).
template <class D, class S, class Sc>
void print_device_info(const device_manager<D, S, Sc>& dm, std::ostream& os = std::cout, bool verbose = false) {
  write_text(os, dm.report(), verbose);
}
/// Prints the report of the global manager. Inline in every mode: the report lists the engines
/// (NCCL, MPI) that the caller's translation unit was built with, which the compiled part need not share.
inline void print_device_info(std::ostream& os = std::cout, bool verbose = false) {
  print_device_info(default_manager(), os, verbose);
}

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/manager/global.ipp>
#endif
