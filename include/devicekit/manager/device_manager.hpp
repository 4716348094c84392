#pragma once
/// \file
/// `device_manager<Detector, Strategy, Scheme>`, the façade: detects devices once, at
/// construction, and answers questions about them; places trees on them (place/), spreads trees
/// as its scheme plans (distribute/), and hands out its pools (memory/). Each of those jobs lives
/// in its own header: manager/strategy.hpp, and under manager/detail/ detection.hpp, budget.hpp,
/// pools.hpp, row_shares.hpp, report.hpp, errors.hpp; this class only forwards, so a reader stops
/// at the level they need.
///
/// Policies are checked where they are used, with one line that says what is missing. Stock
/// policies are empty and stored with [[no_unique_address]], so a manager is exactly as large as
/// its runtime state (`detail::manager_state`).
///
/// Memory: the manager owns one caching pool per device and memory kind (`memory(dev, kind)`, kinds as jaxlib has them:
/// core/memory_kind.hpp), the device kind sized by its strategy (fraction of total memory less the context headroom,
/// capped to what the device has available). Pools are made on first use, so a manager is cheap to construct and makes
/// no CUDA call for memory until asked. A manager is move-only. Destroying it destroys its pools from which nothing is
/// allocated; a pool from which something still lives (a placed tree, a device_buffer) goes to the process's registry,
/// which hands its cache back and keeps it until that memory is freed (memory/registry.hpp), so what a manager made may
/// outlive it. The global manager (manager/global.hpp) owns none: it uses the process's pools.
#include <devicekit/core/device.hpp>
#include <devicekit/core/device_list.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/core/topology.hpp>
#include <devicekit/place/uneven.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/detect/start_environment.hpp>
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/distribute/summary.hpp>
#include <devicekit/manager/detail/budget.hpp>
#include <devicekit/manager/detail/detection.hpp>
#include <devicekit/manager/detail/errors.hpp>
#include <devicekit/manager/detail/pools.hpp>
#include <devicekit/manager/detail/report.hpp>
#include <devicekit/manager/detail/row_shares.hpp>
#include <devicekit/manager/strategy.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/place/default_device.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/prefetch.hpp>
#include <devicekit/place/shard.hpp>
#include <devicekit/report/report.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

