#pragma once
/// \file
/// `device_manager<Detector, Strategy, Scheme>`: detects devices once, at construction, and
/// answers questions about them. Policies are checked where they are used, with one line that
/// says what is missing. Stock policies are empty and stored with [[no_unique_address]], so a
/// manager is exactly as large as its runtime state (`detail::manager_state`).
///
/// Also here: the global `default_manager()` and the free functions `has_gpu()`,
/// `default_device()` and `print_device_info()`.
///
/// Memory: the manager owns one caching pool per device and memory kind (`memory(dev, kind)`,
/// kinds as jaxlib has them: core/memory_kind.hpp), the device kind sized by its strategy
/// (fraction of total memory less the context headroom). Pools are made on first use, so a
/// manager is cheap to construct and makes no CUDA call for memory until asked. A manager is
/// move-only; destroying it releases its pools, so memory from them must be freed first. The
/// global manager (default_manager()) owns none: it uses the process's pools
/// (memory/registry.hpp), the ones placement uses without a resource, configured by its strategy
/// and allocator kind; re-initialising it replaces them with pools of the new configuration and
/// keeps the old ones alive for what is still allocated from them.
#include <devicekit/core/device_list.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/core/topology.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/distribute/assignment.hpp>
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/distribute/summary.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/registry.hpp>
#include <devicekit/memory/resources.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/place/default_device.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/prefetch.hpp>
#include <devicekit/place/shard.hpp>
#include <devicekit/report/report.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace devicekit {

namespace detail {
/// The pools of a manager, per device and memory kind, made on first use.
struct manager_pool {
  device dev;
  memory_kind kind = memory_kind::device;  ///< device (host memory for cpu:0) or pinned_host
  std::unique_ptr<device_memory> pool;
};
struct memory_registry {
  std::mutex mutex;
  std::vector<manager_pool> pools;
  /// The global manager's device pools, adopted from the process's registry under this manager's
  /// configuration: kept so that memory(d), on every placement, does not rebuild the
  /// configuration's signature. A re-initialised manager has a new registry, and adopts again.
  std::vector<std::pair<device, device_memory*>> adopted;
};

/// What a manager holds at run time; everything else is in its (usually empty) policies.
struct manager_state {
  settings config;
  capabilities caps;
  device default_device;
  std::vector<std::string> environment_applied;
  std::unique_ptr<memory_registry> memory = std::make_unique<memory_registry>();
  /// True for the global manager: its pools are the process's (memory/registry.hpp).
  bool process_pools = false;
};

struct global_manager_access;

/// A text that identifies a pool's configuration (with the allocator kind behind it): the global
/// manager's pools are the process's, replaced when this changes (detail::process_memory::adopt).
[[nodiscard]] inline std::string pool_signature(const pool_config& c, allocator_kind a) {
  std::string s = std::string(to_string(a));
  auto add = [&](const auto& v) { s += "|" + std::to_string(v); };
  add(c.initial_size);
  add(c.growth_factor);
  add(c.max_size.value_or(0));
  add(c.defrag_threshold);
  add(c.min_chunk_size);
  add(c.max_chunk_size);
  add(c.small_size_limit);
  add(static_cast<int>(c.tracking));
  add(static_cast<int>(c.release_on_free));
  add(static_cast<int>(static_cast<bool>(c.on_out_of_memory)));
  add(static_cast<int>(static_cast<bool>(c.on_leak)));
  if (c.budget) {
    add(c.budget->total_bytes);
    add(c.budget->budget_bytes);
    add(c.budget->headroom_bytes);
    add(c.budget->start_bytes);
    add(c.budget->fraction);
  }
  return s;
}

template <class S>
concept configures_pool = requires(const S& s, pool_config& c, const memory_budget& b) {
  s.configure_pool(c, b);
};
}  // namespace detail

/// A strategy policy that turns allocation tracking on for the manager's pools (source location
/// of every live allocation, leak report at destruction), whatever DEVICEKIT_MEMORY_DEBUG says.
template <memory_strategy S>
struct tracked : S {
  void configure_pool(pool_config& config, const memory_budget& budget) const {
    if constexpr (detail::configures_pool<S>) S::configure_pool(config, budget);
    config.tracking = tracking_mode::on;
  }
};

template <class Detector = first_available<cuda_detector, cpu_detector>, class Strategy = balanced,
          class Scheme = schemes::single_device>
class device_manager {
  static_assert(device_detector<Detector>,
                "device_manager: Detector must provide 'capabilities detect(const settings&) const' or 'capabilities "
                "detect() const'");
  static_assert(
      memory_strategy<Strategy>,
      "device_manager: Strategy must provide 'name()' and 'double fraction()' (see devicekit/memory/strategy.hpp)");
  static_assert(distribution_scheme<Scheme>,
                "device_manager: Scheme must provide 'name()' and 'distribution_plan plan(const tree_summary&, "
                "std::span<const device>) const' (see devicekit/distribute/scheme.hpp)");

