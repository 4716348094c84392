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
#include <devicekit/core/error.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
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
  static constexpr double fraction() noexcept {
    return static_cast<double>(N) / static_cast<double>(D);
  }
};

/// A fraction chosen at run time (from a config file, a flag). Throws config_error for a value
/// that is not in (0, 1]: zero, negative, above one, NaN or infinite.
class runtime_fraction {
 public:
  explicit runtime_fraction(double f) : fraction_(validate(f)) {}
  static constexpr std::string_view name() noexcept { return "custom"; }
  [[nodiscard]] double fraction() const noexcept { return fraction_; }

  static double validate(double f) {
    if (!std::isfinite(f) || f <= 0.0 || f > 1.0) {
      throw config_error("memory fraction " + std::to_string(f) +
                         " is invalid: it must lie in (0, 1], e.g. 0.75 for 75% of total device memory");
    }
    return f;
  }

 private:
  double fraction_;
};

/// A strategy as plain values, for reports and run-time choices.
struct strategy_info {
  std::string name;
  double fraction = 0.75;
};

template <memory_strategy S>
[[nodiscard]] strategy_info describe_strategy(const S& s) {
  return {std::string(s.name()), static_cast<double>(s.fraction())};
}

/// Artifex's model-size guideline: < 1M parameters conservative, < 100M balanced, otherwise
/// aggressive.
[[nodiscard]] inline strategy_info strategy_for_model_size(std::uint64_t parameters) {
  if (parameters < 1'000'000) return describe_strategy(conservative{});
  if (parameters < 100'000'000) return describe_strategy(balanced{});
  return describe_strategy(aggressive{});
}

}  // namespace devicekit
