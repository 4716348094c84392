#pragma once
/// \file
/// `manager_pools`: a manager's map from (device, memory kind) to its caching pool, made on first
/// use. Two modes: a user's manager owns its pools (and, when it goes, hands those from which
/// something is still allocated to the process's registry, which keeps them until it is freed);
/// the global manager adopts the process's
/// (memory/registry.hpp, the pools placement uses without a resource) under its configuration,
/// and the registry replaces them when that configuration changes. The lookup, both modes and the
/// differences between builds with and without CUDA live here, so the façade asks for a pool and
/// does not care where it comes from. RMM keeps its device -> resource map as one small facility
/// the same way (per_device_resource.hpp).
#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/pool_config.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// A text that identifies a pool's configuration (with the allocator kind behind it): the global
/// manager's pools are the process's, replaced when this changes (detail::process_memory::adopt).
[[nodiscard]] DEVICEKIT_DECL std::string pool_signature(const pool_config& c, allocator_kind a);

/// Whether `d` can have pinned_host memory: it needs the CUDA runtime and a device it is pinned
/// for (a GPU, or the cpu device of a manager that has one).
[[nodiscard]] constexpr bool pinned_available(device d, bool has_gpu) noexcept {
  return DEVICEKIT_HAS_CUDA && (d.is_cuda() || has_gpu);
}

/// config_error unless pinned_available(d, has_gpu), saying what to use instead.
DEVICEKIT_DECL void check_pinned(device d, bool has_gpu, const std::string& fallback_reason);

/// The pools of a manager, per device and memory kind (see the file comment).
class manager_pools {
 public:
  /// Makes this the global manager's: its pools are from now on the process's.
  void use_process_pools() noexcept { process_ = true; }

  /// The pool of `slot_kind` (device or pinned_host) for `d`, made on first use. A device-kind
  /// pool is made by devicekit::make_device_pool(d, config(), a) (memory/pool.hpp); a pinned pool
  /// is sized exactly (exact_pinned_config). `config` is called only when a pool is made or adopted.
  template <class Config>
  [[nodiscard]] device_memory& get(device d, memory_kind slot_kind, allocator_kind a, Config&& config) {
    using callable = std::remove_reference_t<Config>;
    return get_or_make(
        d, slot_kind, a, [](void* c) -> pool_config { return (*static_cast<callable*>(c))(); },
        const_cast<void*>(static_cast<const void*>(std::addressof(config))));
  }

  /// The pool of (d, kind) if it has been made; null otherwise (stats must not make pools).
  [[nodiscard]] const device_memory* find(device d, memory_kind kind = memory_kind::device) const;

  /// Stats of the device-kind pools made so far; for the global manager those of `devices`
  /// (its devices and the host) among the process's pools.
  [[nodiscard]] std::vector<std::pair<device, pool_stats>> device_stats(const std::vector<device>& devices) const;

  /// The pools that hold memory of `d` (see device_manager::memory_stats(d)), each once: those of
  /// the device kind (this manager's and the process's, which dk::place uses without a resource),
  /// and for cpu:0 the pinned ones too (pinned memory is host memory).
  [[nodiscard]] std::vector<const device_memory*> pools_of(device d) const;

  /// The pools of `kind` memory for `d` (see device_manager::memory_stats(d, kind)), each once:
  /// this manager's and the process's where they hold memory of `d`.
  [[nodiscard]] std::vector<const device_memory*> pools_of(device d, memory_kind kind) const;

  /// Calls `f` with each of pools_of(d), then with each pool of the same memory that the registry
  /// keeps for what outlived its manager (process_memory::visit_kept: under the registry's lock,
  /// since such a pool goes with its last allocation).
  void for_each_pool_of(device d, const std::function<void(const device_memory&)>& f) const;
  /// The same for pools_of(d, kind).
  void for_each_pool_of(device d, memory_kind kind, const std::function<void(const device_memory&)>& f) const;

 private:
  /// get() with the configuration as a callback (`config(context)`), so that the lookup is not
  /// compiled again for every manager type.
  [[nodiscard]] device_memory& get_or_make(device d, memory_kind slot_kind, allocator_kind a,
                                           pool_config (*config)(void*), void* context);

  /// One pool of a user's manager.
  struct owned_pool {
    device dev;
    memory_kind kind = memory_kind::device;  ///< device (host memory for cpu:0) or pinned_host
    std::unique_ptr<device_memory> pool;
  };
  /// Behind a pointer so that the manager stays movable (the mutex is not).
  struct state {
    state() = default;
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    /// Hands each pool to the process's registry, which destroys it now if nothing allocated from
    /// it is live, and otherwise keeps it until that memory is freed
    /// (process_memory::keep_while_allocated): placed trees and buffers may outlive their manager.
    ~state();

    std::mutex mutex;
    std::vector<owned_pool> pools;
    /// The global manager's device pools, adopted from the process's registry under this
    /// manager's configuration: kept so that get(d), on every placement, does not rebuild the
    /// configuration's signature. A re-initialised manager has new state, and adopts again.
    std::vector<std::pair<device, device_memory*>> adopted;
  };

  std::unique_ptr<state> state_ = std::make_unique<state>();
  /// True for the global manager: its pools are the process's (memory/registry.hpp).
  bool process_ = false;
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/manager/detail/pools.ipp>
#endif