 public:
  using detector_type = Detector;
  using strategy_type = Strategy;
  using scheme_type = Scheme;

  /// Detects with settings read from the environment (DEVICEKIT_PREFER, DEVICEKIT_DEVICE).
  /// Throws config_error on a bad environment value.
  device_manager() : device_manager(settings::from_environment()) {}

  explicit device_manager(settings config, Detector detector = Detector{}, Strategy strategy = Strategy{},
                          Scheme scheme = Scheme{})
      : detector_(std::move(detector)), strategy_(std::move(strategy)), scheme_(std::move(scheme)) {
    state_.environment_applied = config.apply_environment();
    state_.caps = run_detector(detector_, config);
    normalize(state_.caps, config);
    state_.default_device = choose_default(state_.caps, config);
    state_.config = std::move(config);
    for (const auto& p : state_.caps.devices) {
      if (p.id.is_cuda()) (void)budget(p.id);  // a collective reserve larger than a GPU: config_error now
    }
  }

  /// A manager with a strategy chosen at run time (managers whose Strategy is dynamic_strategy,
  /// such as the global one): settings and strategy from `cfg` (e.g. generative_model_preset).
  explicit device_manager(const manager_config& cfg, Detector detector = Detector{},
                          Scheme scheme = Scheme{}) requires std::same_as<Strategy, dynamic_strategy>
      : device_manager(cfg.config, std::move(detector), dynamic_strategy(cfg.strategy), std::move(scheme)) {}

  [[nodiscard]] const devicekit::capabilities& capabilities() const noexcept { return state_.caps; }
  [[nodiscard]] const settings& config() const noexcept { return state_.config; }
  [[nodiscard]] const Strategy& strategy() const noexcept { return strategy_; }
  [[nodiscard]] const Scheme& scheme() const noexcept { return scheme_; }
  [[nodiscard]] double memory_fraction() const { return static_cast<double>(strategy_.fraction()); }

  /// The devices of the chosen backend: every visible GPU, or cpu:0 after a fallback.
  [[nodiscard]] std::vector<device> devices() const {
    std::vector<device> out;
    for (const auto& d : state_.caps.devices) out.push_back(d.id);
    return out;
  }
  [[nodiscard]] std::vector<device> gpu_devices() const {
    std::vector<device> out;
    for (const auto& d : state_.caps.devices) {
      if (d.id.is_cuda()) out.push_back(d.id);
    }
    return out;
  }
  /// The host, which is always there.
  [[nodiscard]] std::vector<device> cpu_devices() const { return {device::cpu(0)}; }
  [[nodiscard]] device default_device() const noexcept { return state_.default_device; }
  [[nodiscard]] bool has_gpu() const noexcept { return state_.caps.gpu_count > 0; }
  [[nodiscard]] int device_count() const noexcept { return state_.caps.device_count; }
  [[nodiscard]] int gpu_count() const noexcept { return state_.caps.gpu_count; }
  [[nodiscard]] const std::string& fallback_reason() const noexcept { return state_.caps.fallback_reason; }

  /// Properties of one of this manager's devices; config_error if it has no such device.
  [[nodiscard]] const device_properties& properties(device d) const {
    for (const auto& p : state_.caps.devices) {
      if (p.id == d) return p;
    }
    throw config_error("device " + d.str() + " is not one of this manager's devices (" + device_names() + ")");
  }

  /// This process's devices as a device_list (global ids, process index, local hardware ids,
  /// device kinds) under process context `p` (default: the launcher's environment; one process
  /// without one). Gather the lists of all processes with device_list::gather for the global one.
  [[nodiscard]] devicekit::device_list local_device_list(
      const process_context& p = process_context::from_environment()) const {
    std::vector<std::string> kinds;
    for (const auto& d : state_.caps.devices) kinds.push_back(d.name);
    return devicekit::device_list::local(devices(), p, kinds);
  }
  /// The topology of local_device_list(p): platform, platform version, devices.
  [[nodiscard]] device_topology topology(const process_context& p = process_context::from_environment()) const {
    return topology_for_devices(local_device_list(p));
  }

  // --- placement (place/): trees onto this manager's devices -----------------------------------
  // Placed trees allocate from memory(dev), the device's caching pool: they must be dropped
  // before the manager, and only once no queued GPU work still reads them (synchronise the
  // stream that uses them first: the pool hands freed memory out again at once).

