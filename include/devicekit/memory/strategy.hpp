#pragma once
/// \file
/// Memory strategies: how much of each device's memory devicekit may use. A strategy is any type
/// with `name()` and `fraction()` (the concept `memory_strategy`); the fraction is of the
/// device's **total** memory, as in JAX/XLA and PyTorch.
///
///   conservative      0.60   small models, shared GPUs
///   balanced          0.75   the default
///   aggressive        0.90   large models, dedicated GPUs
///   custom_fraction<N, D>    N/D, checked at compile time to lie in (0, 1]
///   runtime_fraction         a fraction chosen at run time, validated (config_error)
///   fraction_range<...>, runtime_fraction_range
///                            XLA's start/cap form ("0.75-0.90"): preallocate the start, grow
///                            up to the cap
///
/// The **budget** of a device is its fraction of total memory less a headroom for the CUDA
/// context (memory/context_headroom.hpp: 512 MiB, at most an eighth of a small device; not
/// counted by the fraction, otherwise nvidia-smi shows more than the fraction and users rightly
/// complain). `memory_budget` carries the whole basis (total, headroom, fraction, budget) so that
/// reports can show how it was reached.
/// A strategy may add, all optional:
///   std::uint64_t headroom_bytes() const      the headroom (default: default_headroom_bytes)
///   double start_fraction() const             preallocate this fraction (the XLA start)
///   void configure_pool(pool_config&, const memory_budget&) const
///                                             adjust the per-device pool (memory/device_memory.hpp)
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/memory/context_headroom.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace devicekit {

template <class S>
concept memory_strategy = std::copy_constructible<S> && requires(const S& s) {
  { s.name() } -> std::convertible_to<std::string_view>;
  { s.fraction() } -> std::convertible_to<double>;
};

struct conservative {
  static constexpr std::string_view name() noexcept { return "conservative"; }
  static constexpr double fraction() noexcept { return 0.60; }
};

struct balanced {
  static constexpr std::string_view name() noexcept { return "balanced"; }
  static constexpr double fraction() noexcept { return 0.75; }
};

struct aggressive {
  static constexpr std::string_view name() noexcept { return "aggressive"; }
  static constexpr double fraction() noexcept { return 0.90; }
};

/// The fraction N/D, fixed at compile time.
template <std::intmax_t N, std::intmax_t D>
struct custom_fraction {
  static_assert(D > 0, "custom_fraction<N, D>: the denominator D must be positive");
  static_assert(N > 0 && N <= D, "custom_fraction<N, D>: the fraction N/D must lie in (0, 1]");
  static constexpr std::string_view name() noexcept { return "custom"; }
  static constexpr double fraction() noexcept { return static_cast<double>(N) / static_cast<double>(D); }
};

/// A fraction chosen at run time (from a config file, a flag). Throws config_error for a value
/// that is not in (0, 1]: zero, negative, above one, NaN or infinite.
class runtime_fraction {
 public:
  explicit runtime_fraction(double f) : fraction_(validate(f)) {}
  static constexpr std::string_view name() noexcept { return "custom"; }
  [[nodiscard]] double fraction() const noexcept { return fraction_; }

  static double validate(double f);

 private:
  double fraction_;
};

/// XLA's start/cap form, fixed at compile time: preallocate SN/SD of total memory, grow up to
/// CN/CD. Both lie in (0, 1] (the start may be 0: no preallocation) and start <= cap.
template <std::intmax_t SN, std::intmax_t SD, std::intmax_t CN, std::intmax_t CD>
struct fraction_range {
  static_assert(SD > 0 && CD > 0, "fraction_range<SN, SD, CN, CD>: the denominators must be positive");
  static_assert(CN > 0 && CN <= CD, "fraction_range<SN, SD, CN, CD>: the cap CN/CD must lie in (0, 1]");
  static_assert(SN >= 0 && SN * CD <= CN * SD, "fraction_range<SN, SD, CN, CD>: the start SN/SD must lie in [0, cap]");
  static constexpr std::string_view name() noexcept { return "custom"; }
  static constexpr double fraction() noexcept { return static_cast<double>(CN) / static_cast<double>(CD); }
  static constexpr double start_fraction() noexcept { return static_cast<double>(SN) / static_cast<double>(SD); }
};

/// The start/cap form chosen at run time; `parse` reads XLA's notation "0.75-0.90" (or a single
/// fraction "0.8": a cap with no preallocation). config_error for anything outside
/// 0 <= start <= cap <= 1, cap > 0.
class runtime_fraction_range {
 public:
  runtime_fraction_range(double start, double cap);
  [[nodiscard]] static runtime_fraction_range parse(std::string_view text);
  static constexpr std::string_view name() noexcept { return "custom"; }
  [[nodiscard]] double fraction() const noexcept { return cap_; }
  [[nodiscard]] double start_fraction() const noexcept { return start_; }

 private:
  double start_;
  double cap_;
};

/// Any strategy with a stated context headroom of `Bytes` instead of the default.
template <memory_strategy S, std::uint64_t Bytes>
struct with_headroom : S {
  static constexpr std::uint64_t headroom_bytes() noexcept { return Bytes; }
};

/// The default headroom for the CUDA context: on a GPU cuda_context_headroom_bytes (512 MiB, at
/// most an eighth of a small device; memory/context_headroom.hpp says why, and the simulated GPUs
/// charge the same); nothing on the host.
[[nodiscard]] constexpr std::uint64_t default_headroom_bytes(device_kind kind, std::uint64_t total_bytes) noexcept {
  if (kind == device_kind::cpu) return 0;
  return cuda_context_headroom_bytes(total_bytes);
}

/// How a device's budget was reached: the figures a report shows.
struct memory_budget {
  std::uint64_t total_bytes = 0;     ///< the device's total memory
  std::uint64_t headroom_bytes = 0;  ///< left for the CUDA context
  double fraction = 0.75;            ///< the strategy's fraction (the cap) of total
  double start_fraction = 0.0;       ///< preallocated fraction (0: none)
  std::uint64_t budget_bytes = 0;    ///< fraction x total - headroom (never below 0)
  std::uint64_t start_bytes = 0;     ///< start_fraction x total - headroom, at most the budget
  /// Kept out of the budget for collectives (settings::set_collective_memory_size): the budget
  /// above is already reduced by it.
  std::uint64_t collective_reserve_bytes = 0;
  /// What the device had available when the budget was measured (cap_to_available): unset where
  /// nothing was measured (host memory, a budget worked out from a total alone).
  std::optional<std::uint64_t> available_bytes;
  /// The budget was cut to available_bytes: fraction x total - headroom would have been more.
  bool capped_to_available = false;
};

/// `b` capped to `available_bytes`, what the device has available now: the budget (and the start,
/// which never exceeds it) become at most that, and `b` records the figure and whether the cap
/// applied. A budget must not promise memory that another process or another library already
/// holds. What "available" is on a GPU: device_available_bytes (memory/device_memory.hpp).
[[nodiscard]] DEVICEKIT_DECL memory_budget cap_to_available(memory_budget b, std::uint64_t available_bytes);

/// `b` less a reserve for collectives: the budget (and the start, which never exceeds it)
/// shrink by `reserve_bytes`. config_error when the reserve exceeds the device's total memory.
[[nodiscard]] DEVICEKIT_DECL memory_budget reserve_for_collectives(memory_budget b, std::uint64_t reserve_bytes,
                                                                   std::string_view device_name);

/// The budget for `total_bytes` of memory at `fraction` (validated), less `headroom_bytes`.
[[nodiscard]] DEVICEKIT_DECL memory_budget compute_budget(std::uint64_t total_bytes, double fraction,
                                                          std::uint64_t headroom_bytes, double start_fraction = 0.0);

namespace detail {
template <class S>
concept has_headroom = requires(const S& s) {
  { s.headroom_bytes() } -> std::convertible_to<std::uint64_t>;
};
template <class S>
concept has_start_fraction = requires(const S& s) {
  { s.start_fraction() } -> std::convertible_to<double>;
};
}  // namespace detail

/// The budget strategy `s` gives a device of kind `kind` with `total_bytes` of memory.
template <memory_strategy S>
[[nodiscard]] memory_budget budget_for(const S& s, device_kind kind, std::uint64_t total_bytes) {
  std::uint64_t headroom = default_headroom_bytes(kind, total_bytes);
  if constexpr (detail::has_headroom<S>) headroom = static_cast<std::uint64_t>(s.headroom_bytes());
  double start = 0.0;
  if constexpr (detail::has_start_fraction<S>) start = static_cast<double>(s.start_fraction());
  return compute_budget(total_bytes, static_cast<double>(s.fraction()), headroom, start);
}

/// A strategy as plain values, for reports and run-time choices.
struct strategy_info {
  std::string name;
  double fraction = 0.75;
  double start_fraction = 0.0;                  ///< preallocated fraction (start/cap form)
  std::optional<std::uint64_t> headroom_bytes;  ///< set when the strategy states its own
};

template <memory_strategy S>
[[nodiscard]] strategy_info describe_strategy(const S& s) {
  strategy_info info{std::string(s.name()), static_cast<double>(s.fraction()), 0.0, std::nullopt};
  if constexpr (detail::has_start_fraction<S>) info.start_fraction = static_cast<double>(s.start_fraction());
  if constexpr (detail::has_headroom<S>) info.headroom_bytes = static_cast<std::uint64_t>(s.headroom_bytes());
  return info;
}

/// A strategy_info as a run-time strategy (it satisfies memory_strategy): what a program uses
/// after choosing a strategy at run time, e.g. from strategy_for_model_size.
class dynamic_strategy {
 public:
  /// The balanced strategy (what the global manager starts with).
  dynamic_strategy() : dynamic_strategy(describe_strategy(balanced{})) {}
  explicit dynamic_strategy(strategy_info info) : info_(std::move(info)) {
    (void)runtime_fraction_range(info_.start_fraction, info_.fraction);  // validates both
  }
  [[nodiscard]] std::string_view name() const noexcept { return info_.name; }
  [[nodiscard]] double fraction() const noexcept { return info_.fraction; }
  [[nodiscard]] double start_fraction() const noexcept { return info_.start_fraction; }
  [[nodiscard]] const strategy_info& info() const noexcept { return info_; }

 private:
  strategy_info info_;
};

/// The budget of a strategy chosen at run time.
[[nodiscard]] inline memory_budget budget_for(const strategy_info& s, device_kind kind, std::uint64_t total_bytes) {
  return compute_budget(total_bytes, s.fraction, s.headroom_bytes.value_or(default_headroom_bytes(kind, total_bytes)),
                        s.start_fraction);
}

/// A run-time strategy describes itself as it was given (its headroom included).
[[nodiscard]] inline strategy_info describe_strategy(const dynamic_strategy& s) { return s.info(); }

/// The budget of a run-time strategy, its own headroom (strategy_info::headroom_bytes) included.
[[nodiscard]] inline memory_budget budget_for(const dynamic_strategy& s, device_kind kind, std::uint64_t total_bytes) {
  return budget_for(s.info(), kind, total_bytes);
}

/// A rule of thumb by model size: < 1M parameters conservative, < 100M balanced, otherwise
/// aggressive (a large model's weights and activations need most of the device; JAX's default
/// preallocation, XLA_PYTHON_CLIENT_MEM_FRACTION, is the balanced 0.75).
[[nodiscard]] inline strategy_info strategy_for_model_size(std::uint64_t parameters) {
  if (parameters < 1'000'000) return describe_strategy(conservative{});
  if (parameters < 100'000'000) return describe_strategy(balanced{});
  return describe_strategy(aggressive{});
}

/// What a manager is made from at run time: its settings and its memory strategy. A manager whose
/// strategy is `dynamic_strategy` (the global one, default_manager_type) is constructed or
/// re-initialised from it: `device_manager<D, dynamic_strategy> dm{cfg}`,
/// `default_manager(cfg, true)`.
struct manager_config {
  settings config = settings::from_environment();
  strategy_info strategy = describe_strategy(balanced{});
};

/// A generative-model setup: the balanced strategy, with mixed precision on where the hardware
/// has it (bf16 preferred over fp16: the same exponent range as fp32, so no loss scaling; see
/// PyTorch's torch.autocast and the bf16 notes of the NVIDIA Ampere whitepaper).
struct generative_preset {
  strategy_info strategy;
  bool mixed_precision = false;
  std::string_view compute_dtype = "fp32";  ///< "bf16", "fp16" or "fp32"
  /// The settings the manager gets (from the environment unless changed).
  settings config = settings::from_environment();

  /// The manager configuration: pass it to a `device_manager<D, dynamic_strategy>` or to
  /// `default_manager(preset.manager(), true)`.
  [[nodiscard]] manager_config manager() const { return {config, strategy}; }
};

/// The generative-model preset for hardware that supports fp16 / bf16 as given: bf16 where
/// supported, else fp16, else fp32.
[[nodiscard]] inline generative_preset generative_model_preset(bool fp16, bool bf16) {
  generative_preset p{describe_strategy(balanced{}), fp16 || bf16, bf16 ? "bf16" : (fp16 ? "fp16" : "fp32")};
  return p;
}

/// The generative-model preset for what a detector found (`capabilities`, detect/capabilities.hpp).
/// A template, so that the memory layer does not include detection for this one function: every
/// translation unit that places a tree includes this header.
template <class Capabilities>
requires requires(const Capabilities& caps) {
  { caps.precision.fp16 } -> std::convertible_to<bool>;
  { caps.precision.bf16 } -> std::convertible_to<bool>;
}
[[nodiscard]] generative_preset generative_model_preset(const Capabilities& caps) {
  return generative_model_preset(static_cast<bool>(caps.precision.fp16), static_cast<bool>(caps.precision.bf16));
}

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/strategy.ipp>
#endif
