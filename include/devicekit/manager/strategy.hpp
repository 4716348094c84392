#pragma once
/// \file
/// How a manager's memory strategy shapes its pools: `configure_manager_pool` turns a device's
/// budget into the pool's configuration and lets the strategy adjust it (`configure_pool`, when
/// it has one); `tracked<S>` is the stock strategy adaptor that turns allocation tracking on.
/// Apart from the façade because it is the one place where a strategy meets a pool
/// configuration, and user strategies hook in here.
#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/memory/strategy.hpp>

#include <cstddef>

namespace devicekit {

namespace detail {
/// A strategy that adjusts its pools' configuration (beyond the budget every strategy sets).
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

namespace detail {
/// The configuration the pool of `d` gets under budget `b`: max_size = the budget,
/// initial_size = the strategy's start (if any), then the strategy's own configure_pool (if it
/// has one), whose initial_size is cut to the budget when it is more and max_size is still the
/// budget.
template <class Strategy>
[[nodiscard]] pool_config configure_manager_pool(const Strategy& strategy, device d, const memory_budget& b,
                                                 allocator_kind a) {
  pool_config c;
  c.budget = b;
  c.max_size = static_cast<std::size_t>(b.budget_bytes);
  c.initial_size = static_cast<std::size_t>(b.start_bytes);
  // async / platform: every allocation goes to the driver, as jaxlib's cuda_async and platform
  // allocators bypass its BFC pool; the budget still caps what is live.
  c.release_on_free = d.is_cuda() && a != allocator_kind::pool;
  if constexpr (configures_pool<Strategy>) strategy.configure_pool(c, b);
  // A start the strategy set above this device's budget (which depends on the device and on what
  // it had available) is cut to the budget, as a start fraction is (compute_budget): a strategy
  // written for large devices still runs on a small one. A max_size the strategy set itself is
  // taken as given, and a start above it is the pool's config_error.
  if (c.max_size && *c.max_size == b.budget_bytes && c.initial_size > *c.max_size) c.initial_size = *c.max_size;
  return c;
}
}  // namespace detail

}  // namespace devicekit