  /// `tree` on the default device (or on `dev`), finished on return. The default device is that
  /// of the innermost default_device_scope on this thread, else default_device().
  template <class T>
  [[nodiscard]] auto place(const T& tree) {
    const device dev = placement_default("place");
    return devicekit::place(tree, dev, placement_memory(dev));
  }
  template <class T>
  [[nodiscard]] auto place(const T& tree, device dev) {
    check_placement_device(dev);
    return devicekit::place(tree, dev, placement_memory(dev));
  }
  /// `tree` for `dev` in memory of `kind` (place/place.hpp): `device` as place(tree, dev);
  /// `pinned_host` / `host` leaves of `dev` whose bytes lie in memory(dev, kind). Finished on return.
  template <class T>
  [[nodiscard]] auto place(const T& tree, device dev, memory_kind kind) {
    check_placement_device(dev);
    if (kind == memory_kind::device) return devicekit::place(tree, dev, placement_memory(dev));
    return devicekit::place(tree, dev, kind, memory(dev, kind));
  }
  /// `tree` on the stream's device, queued on `s`.
  template <class T>
  [[nodiscard]] auto place(const T& tree, stream_ref s) {
    check_placement_device(s.get_device());
    return devicekit::place(tree, s.get_device(), s, placement_memory(s.get_device()));
  }
  /// A copy of `tree` on every device of this manager.
  template <class T>
  [[nodiscard]] auto replicate(const T& tree) {
    return devicekit::replicate(tree, devices(), [this](device d) -> device_memory& { return placement_memory(d); });
  }
  /// `tree` split along `axis` over this manager's devices (see place/shard.hpp).
  template <class T>
  [[nodiscard]] auto shard(const T& tree, std::size_t axis = 0, uneven policy = uneven::error) {
    return devicekit::shard(tree, devices(), axis, policy,
                            [this](device d) -> device_memory& { return placement_memory(d); });
  }
  /// `tree` spread over this manager's devices as its scheme plans it (dm.plan): one placed
  /// tree per share, in plan order, as `per_device` (single_device: one; replicate: one per
  /// device) or, for schemes that split the batch, as `sharded` (shard_batch: one shard per
  /// device, its uneven policy applied). A custom scheme's plan is checked (validate_plan); its
  /// row shares may split the batch any way (1, 5, 3 rows for a batch of 9) as long as they
  /// cover it in order, share i starting where share i - 1 ends (config_error otherwise). The
  /// placed trees allocate from memory(dev).
  template <class T>
  [[nodiscard]] auto distribute(const T& tree) {
    const tree_summary summary = summarize_tree(tree);
    const distribution_plan p = plan(summary);
    std::vector<device> devs;
    bool whole = true;
    for (const auto& s : p.shares) {
      devs.push_back(s.dev);
      whole = whole && s.whole;
    }
    if constexpr (requires { Scheme::uneven; }) {
      return devicekit::shard(tree, devs, 0, Scheme::uneven, placement_selector());
    } else if constexpr (requires { Scheme::splits_batch; }) {
      // A custom scheme that declares row shares: placed as it plans them, rows in order.
      std::vector<std::size_t> counts;
      std::size_t next = 0;
      for (std::size_t i = 0; i < p.shares.size(); ++i) {
        const auto& share = p.shares[i];
        if (share.whole || share.begin != next || share.padding != 0) {
          throw config_error("distribute: scheme '" + std::string(scheme_.name()) +
                             "' declares splits_batch, but share " + std::to_string(i) + " (" + share.dev.str() + ") " +
                             (share.whole          ? std::string("is a whole copy")
                              : share.padding != 0 ? "asks for " + std::to_string(share.padding) + " padding row(s)"
                                                   : "starts at row " + std::to_string(share.begin) + " instead of " +
                                                         std::to_string(next)) +
                             "; row shares must cover the batch in order without padding (use basic_shard_batch"
                             "<uneven_batch::pad> for padding)");
        }
        counts.push_back(share.count);
        next += share.count;
      }
      if (next != summary.batch) {
        throw config_error("distribute: scheme '" + std::string(scheme_.name()) + "' gives row shares that sum to " +
                           std::to_string(next) + " rows, but the batch has " + std::to_string(summary.batch) +
                           "; the shares must cover every row once");
      }
      return devicekit::shard(tree, devs, 0, counts, placement_selector());
    } else {
      if (!whole) {
        throw config_error("distribute: scheme '" + std::string(scheme_.name()) +
                           "' gives row shares; declare 'static constexpr bool splits_batch = true' in it to shard");
      }
      return devicekit::replicate(tree, devs, placement_selector());
    }
  }

  /// Trees of `source` placed on the default device (of a default_device_scope, as place(tree))
  /// up to `depth` ahead (see place/prefetch.hpp);
  /// on a GPU, kernels on `consumer` (default: the legacy default stream) wait for each copy, and
  /// a tree's memory is reused only after `consumer` has passed the point where the loop moved on.
  template <class R>
  [[nodiscard]] auto prefetch(R&& source, std::size_t depth = 2, native_stream_handle consumer = nullptr) {
    const device dev = placement_default("prefetch");
    return devicekit::prefetch(std::forward<R>(source), dev, depth, placement_memory(dev), consumer);
  }
  /// The same for kernels on `consumer`, which must be a stream of the default device.
  template <class R>
  [[nodiscard]] auto prefetch(R&& source, std::size_t depth, stream_ref consumer) {
    detail::check_stream(consumer, state_.default_device, "prefetch");
    return devicekit::prefetch(std::forward<R>(source), state_.default_device, depth,
                               placement_memory(state_.default_device), consumer.native_handle());
  }

