#pragma once
/// \file
/// `device_manager<Detector, Strategy, Scheme>`: detects devices once, at construction, and
/// answers questions about them. Policies are checked where they are used, with one line that
/// says what is missing. Stock policies are empty and stored with [[no_unique_address]], so a
/// manager is exactly as large as its runtime state (`detail::manager_state`).
///
/// Also here: the global `default_manager()` and the free functions `has_gpu()`,
/// `default_device()` and `print_device_info()`.
#include <devicekit/detect/detectors.hpp>
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/distribute/summary.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/prefetch.hpp>
#include <devicekit/place/shard.hpp>
#include <devicekit/report/report.hpp>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <vector>

namespace devicekit {

namespace detail {
/// What a manager holds at run time; everything else is in its (usually empty) policies.
struct manager_state {
  settings config;
  capabilities caps;
  device default_device;
  std::vector<std::string> environment_applied;
};
}  // namespace detail

template <class Detector = first_available<cuda_detector, cpu_detector>, class Strategy = balanced,
          class Scheme = schemes::single_device>
class device_manager {
  static_assert(device_detector<Detector>,
                "device_manager: Detector must provide 'capabilities detect(const settings&) const' or 'capabilities detect() const'");
  static_assert(memory_strategy<Strategy>,
                "device_manager: Strategy must provide 'name()' and 'double fraction()' (see devicekit/memory/strategy.hpp)");
  static_assert(distribution_scheme<Scheme>,
                "device_manager: Scheme must provide 'name()' and 'distribution_plan plan(const tree_summary&, std::span<const device>) const' (see devicekit/distribute/scheme.hpp)");

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
  }

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
    throw config_error("device " + d.str() + " is not one of this manager's devices (" + device_list() + ")");
  }

  // --- placement (place/): trees onto this manager's devices -----------------------------------

  /// `tree` on the default device (or on `dev`), finished on return.
  template <class T>
  [[nodiscard]] auto place(const T& tree) const {
    return devicekit::place(tree, state_.default_device, placement_resource(state_.default_device));
  }
  template <class T>
  [[nodiscard]] auto place(const T& tree, device dev) const {
    check_placement_device(dev);
    return devicekit::place(tree, dev, placement_resource(dev));
  }
  /// `tree` on the default device, queued on `s` (a stream of that device).
  template <class T>
  [[nodiscard]] auto place(const T& tree, const stream& s) const {
    check_placement_device(s.get_device());
    return devicekit::place(tree, s.get_device(), s, placement_resource(s.get_device()));
  }
  /// A copy of `tree` on every device of this manager.
  template <class T>
  [[nodiscard]] auto replicate(const T& tree) const {
    return devicekit::replicate(tree, devices(), resource_selector());
  }
  /// `tree` split along `axis` over this manager's devices (see place/shard.hpp).
  template <class T>
  [[nodiscard]] auto shard(const T& tree, std::size_t axis = 0, uneven policy = uneven::error) const {
    return devicekit::shard(tree, devices(), axis, policy, resource_selector());
  }
  /// `tree` spread over this manager's devices as its scheme plans it (dm.plan): one placed
  /// tree per share, in plan order, as `per_device` (single_device: one; replicate: one per
  /// device) or, for schemes that split the batch, as `sharded` (shard_batch: one shard per
  /// device, its uneven policy applied). A custom scheme's plan is checked (validate_plan); its
  /// row shares must be the ragged split of the batch over its devices, which is what
  /// place/shard can make (config_error otherwise).
  template <class T>
  [[nodiscard]] auto distribute(const T& tree) const {
    const tree_summary summary = summarize_tree(tree);
    const distribution_plan p = plan(summary);
    std::vector<device> devs;
    bool whole = true;
    for (const auto& s : p.shares) {
      devs.push_back(s.dev);
      whole = whole && s.whole;
    }
    if constexpr (requires { Scheme::uneven; }) {
      return devicekit::shard(tree, devs, 0, to_place_policy(Scheme::uneven), resource_selector());
    } else if constexpr (requires { Scheme::splits_batch; }) {
      // A custom scheme that declares row shares: only the split place/shard makes is possible.
      if (whole || schemes::shard_batch::plan(summary, devs) != p) {
        throw config_error("distribute: scheme '" + std::string(scheme_.name()) +
                           "' declares splits_batch, but its plan is not the ragged split of the batch over its "
                           "devices, the only split place/shard makes");
      }
      return devicekit::shard(tree, devs, 0, uneven::ragged, resource_selector());
    } else {
      if (!whole) {
        throw config_error("distribute: scheme '" + std::string(scheme_.name()) +
                           "' gives row shares; declare 'static constexpr bool splits_batch = true' in it to shard");
      }
      return devicekit::replicate(tree, devs, resource_selector());
    }
  }

  /// Trees of `source` placed on the default device up to `depth` ahead (see place/prefetch.hpp).
  template <class R>
  [[nodiscard]] auto prefetch(R&& source, std::size_t depth = 2) const {
    return devicekit::prefetch(std::forward<R>(source), state_.default_device, depth,
                               placement_resource(state_.default_device));
  }

  [[nodiscard]] device_report report(cost_table costs = {}) const {
    device_assignment assignment;
    try {
      assignment = plan(tree_summary{}).assignment();
    } catch (const error&) {
      // A custom scheme that cannot plan an empty tree: the report shows no assignment.
    }
    return {state_.caps,       describe_strategy(strategy_), std::string(scheme_.name()), std::move(assignment),
            state_.default_device, state_.environment_applied, std::move(costs)};
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

 private:
  [[nodiscard]] std::string device_list() const {
    std::string s;
    for (const auto& p : state_.caps.devices) s += (s.empty() ? "" : ", ") + p.id.str();
    return s.empty() ? "none" : s;
  }

  static constexpr uneven to_place_policy(schemes::uneven_batch u) noexcept {
    switch (u) {
      case schemes::uneven_batch::error: return uneven::error;
      case schemes::uneven_batch::pad: return uneven::pad;
      default: return uneven::ragged;
    }
  }

  // Placement allocates from placement's own resources until the memory layer's pool is merged.
  [[nodiscard]] static auto& placement_resource(device dev) { return default_placement_resource(dev); }
  [[nodiscard]] static auto resource_selector() { return detail::default_resource_selector{}; }

  void check_placement_device(device dev) const {
    if (dev.is_cpu()) return;
    for (const auto& p : state_.caps.devices) {
      if (p.id == dev) return;
    }
    throw device_mismatch("cannot place on " + dev.str() + ": it is not one of this manager's devices (" + device_list() +
                          ")");
  }

  /// Makes a detector's answer self-consistent: a custom detector may give only counts.
  static void normalize(devicekit::capabilities& caps, const settings& config) {
    if (!caps.usable()) {
      throw config_error("no detector found a usable device: " +
                         (caps.fallback_reason.empty() ? std::string("no reason given") : caps.fallback_reason) +
                         "; add cpu_detector to the detector list for a CPU fallback");
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
    caps.gpu_count = static_cast<int>(
        std::count_if(caps.devices.begin(), caps.devices.end(), [](const auto& p) { return p.id.is_cuda(); }));
    if (caps.host.logical_cores == 0 || caps.host.total_memory_bytes == 0) caps.host = query_host();
    if (caps.gpu_count == 0 && config.get_prefer() == device_preference::cuda) {
      caps.fallback_reason = "CUDA was requested (device preference 'cuda') but is unavailable: " +
                             (caps.fallback_reason.empty() ? std::string("no GPU found") : caps.fallback_reason);
    }
  }

  static device choose_default(const devicekit::capabilities& caps, const settings& config) {
    if (!config.has_device()) return caps.devices.front().id;
    const device wanted = config.get_device();
    if (wanted == device::cpu(0)) return wanted;
    for (const auto& p : caps.devices) {
      if (p.id == wanted) return wanted;
    }
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

/// The type of the global manager: CUDA if there is a GPU, else the CPU; balanced memory.
using default_manager_type = device_manager<>;

namespace detail {
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
  if (g.instance == nullptr) g.instance = new default_manager_type();
  return *g.instance;
}

/// The process-wide manager under `config`. With `force_reinit` an existing manager is
/// re-detected under the new settings in place (references to it stay valid); without it, an
/// existing manager is returned unchanged. Re-initialising while other threads use the manager
/// is a data race: do it at start-up.
inline default_manager_type& default_manager(settings config, bool force_reinit) {
  auto& g = detail::global();
  std::lock_guard lock(g.mutex);
  if (g.instance == nullptr) {
    g.instance = new default_manager_type(std::move(config));
  } else if (force_reinit) {
    *g.instance = default_manager_type(std::move(config));
  }
  return *g.instance;
}

[[nodiscard]] inline bool has_gpu() { return default_manager().has_gpu(); }
[[nodiscard]] inline device default_device() { return default_manager().default_device(); }

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