namespace detail {
/// What a manager holds at run time; everything else is in its (usually empty) policies.
struct manager_state {
  settings config;
  capabilities caps;
  device default_device;
  environment_outcome environment;
  manager_pools pools;
  available_memory available;  ///< what each GPU had available when its budget was first needed
};

struct global_manager_access;
}  // namespace detail

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

  /// Detects with settings read from the environment (DEVICEKIT_PREFER, DEVICEKIT_DEVICE, ...:
  /// core/settings.hpp). Throws config_error on a bad environment value.
  device_manager() : device_manager(settings{}) {}

  /// Detects with `config`, whose unset fields the environment fills unless it was made with
  /// settings::without_environment() (settings::with_environment(); config() shows the result):
  /// `device_manager<> dm(dk::settings{}.set_platforms(...))` still honours DEVICEKIT_DEVICE.
  /// Throws config_error on a bad value of a variable it reads.
  explicit device_manager(settings config, Detector detector = Detector{}, Strategy strategy = Strategy{},
                          Scheme scheme = Scheme{})
      : detector_(std::move(detector)), strategy_(std::move(strategy)), scheme_(std::move(scheme)) {
    config = config.with_environment();
    state_.environment = apply_environment_before_detection(config);
    state_.caps = run_detector(detector_, config);
    detail::normalize_capabilities(state_.caps, config);
    state_.default_device = detail::choose_default_device(state_.caps, config);
    state_.config = std::move(config);
    for (const auto& p : state_.caps.devices) {
      if (p.id.is_cuda()) (void)budget_of(p.id, false);  // a collective reserve larger than a GPU: config_error now
    }
  }

  /// A manager with a strategy chosen at run time (managers whose Strategy is dynamic_strategy,
  /// such as the global one): settings and strategy from `cfg` (e.g. generative_model_preset).
  explicit device_manager(const manager_config& cfg, Detector detector = Detector{},
                          Scheme scheme = Scheme{}) requires std::same_as<Strategy, dynamic_strategy>
      : device_manager(cfg.config, std::move(detector), dynamic_strategy(cfg.strategy), std::move(scheme)) {}

  [[nodiscard]] const devicekit::capabilities& capabilities() const noexcept { return state_.caps; }
  /// The effective settings: those given, with what the environment filled in.
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
  [[nodiscard]] const device_properties& properties(device d) const { return detail::properties_of(state_.caps, d); }

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
  // Placed trees allocate from memory(dev) and may outlive the manager (file comment); drop one
  // only once no queued GPU work reads it: the pool hands freed memory out again at once.

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
    detail::check_usable(state_.caps, devices());
    return devicekit::replicate(tree, devices(), [this](device d) -> device_memory& { return placement_memory(d); });
  }
  /// `tree` split along `axis` over this manager's devices (see place/shard.hpp).
  template <class T>
  [[nodiscard]] auto shard(const T& tree, std::size_t axis = 0, uneven policy = uneven::error) {
    detail::check_usable(state_.caps, devices());
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
    detail::check_usable(state_.caps, devs);
    if constexpr (requires { Scheme::uneven; }) {
      return devicekit::shard(tree, devs, 0, Scheme::uneven, placement_selector());
    } else if constexpr (requires { Scheme::splits_batch; }) {
      // A custom scheme that declares row shares: placed as it plans them, rows in order.
      std::vector<std::size_t> counts = detail::row_share_counts(p, summary, scheme_.name());
      return devicekit::shard(tree, devs, 0, counts, placement_selector());
    } else {
      detail::check_whole_shares(whole, scheme_.name());
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
  /// The same for kernels on `consumer`, which must be a stream of the default device (of a
  /// default_device_scope, as above).
  template <class R>
  [[nodiscard]] auto prefetch(R&& source, std::size_t depth, stream_ref consumer) {
    const device dev = placement_default("prefetch");
    detail::check_stream(consumer, dev, "prefetch");
    return devicekit::prefetch(std::forward<R>(source), dev, depth, placement_memory(dev), consumer.native_handle());
  }

  /// The device report (report/report.hpp) of this manager; `costs` as the caller measured them.
  [[nodiscard]] device_report report(cost_table costs = {}) const {
    return detail::build_report(*this, state_.environment, state_.pools, std::move(costs),
                                [this](device d) { return budget_of(d, false); });
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
  /// How the budget of `d` is reached: total memory, headroom, the strategy's fraction; on a GPU
  /// capped to what `d` had available when first needed (this call, memory(d), memory_stats(d):
  /// manager/detail/budget.hpp), less the settings' collective_memory_size (config_error if more than the
  /// device has). `d` is one of devices() or cpu:0 (config_error otherwise).
  [[nodiscard]] memory_budget budget(device d) const { return budget_of(d, true, "budget"); }

  /// The allocator that serves this manager's GPUs (settings::set_allocator, DEVICEKIT_ALLOCATOR).
  [[nodiscard]] allocator_kind allocator() const noexcept { return state_.config.get_allocator(); }

  /// The configuration the pool of `d` gets: max_size = the budget, initial_size = the
  /// strategy's start (if any), then the strategy's own configure_pool (if it has one).
  [[nodiscard]] pool_config pool_config_for(device d) const {
    return detail::configure_manager_pool(strategy_, d, budget(d), allocator());
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
    (void)total_memory(d, "memory");  // validates d
    if (kind == memory_kind::host) d = device::cpu();
    check_usable(d);
    detail::check_device_exists(d, "memory");  // a detected device need not exist (fixed_detector)
    if (kind == memory_kind::pinned_host) detail::check_pinned(d, has_gpu(), fallback_reason());
    const memory_kind slot_kind = kind == memory_kind::pinned_host ? kind : memory_kind::device;
    return state_.pools.get(d, slot_kind, allocator(), [&] { return pool_config_for(d); });
  }
  /// The pool of the default device.
  [[nodiscard]] device_memory& memory() { return memory(state_.default_device); }

  /// Stats of the device-kind pools made so far (for the global manager: the process's pools of
  /// its devices and of the host).
  [[nodiscard]] std::vector<std::pair<device, pool_stats>> memory_stats() const {
    return state_.pools.device_stats(memory_devices());
  }

  /// The memory of `d` in jaxlib's terms (Device.memory_stats()), summed over the pools that hold
  /// memory of `d`, where they have been made. On a GPU: this manager's pool of `d` and the
  /// process's (what devicekit::place uses without a resource; it also lends the scratch of CUB
  /// batched copies and NCCL collectives, see scratch_memory_stats). For cpu:0: this manager's
  /// host pool and the process's (what devicekit::place(tree, cpu) uses), and every pinned pool
  /// (placements of kind pinned_host, this manager's and the process's, and the copy engine's
  /// staging, see staging_memory_stats): pinned memory is host memory, and pools of managers gone
  /// while something of them lives (file comment). bytes_limit is budget(d). Makes no pool.
  /// config_error for a device this manager does not have.
  [[nodiscard]] device_memory_stats memory_stats(device d) const {
    device_memory_stats out;
    (void)total_memory(d, "memory_stats");  // validates d
    out.bytes_limit = budget(d).budget_bytes;
    state_.pools.for_each_pool_of(d, [&](const device_memory& m) { add_pool_stats(out, m); });
    return add_device_clients(out, d);
  }

  /// The memory of `kind` for `d`: `device` as memory_stats(d) on a GPU (the host pools only, on
  /// cpu:0), `host` the host pools, `pinned_host` the pinned pools of `d` (of every device and
  /// staging for cpu:0). bytes_limit is the budget of the device whose memory it is.
  [[nodiscard]] device_memory_stats memory_stats(device d, memory_kind kind) const {
    device_memory_stats out;
    const bool host_memory = kind != memory_kind::device || d.is_cpu();
    if (d.is_cuda()) (void)total_memory(d, "memory_stats");  // validates d
    out.bytes_limit = budget(host_memory ? device::cpu() : d).budget_bytes;
    state_.pools.for_each_pool_of(d, kind, [&](const device_memory& m) { add_pool_stats(out, m); });
    return out;
  }

  /// The live allocations on `d` (jaxlib's live_buffers), from the same pools as
  /// memory_stats(d), by address; each with its source location when the pool tracks.
  [[nodiscard]] std::vector<allocation_record> live_buffers(device d) const {
    (void)total_memory(d, "live_buffers");
    std::vector<allocation_record> out;
    state_.pools.for_each_pool_of(d, [&](const device_memory& m) {
      auto live = m.live_allocations();
      out.insert(out.end(), live.begin(), live.end());
    });
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ptr < b.ptr; });
    return out;
  }

 private:
  std::uint64_t total_memory(device d, const char* op) const { return detail::total_memory_of(state_.caps, d, op); }
  /// budget(d); what `d` has available is measured only when `measure` (a report does not measure).
  [[nodiscard]] memory_budget budget_of(device d, bool measure, const char* op = "budget") const {
    return detail::manager_budget(budget_for(strategy_, d.kind(), total_memory(d, op)), d,
                                  state_.config.get_collective_memory_size(), state_.caps, state_.available, measure);
  }
  void check_usable(device d) const { detail::check_usable(state_.caps, d); }
  friend struct detail::global_manager_access;
  [[nodiscard]] std::vector<device> memory_devices() const { return detail::memory_devices_of(state_.caps); }
  [[nodiscard]] std::string device_names() const { return detail::device_names(state_.caps); }
  [[nodiscard]] auto placement_selector() {
    return [this](device d) -> device_memory& { return placement_memory(d); };
  }
  /// The pool placement on `d` allocates from (every cpu ordinal is the host).
  [[nodiscard]] device_memory& placement_memory(device d) { return memory(d.is_cpu() ? device::cpu() : d); }

  /// Where placement without a device goes (detail::placement_default_of).
  [[nodiscard]] device placement_default(const char* operation) const {
    return detail::placement_default_of(state_.caps, state_.default_device, operation);
  }

  void check_placement_device(device dev) const { detail::check_placement_device(state_.caps, dev); }

  detail::manager_state state_;
  [[no_unique_address]] Detector detector_;
  [[no_unique_address]] Strategy strategy_;
  [[no_unique_address]] Scheme scheme_;
};

}  // namespace devicekit