  [[nodiscard]] device_report report(cost_table costs = {}) const {
    device_report r;
    r.caps = state_.caps;
    r.strategy = describe_strategy(strategy_);
    r.scheme = std::string(scheme_.name());
    try {
      r.assignment = plan(tree_summary{}).assignment();
    } catch (const error&) {
      // A custom scheme that cannot plan an empty tree: the report shows no assignment.
    }
    r.default_device = state_.default_device;
    r.environment_applied = state_.environment_applied;
    r.costs = std::move(costs);
    r.routing.detector = describe_detector<Detector>();
    for (const auto k : state_.config.get_platforms()) r.routing.platforms.emplace_back(to_string(k));
    r.routing.platforms_source = state_.config.platforms_source();
    r.routing.preference = std::string(to_string(state_.config.get_prefer()));
    if (state_.config.has_device()) {
      r.routing.default_device_choice =
          "requested: " + state_.config.get_device().str() + " (DEVICEKIT_DEVICE or settings)";
    }
    auto add = [&](device d) {
      device_memory_info info{d, budget(d), std::nullopt};
      if (const device_memory* m = find_memory(d)) info.pool = m->stats();
      const scratch_stats scratch = scratch_memory_stats(d);
      info.scratch_in_use_bytes = scratch.in_use_bytes;
      info.scratch_peak_bytes = scratch.peak_bytes;
      info.scratch_allocations = scratch.allocations;
      r.memory.push_back(std::move(info));
    };
    for (const auto& p : state_.caps.devices) add(p.id);
    if (!r.memory.empty() && r.memory.front().id.is_cuda() && find_memory(device::cpu()) != nullptr) add(device::cpu());
    r.staging = staging_memory_stats();
    return r;
  }

  /// The devices a scheme plans over: the default device first, then the others in order.
  [[nodiscard]] std::vector<device> scheme_devices() const {
    std::vector<device> out{state_.default_device};
    for (const auto& d : state_.caps.devices) {
      if (d.id != state_.default_device) out.push_back(d.id);
    }
    return out;
  }

  /// What the scheme does with a tree of this summary on this manager's devices (checked).
  [[nodiscard]] distribution_plan plan(const tree_summary& tree) const {
    const auto devs = scheme_devices();
    distribution_plan p = scheme_.plan(tree, std::span<const device>(devs));
    validate_plan(p, tree, devs, scheme_.name());
    return p;
  }

  // --- memory -------------------------------------------------------------------------------------
  /// How the budget of `d` is reached: its total memory, the headroom, the strategy's fraction.
  /// `d` is one of devices() or cpu:0 (config_error otherwise).
  /// On a GPU the budget is reduced by the settings' collective_memory_size (config_error when the
  /// reserve exceeds the device's memory).
  [[nodiscard]] memory_budget budget(device d) const {
    const memory_budget b = budget_for(strategy_, d.kind(), total_memory(d));
    if (!d.is_cuda()) return b;
    return reserve_for_collectives(b, state_.config.get_collective_memory_size(), d.str());
  }

  /// The allocator that serves this manager's GPUs (settings::set_allocator, DEVICEKIT_ALLOCATOR).
  [[nodiscard]] allocator_kind allocator() const noexcept { return state_.config.get_allocator(); }

  /// The configuration the pool of `d` gets: max_size = the budget, initial_size = the
  /// strategy's start (if any), then the strategy's own configure_pool (if it has one).
  [[nodiscard]] pool_config pool_config_for(device d) const {
    pool_config c;
    const memory_budget b = budget(d);
    c.budget = b;
    c.max_size = static_cast<std::size_t>(b.budget_bytes);
    c.initial_size = static_cast<std::size_t>(b.start_bytes);
    // async / platform: every allocation goes to the driver, as jaxlib's cuda_async and platform
    // allocators bypass its BFC pool; the budget still caps what is live.
    c.release_on_free = d.is_cuda() && allocator() != allocator_kind::pool;
    if constexpr (detail::configures_pool<Strategy>) strategy_.configure_pool(c, b);
    return c;
  }

  /// The pool of `d` (made on first use: host memory for cpu:0; for a GPU by the allocator kind:
  /// `pool` a caching pool over a driver pool of its own, `async` cudaMallocAsync per allocation
  /// from the device's default pool, `platform` cudaMalloc per allocation, both without caching).
  /// Thread-safe. config_error for a device this manager does not have.
  [[nodiscard]] device_memory& memory(device d) { return memory(d, memory_kind::device); }

