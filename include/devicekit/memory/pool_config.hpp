#pragma once
/// \file
/// `pool_config`: how a caching pool (memory/device_memory.hpp) grows, caches and reports, with
/// the validation every pool runs on it when it is made. The fields follow what other pools
/// expose: XLA's BFC allocator (a preallocated start, growth), PyTorch's caching allocator
/// (a size limit for the small-block pools, the out-of-memory observer) and RMM's
/// pool_memory_resource (initial and maximum pool size).
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace devicekit {

/// Whether a pool records where each allocation came from.
enum class tracking_mode {
  environment,  ///< on when DEVICEKIT_MEMORY_DEBUG is 1/on/true/yes (the default)
  off,
  on,
};

/// A pool's configuration.
struct pool_config {
  /// Preallocated as one chunk when the pool is made, and kept by trim() (the XLA "start"). More
  /// than max_size is a config_error; without max_size, a start above the budget the pool works
  /// out for its device is cut to that budget. A start the upstream refuses is out_of_memory.
  std::size_t initial_size = 0;
  /// Each growth asks for at least (growth_factor - 1) x reserved bytes: 2.0 doubles the pool,
  /// 1.0 grows by what the request needs (rounded to min_chunk_size). Fewer, larger chunks mean
  /// fewer upstream calls; smaller growth keeps reserved close to what is used.
  double growth_factor = 1.0;
  /// The most the pool may reserve. Unset: the balanced strategy's budget for the device, capped to
  /// what the device has available when the pool is made (device_available_bytes).
  std::optional<std::size_t> max_size;
  /// defragment() releases empty chunks only when fragmentation (1 - largest free / free) exceeds
  /// this (or it is forced); release_cached() releases them whatever the fragmentation.
  double defrag_threshold = 0.5;
  std::size_t min_chunk_size = 2u << 20;
  std::size_t max_chunk_size = 1u << 30;
  /// Requests up to this size use size classes; 0 disables them. At most 1 MiB.
  std::size_t small_size_limit = 16u << 10;
  tracking_mode tracking = tracking_mode::environment;
  /// No caching: every allocation is an upstream allocation of its own (rounded to 256 bytes, no
  /// size classes, no growth beyond the request) and goes back upstream when freed (a
  /// stream-ordered free once its stream's event has completed, at the next call that looks).
  /// The budget and the stats still apply. What the manager's `async` and `platform` allocator
  /// kinds use, as jaxlib's cuda_async / platform allocators bypass its BFC pool.
  bool release_on_free = false;
  /// Called (without the pool's lock) before out_of_memory is thrown; return true to retry once.
  std::function<bool(std::size_t bytes, const pool_stats&)> on_out_of_memory;
  /// Receives the leak report when a tracking pool is destroyed with live allocations
  /// (default: standard error).
  std::function<void(const std::string&)> on_leak;
  /// How the budget was reached, for reports and out_of_memory messages (the manager sets it).
  std::optional<memory_budget> budget;
};

namespace detail {
/// Reads DEVICEKIT_MEMORY_DEBUG.
[[nodiscard]] DEVICEKIT_DECL bool memory_debug_from_environment();

/// Checks `config` (config_error naming the field otherwise; initial_size and max_size are checked
/// together) and returns it as the pool keeps it: with release_on_free, growth is by the request
/// and nothing is preallocated.
[[nodiscard]] DEVICEKIT_DECL pool_config validated(pool_config config);

/// The budget of a pool made with `config` on a device of `kind` with `total_bytes` of memory:
/// the manager's (config.budget); else max_size when set; else the balanced strategy's, capped to
/// `available_bytes` where it was measured (cap_to_available).
[[nodiscard]] DEVICEKIT_DECL memory_budget budget_of(const pool_config& config, device_kind kind,
                                                     std::size_t total_bytes,
                                                     std::optional<std::uint64_t> available_bytes = std::nullopt);

/// How `b` was reached, for out_of_memory messages ("0.75 of 80.00 GiB total, less ...").
[[nodiscard]] DEVICEKIT_DECL std::string budget_text(const memory_budget& b);

/// Whether a pool made with `config` tracks allocation sites.
[[nodiscard]] inline bool tracking_enabled(const pool_config& config) {
  return config.tracking == tracking_mode::on ||
         (config.tracking == tracking_mode::environment && memory_debug_from_environment());
}
}  // namespace detail

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/pool_config.ipp>
#endif
