#pragma once
/// \file
/// Hardware classification and the tables that hang off it: batch-size recommendations (a table
/// per hardware type: minimum, optimal and critical batch per device), batch multipliers (GPU 4x,
/// CPU 1x, TPU 128x, rounded to a power of two: the Cloud TPU performance guide asks for batches
/// that are multiples of 128 per core, a GPU saturates at a few times a CPU's batch) and the cost
/// per device-hour (rough list-price estimates, a table the user can override). TPU rows are kept
/// as data: devicekit has no TPU backend.
#include <devicekit/core/device.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace devicekit {

enum class hardware_type { tpu_v5e, tpu_v5p, tpu_v4, h200, h100, a100, v100, l40s, rtx, cpu, unknown };

[[nodiscard]] constexpr std::string_view to_string(hardware_type h) noexcept {
  constexpr std::array<std::string_view, 11> names{"tpu_v5e", "tpu_v5p", "tpu_v4", "h200", "h100",   "a100",
                                                   "v100",    "l40s",    "rtx",    "cpu",  "unknown"};
  return names[static_cast<std::size_t>(h)];
}

[[nodiscard]] constexpr bool is_tpu(hardware_type h) noexcept {
  return h == hardware_type::tpu_v5e || h == hardware_type::tpu_v5p || h == hardware_type::tpu_v4;
}

/// The configurable part of the hardware table: the TPU batch factor and whether TPU rows may be
/// used at all (a TPU is data here: devicekit never runs on one). From the environment:
/// DEVICEKIT_TPU_BATCH_FACTOR (a positive integer; default 128) and DEVICEKIT_ALLOW_TPU (1 or 0,
/// true or false; default 1).
struct hardware_table_config {
  int tpu_batch_factor = 128;  ///< the Cloud TPU performance guide's multiple of 128 per core
  bool allow_tpu = true;       ///< false: asking for a TPU row is a config_error
  /// config_error naming the variable for a value that does not parse.
  [[nodiscard]] DEVICEKIT_DECL static hardware_table_config from_environment();
};

/// Classifies a device by the name the driver reports ("NVIDIA H100 80GB HBM3" -> h100).
/// Order matters: "H200" is checked before "H100" would never match it anyway, but "L40S" must
/// win over the "L40" of other cards, and names are compared case-insensitively.
[[nodiscard]] DEVICEKIT_DECL hardware_type classify_hardware(std::string_view device_name,
                                                             device_kind kind = device_kind::cuda);

/// Batch-size guidance for one kind of hardware.
struct batch_size_recommendation {
  int min_batch_size = 1;                    ///< below this the device is badly underused
  int optimal_batch_size = 32;               ///< peak throughput
  int critical_batch_size = 16;              ///< where the roofline is reached (JAX scaling guide)
  std::optional<int> max_memory_batch_size;  ///< estimate of the largest batch that fits
  std::string_view notes;
  /// False when the row is a stand-in for hardware the source table does not list.
  bool from_table = true;
  hardware_type hardware = hardware_type::unknown;  ///< the row's hardware
};

/// The recommendation table. Rows for TPU v5e/v5p/v4, H100, A100, V100 and CPU are the source's
/// exact values. H200 (same Hopper SM as H100) uses the H100 row; L40S, RTX and unknown GPUs,
/// which the source does not list, use the V100 row as a conservative stand-in (`from_table`
/// is false for these).
[[nodiscard]] DEVICEKIT_DECL batch_size_recommendation batch_size_recommendation_for(hardware_type h);
/// The same, refusing a TPU row (config_error) when `c.allow_tpu` is false.
[[nodiscard]] DEVICEKIT_DECL batch_size_recommendation batch_size_recommendation_for(hardware_type h,
                                                                                     const hardware_table_config& c);

/// The answer of validate_batch_size: whether the size is acceptable, and why (or why not).
struct batch_validation {
  bool valid = false;
  std::string message;
};

/// Checks a batch size against a recommendation: invalid when not positive, below the minimum,
/// or above the memory estimate (`max_memory_batch_size`, which recommend_batch_size(caps,
/// budget, per_sample, fixed) fills in); valid but warned (when `warn_suboptimal`) below the
/// critical batch size, where the device cannot reach its roofline.
[[nodiscard]] DEVICEKIT_DECL batch_validation validate_batch_size(int batch_size, const batch_size_recommendation& rec,
                                                                  bool warn_suboptimal = true);
/// The same against the table row of `h`, which has no memory estimate.
[[nodiscard]] DEVICEKIT_DECL batch_validation validate_batch_size(int batch_size, hardware_type h,
                                                                  bool warn_suboptimal = true);

/// Rounds to the nearest power of two (ties go up); values below 1 become 1.
[[nodiscard]] constexpr std::int64_t round_to_power_of_two(std::int64_t v) noexcept {
  if (v <= 1) return 1;
  std::int64_t lower = 1;
  while (lower * 2 <= v) lower *= 2;
  const std::int64_t upper = lower * 2;
  return (v - lower < upper - v) ? lower : upper;
}

/// The batch multiplier: how many times a base batch a device kind should take (see the top).
[[nodiscard]] constexpr int batch_multiplier(hardware_type h, const hardware_table_config& c = {}) noexcept {
  if (is_tpu(h)) return c.tpu_batch_factor;
  if (h == hardware_type::cpu) return 1;
  return 4;
}

struct batch_config {
  std::int64_t batch_size = 1;      ///< base x multiplier, rounded to a power of two
  std::int64_t max_batch_size = 1;  ///< the larger of batch_size and the table's optimal size
  int multiplier = 1;
};

/// The batch for `h` from a base batch: base x multiplier, rounded to a power of two. config_error
/// for a TPU when `c.allow_tpu` is false.
[[nodiscard]] DEVICEKIT_DECL batch_config batch_config_for(hardware_type h, std::int64_t base_batch_size = 1,
                                                           const hardware_table_config& c = {});

/// Cost per device-hour in US dollars. Defaults are rough estimates (CPU $0, GPU $0.50,
/// TPU $2.00); `set` overrides one hardware type, for example with your cloud's price list.
class cost_table {
 public:
  cost_table& set(hardware_type h, double usd_per_hour) {
    overrides_[h] = usd_per_hour;
    return *this;
  }
  [[nodiscard]] double per_hour(hardware_type h) const;

 private:
  std::map<hardware_type, double> overrides_;
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/detect/hardware.ipp>
#endif