  /// The pool of `kind` memory for `d` (jaxlib's memory kinds, core/memory_kind.hpp): `device` as
  /// memory(d); `host` the host's pool (memory(cpu:0)), whatever `d`; `pinned_host` page-locked
  /// host memory that `d` reads directly, a pool per device, sized exactly (no size classes) and
  /// capped by the balanced budget of host memory. config_error for a device this manager does
  /// not have, and for pinned_host where there is no CUDA device to pin memory for, saying what
  /// to use instead.
  [[nodiscard]] device_memory& memory(device d, memory_kind kind) {
    (void)total_memory(d);  // validates d
    if (kind == memory_kind::host) d = device::cpu();
    check_usable(d);
    if (kind == memory_kind::pinned_host) check_pinned(d);
    const memory_kind slot_kind = kind == memory_kind::pinned_host ? kind : memory_kind::device;
    if (state_.process_pools) {
      auto& registry = detail::process_memory::instance();
      if (slot_kind == memory_kind::pinned_host) return registry.get(d, memory_kind::pinned_host);
      if (!state_.memory) state_.memory = std::make_unique<detail::memory_registry>();
      std::lock_guard lock(state_.memory->mutex);
      for (const auto& [dev, pool] : state_.memory->adopted) {
        if (dev == d) return *pool;
      }
      device_memory& pool =
          registry.adopt(d, memory_kind::device, detail::pool_signature(pool_config_for(d), allocator()),
                         [&] { return make_pool(d); });
      state_.memory->adopted.emplace_back(d, &pool);
      return pool;
    }
    if (!state_.memory) state_.memory = std::make_unique<detail::memory_registry>();
    std::lock_guard lock(state_.memory->mutex);
    for (auto& p : state_.memory->pools) {
      if (p.dev == d && p.kind == slot_kind) return *p.pool;
    }
    std::unique_ptr<device_memory> pool;
    if (slot_kind == memory_kind::pinned_host) {
#if DEVICEKIT_HAS_CUDA
      pool = std::make_unique<memory_pool<pinned_host_resource>>(pinned_host_resource{}, detail::exact_pinned_config());
#endif
    } else {
      pool = make_pool(d);
    }
    state_.memory->pools.push_back({d, slot_kind, std::move(pool)});
    return *state_.memory->pools.back().pool;
  }
  /// The pool of the default device.
  [[nodiscard]] device_memory& memory() { return memory(state_.default_device); }

  /// Stats of the device-kind pools made so far (for the global manager: the process's pools of
  /// its devices and of the host).
  [[nodiscard]] std::vector<std::pair<device, pool_stats>> memory_stats() const {
    std::vector<std::pair<device, pool_stats>> out;
    if (state_.process_pools) {
      for (const device d : memory_devices()) {
        if (const device_memory* m = find_memory(d)) out.emplace_back(d, m->stats());
      }
      return out;
    }
    if (!state_.memory) return out;
    std::lock_guard lock(state_.memory->mutex);
    for (const auto& p : state_.memory->pools) {
      if (p.kind == memory_kind::device) out.emplace_back(p.dev, p.pool->stats());
    }
    return out;
  }

  /// The memory of `d` in jaxlib's terms (Device.memory_stats()), summed over the pools that hold
  /// memory of `d`, where they have been made. On a GPU: this manager's pool of `d` and the
  /// process's (what devicekit::place uses without a resource; it also lends the scratch of CUB
  /// batched copies and NCCL collectives, see scratch_memory_stats). For cpu:0: this manager's
  /// host pool (the process's for the global manager) and every pinned pool (placements of kind
  /// pinned_host, this manager's and the process's, and the copy engine's staging, see
  /// staging_memory_stats): pinned memory is host memory. bytes_limit is budget(d). Makes no
  /// pool. config_error for a device this manager does not have.
  [[nodiscard]] device_memory_stats memory_stats(device d) const {
    device_memory_stats out;
    out.bytes_limit = budget(d).budget_bytes;  // validates d
    for (const device_memory* m : pools_of(d)) out += m->stats();
    return out;
  }

  /// The memory of `kind` for `d`: `device` as memory_stats(d) on a GPU (the host pools only, on
  /// cpu:0), `host` the host pools, `pinned_host` the pinned pools of `d` (of every device and
  /// staging for cpu:0). bytes_limit is the budget of the device whose memory it is.
  [[nodiscard]] device_memory_stats memory_stats(device d, memory_kind kind) const {
    device_memory_stats out;
    const bool host_memory = kind != memory_kind::device || d.is_cpu();
    if (d.is_cuda()) (void)total_memory(d);  // validates d
    out.bytes_limit = budget(host_memory ? device::cpu() : d).budget_bytes;
    for (const device_memory* m : pools_of(d, kind)) out += m->stats();
    return out;
  }

