#pragma once
/// \file
/// A manager's budget of a device: its strategy's share of total memory less the context headroom
/// (memory/strategy.hpp), on a GPU capped to what the device has available
/// (device_available_bytes, memory/pool.hpp), then less the reserve for collectives.
///
/// The cap is measured once per device, the first time the manager needs that device's budget
/// (budget(d), memory(d), memory_stats(d)), and kept: a pool made from a budget must not see it
/// change. Not when the manager is made: reading a GPU's free memory creates its CUDA context
/// (hundreds of MiB, see memory/context_headroom.hpp), which a manager must not do to devices the
/// program never uses. A report does not measure either; it shows the cap once it has been measured.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/memory/strategy.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// What each GPU of a manager had available when the manager first needed its budget.
class available_memory {
 public:
  /// The figure for `d`, measured now unless it has been: nullopt for the host, for a device the
  /// CUDA runtime of this process does not list under the same ordinal and UUID (a described
  /// device, fixed_detector), and where the runtime cannot answer. Thread-safe.
  [[nodiscard]] DEVICEKIT_DECL std::optional<std::uint64_t> measure(const capabilities& caps, device d) const;

  /// The figure for `d` if it has been measured; never measures.
  [[nodiscard]] DEVICEKIT_DECL std::optional<std::uint64_t> known(device d) const;

 private:
  /// Behind a pointer so that the manager stays movable (the mutex is not).
  struct state {
    std::mutex mutex;
    std::vector<std::pair<device, std::optional<std::uint64_t>>> measured;
  };
  std::unique_ptr<state> state_ = std::make_unique<state>();
};

/// Whether `d` is a device of `caps` that the CUDA runtime of this process lists as the same GPU
/// (ordinal and UUID): only then does the runtime's free memory say anything about `d`.
[[nodiscard]] DEVICEKIT_DECL bool listed_by_runtime(const capabilities& caps, device d);

/// The budget a manager gives `d` from its strategy's budget `b`: on a GPU capped to what `d` has
/// available (measured now when `measure`, else only if it has been), then less
/// `collective_reserve` (config_error when the reserve exceeds the device's memory).
[[nodiscard]] DEVICEKIT_DECL memory_budget manager_budget(memory_budget b, device d, std::uint64_t collective_reserve,
                                                          const capabilities& caps, const available_memory& available,
                                                          bool measure);

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/manager/detail/budget.ipp>
#endif