  /// The live allocations on `d` (jaxlib's live_buffers), from the same pools as
  /// memory_stats(d), by address; each with its source location when the pool tracks.
  [[nodiscard]] std::vector<allocation_record> live_buffers(device d) const {
    (void)total_memory(d);
    std::vector<allocation_record> out;
    for (const device_memory* m : pools_of(d)) {
      auto live = m->live_allocations();
      out.insert(out.end(), live.begin(), live.end());
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ptr < b.ptr; });
    return out;
  }

 private:
  [[nodiscard]] std::uint64_t total_memory(device d) const {
    for (const auto& p : state_.caps.devices) {
      if (p.id == d) return p.total_memory_bytes;
    }
    if (d == device::cpu()) return state_.caps.host.total_memory_bytes;
    throw config_error("device " + d.str() + " is not one of this manager's devices (" + device_names() +
                       ", and cpu:0 for host memory)");
  }

  /// A device a detector listed but devicekit cannot use (a GPU only NVML sees): refuse it here,
  /// before any CUDA call, with the reason, rather than fail deep in the runtime.
  void check_usable(device d) const {
    for (const auto& p : state_.caps.devices) {
      if (p.id == d && !p.usable()) {
        throw config_error("cannot use " + d.str() + " (" + p.name + "): " + p.unusable_reason +
                           "; update the NVIDIA driver to one that supports this CUDA toolkit, or run on the CPU "
                           "(DEVICEKIT_PREFER=cpu or DEVICEKIT_PLATFORMS=cpu)");
      }
    }
  }

  friend struct detail::global_manager_access;

  /// A new device-kind pool of `d` as this manager configures it (pool_config_for, allocator()).
  [[nodiscard]] std::unique_ptr<device_memory> make_pool(device d) const {
    pool_config c = pool_config_for(d);
    if (d.is_cpu()) return std::make_unique<memory_pool<host_resource>>(host_resource{}, std::move(c));
    // The driver pool keeps up to the budget when idle: its default threshold (0) would hand
    // memory back at every synchronisation.
    const std::uint64_t threshold = c.max_size.value_or(0);
    const auto mode = allocator() == allocator_kind::platform ? cuda_device_resource::mode::synchronous
                      : allocator() == allocator_kind::async  ? cuda_device_resource::mode::device_default_pool
                                                              : cuda_device_resource::mode::async_pool;
    return std::make_unique<memory_pool<cuda_device_resource>>(cuda_device_resource(d.ordinal(), threshold, mode),
                                                               std::move(c));
  }

  /// pinned_host memory needs the CUDA runtime and a device it is pinned for.
  void check_pinned(device d) const {
#if !DEVICEKIT_HAS_CUDA
    throw config_error("memory kind pinned_host on " + d.str() +
                       " needs CUDA (page-locked memory comes from cudaMallocHost), but devicekit was built without it "
                       "(DEVICEKIT_HAS_CUDA is 0); use memory_kind::host, or build with the CUDA toolkit");
#else
    if (d.is_cpu() && !has_gpu()) {
      throw config_error("memory kind pinned_host on " + d.str() +
                         " needs a CUDA device to pin memory for, and this manager has none" +
                         (fallback_reason().empty() ? std::string() : " (" + fallback_reason() + ")") +
                         "; use memory_kind::host (ordinary host memory) instead");
    }
#endif
  }

  /// The devices whose device-kind pools this manager reports: its devices and cpu:0.
  [[nodiscard]] std::vector<device> memory_devices() const {
    std::vector<device> out;
    for (const auto& p : state_.caps.devices) {
      if (std::find(out.begin(), out.end(), p.id.is_cpu() ? device::cpu() : p.id) == out.end()) {
        out.push_back(p.id.is_cpu() ? device::cpu() : p.id);
      }
    }
    if (std::find(out.begin(), out.end(), device::cpu()) == out.end()) out.push_back(device::cpu());
    return out;
  }

  [[nodiscard]] const device_memory* find_memory(device d, memory_kind kind = memory_kind::device) const {
    if (state_.process_pools) {
#if !DEVICEKIT_HAS_CUDA
      if (d.is_cuda() || kind == memory_kind::pinned_host) return nullptr;
#endif
      return detail::process_memory::instance().find(d, kind);
    }
    if (!state_.memory) return nullptr;
    std::lock_guard lock(state_.memory->mutex);
    for (const auto& p : state_.memory->pools) {
      if (p.dev == d && p.kind == kind) return p.pool.get();
    }
    return nullptr;
  }

  /// The pools that hold memory of `d` (see memory_stats(d)), each once.
  [[nodiscard]] std::vector<const device_memory*> pools_of(device d) const {
    std::vector<const device_memory*> out = pools_of(d, memory_kind::device);
    if (d.is_cpu()) {
      for (const device_memory* m : pools_of(d, memory_kind::pinned_host)) {
        if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
      }
    }
    return out;
  }

  /// The pools of `kind` memory for `d` (see memory_stats(d, kind)), each once.
  [[nodiscard]] std::vector<const device_memory*> pools_of(device d, memory_kind kind) const {
    std::vector<const device_memory*> out;
    auto add = [&](const device_memory* m) {
      if (m != nullptr && std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
    };
    [[maybe_unused]] auto& registry = detail::process_memory::instance();
    if (kind == memory_kind::host || (d.is_cpu() && kind == memory_kind::device)) {
      // The manager's host pool (for the global manager the process's, with those it retired); a
      // user's manager does not count the process's host pool, as before the registry.
      add(find_memory(device::cpu()));
      if (state_.process_pools) {
        for (const device_memory* m : registry.pools(device::cpu(), memory_kind::host)) add(m);
      }
      return out;
    }
#if DEVICEKIT_HAS_CUDA
    if (kind == memory_kind::pinned_host) {
      if (d.is_cpu()) {
        if (state_.memory && !state_.process_pools) {
          std::lock_guard lock(state_.memory->mutex);
          for (const auto& p : state_.memory->pools) {
            if (p.kind == memory_kind::pinned_host) add(p.pool.get());
          }
        }
        for (const device_memory* m : registry.pinned_pools()) add(m);
      } else {
        add(find_memory(d, memory_kind::pinned_host));
        for (const device_memory* m : registry.pools(d, memory_kind::pinned_host)) add(m);
      }
      return out;
    }
    add(find_memory(d));
    for (const device_memory* m : registry.pools(d, memory_kind::device)) add(m);
#else
    add(find_memory(d, kind));
#endif
    return out;
  }

  [[nodiscard]] std::string device_names() const {
    std::string s;
    for (const auto& p : state_.caps.devices) s += (s.empty() ? "" : ", ") + p.id.str();
    return s.empty() ? "none" : s;
  }

  [[nodiscard]] auto placement_selector() {
    return [this](device d) -> device_memory& { return placement_memory(d); };
  }

  /// The pool placement on `d` allocates from (every cpu ordinal is the host).
  [[nodiscard]] device_memory& placement_memory(device d) { return memory(d.is_cpu() ? device::cpu() : d); }

  /// Where placement without a device goes: the innermost default_device_scope's device (checked
  /// to be one of this manager's), else the manager's default device.
  [[nodiscard]] device placement_default(const char* operation) const {
    const auto scoped = scoped_default_device();
    if (!scoped) return state_.default_device;
    try {
      check_placement_device(*scoped);
    } catch (const device_mismatch&) {
      throw device_mismatch(std::string(operation) + ": the default_device_scope asks for " + scoped->str() +
                                ", which is not one of this manager's devices (" + device_names() +
                                "); scope one of them, or pass the device explicitly",
                            std::nullopt, *scoped);
    }
    return *scoped;
  }

  void check_placement_device(device dev) const {
    if (dev.is_cpu()) return;
    for (const auto& p : state_.caps.devices) {
      if (p.id == dev) return;
    }
    throw device_mismatch(
        "cannot place on " + dev.str() + ": it is not one of this manager's devices (" + device_names() + ")",
        std::nullopt, dev);
  }

  /// Makes a detector's answer self-consistent: a custom detector may give only counts.
  static void normalize(devicekit::capabilities& caps, const settings& config) {
    if (!caps.usable()) {
      throw config_error("no detector found a usable device: " +
                         (caps.fallback_reason.empty() ? std::string("no reason given") : caps.fallback_reason) +
                         (config.has_platforms()
                              ? "; widen the platform list (" + detail::platform_list_text(config) +
                                    ") or add a detector for a listed platform"
                              : std::string("; add cpu_detector to the detector list for a CPU fallback")));
    }
    if (caps.devices.empty()) {
      for (int i = 0; i < caps.device_count; ++i) {
        device_properties p;
        p.id = device(caps.device_type, i);
        p.name = caps.device_type == device_kind::cpu ? caps.host.model_name : "custom device";
        p.total_memory_bytes = caps.total_memory_bytes / static_cast<std::uint64_t>(caps.device_count);
        if (caps.cc) p.cc = *caps.cc;
        p.hardware = caps.device_type == device_kind::cpu ? hardware_type::cpu : hardware_type::unknown;
        caps.devices.push_back(std::move(p));
      }
    }
    caps.device_count = static_cast<int>(caps.devices.size());
    caps.gpu_count = static_cast<int>(std::count_if(caps.devices.begin(), caps.devices.end(),
                                                    [](const auto& p) { return p.id.is_cuda() && p.usable(); }));
    if (caps.host.logical_cores == 0 || caps.host.total_memory_bytes == 0) caps.host = query_host();
    if (caps.gpu_count == 0 && config.get_prefer() == device_preference::cuda) {
      caps.fallback_reason = "CUDA was requested (device preference 'cuda') but is unavailable: " +
                             (caps.fallback_reason.empty() ? std::string("no GPU found") : caps.fallback_reason);
    }
  }

  /// The default device as the communicators choose theirs (assign_device,
  /// distribute/assignment.hpp): the configured device (DEVICEKIT_DEVICE or settings; cpu:0 is
  /// always allowed), else visible[local rank % count] under a launcher that exports a node-local
  /// rank (Kokkos does the same), else the first device found.
  static device choose_default(const devicekit::capabilities& caps, const settings& config) {
    std::vector<device> visible;
    for (const auto& p : caps.devices) visible.push_back(p.id);
    if (!config.has_device()) return assign_device(visible, config, local_rank_from_environment());
    const device wanted = config.get_device();
    if (wanted == device::cpu(0)) return wanted;
    if (std::find(visible.begin(), visible.end(), wanted) != visible.end()) return assign_device(visible, config);
    std::string have;
    for (const auto& p : caps.devices) have += (have.empty() ? "" : ", ") + p.id.str();
    throw config_error("requested default device " + wanted.str() + " is not available; available: " + have +
                       (caps.fallback_reason.empty() ? "" : " (" + caps.fallback_reason + ")"));
  }

  detail::manager_state state_;
  [[no_unique_address]] Detector detector_;
  [[no_unique_address]] Strategy strategy_;
  [[no_unique_address]] Scheme scheme_;
};

/// The type of the global manager: CUDA if there is a GPU, else the CPU; its memory strategy is
/// chosen at run time (balanced unless default_manager(..., strategy) says otherwise).
using default_manager_type = device_manager<first_available<cuda_detector, cpu_detector>, dynamic_strategy>;

namespace detail {
/// Makes a manager use the process's pools (memory/registry.hpp): what default_manager() does to
/// the global one each time it is made or re-initialised.
struct global_manager_access {
  template <class M>
  static void share_process_pools(M& m) noexcept {
    m.state_.process_pools = true;
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
}  // namespace detail

/// The process-wide manager, created on first use from the environment.
inline default_manager_type& default_manager() {
  auto& g = detail::global();
  std::lock_guard lock(g.mutex);
  if (g.instance == nullptr) {
    g.instance = new default_manager_type();
    detail::global_manager_access::share_process_pools(*g.instance);
  }
  return *g.instance;
}

/// The process-wide manager under `config` and memory `strategy`. With `force_reinit` an
/// existing manager is re-detected under the new settings and strategy in place (references to
/// it stay valid); without it, an existing manager is returned unchanged. Re-initialising while
/// other threads use the manager is a data race: do it at start-up. Its pools are the process's
/// (memory/registry.hpp): those of the old configuration are replaced on the next memory(dev)
/// and kept alive for what is still allocated from them.
inline default_manager_type& default_manager(settings config, bool force_reinit, dynamic_strategy strategy) {
  auto& g = detail::global();
  std::lock_guard lock(g.mutex);
  if (g.instance == nullptr) {
    g.instance = new default_manager_type(std::move(config), {}, std::move(strategy));
  } else if (force_reinit) {
    *g.instance = default_manager_type(std::move(config), {}, std::move(strategy));
  }
  detail::global_manager_access::share_process_pools(*g.instance);
  return *g.instance;
}
/// The same with the balanced strategy (a re-initialisation goes back to it).
inline default_manager_type& default_manager(settings config, bool force_reinit) {
  return default_manager(std::move(config), force_reinit, dynamic_strategy{});
}
/// The same with settings and strategy from `cfg` (e.g. generative_model_preset().manager()).
inline default_manager_type& default_manager(const manager_config& cfg, bool force_reinit) {
  return default_manager(cfg.config, force_reinit, dynamic_strategy(cfg.strategy));
}

/// The memory of `d` on the global manager (see device_manager::memory_stats(device)).
[[nodiscard]] inline device_memory_stats memory_stats(device d) { return default_manager().memory_stats(d); }
/// The memory of `kind` for `d` on the global manager (see device_manager::memory_stats(device,
/// memory_kind)).
[[nodiscard]] inline device_memory_stats memory_stats(device d, memory_kind kind) {
  return default_manager().memory_stats(d, kind);
}
/// The live allocations on `d` on the global manager (see device_manager::live_buffers).
[[nodiscard]] inline std::vector<allocation_record> live_buffers(device d) { return default_manager().live_buffers(d); }

/// The generative-model preset for the devices `dm` found: mixed precision in bf16 where every
/// GPU has it, else fp16, else fp32 (the CPU).
template <class D, class S, class Sc>
[[nodiscard]] generative_preset generative_model_preset(const device_manager<D, S, Sc>& dm) {
  generative_preset p = generative_model_preset(dm.capabilities());
  p.config = dm.config();
  return p;
}
/// The generative-model preset for the global manager's devices.
[[nodiscard]] inline generative_preset generative_model_preset() { return generative_model_preset(default_manager()); }

[[nodiscard]] inline bool has_gpu() { return default_manager().has_gpu(); }
[[nodiscard]] inline device default_device() { return default_manager().default_device(); }

/// `tree` placed by the global manager on the default device: the innermost
/// default_device_scope's on this thread, else default_device(). Finished on return.
template <class T>
[[nodiscard]] auto place(const T& tree) {
  return default_manager().place(tree);
}

/// Prints the report of `dm` (text; `verbose` adds every device property).
template <class D, class S, class Sc>
void print_device_info(const device_manager<D, S, Sc>& dm, std::ostream& os = std::cout, bool verbose = false) {
  write_text(os, dm.report(), verbose);
}
/// Prints the report of the global manager.
inline void print_device_info(std::ostream& os = std::cout, bool verbose = false) {
  print_device_info(default_manager(), os, verbose);
}

}  // namespace devicekit
