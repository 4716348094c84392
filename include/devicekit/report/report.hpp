#pragma once
/// \file
/// The device report: what was detected and how the manager is configured, as one value
/// (`device_report`) and as text (`write_text`, the output of print_device_info). The JSON form
/// is in <devicekit/report/json.hpp>.
#include <devicekit/detect/batch_size.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/distribute/assignment.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/report/engines.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace devicekit {

/// How devices were chosen: the detector chain, the run-time platform list, the device
/// preference and how the default device was picked (the "routing mode" in force).
struct routing_info {
  std::string detector = "custom";     ///< describe_detector<D>(): "first_available<cuda, cpu>"
  std::vector<std::string> platforms;  ///< the run-time platform list; empty: detector order only
  std::string platforms_source;        ///< "DEVICEKIT_PLATFORMS", "settings" or "" (none)
  std::string preference = "auto";     ///< DEVICEKIT_PREFER / settings::set_prefer
  std::string default_device_choice = "the first device found";  ///< or "requested (DEVICEKIT_DEVICE or settings)"

  /// One line: "platform list cpu,cuda (DEVICEKIT_PLATFORMS) over first_available<cuda, cpu>".
  [[nodiscard]] std::string mode() const;
};

/// Advice derived from the detected hardware: the batch size of its table row, the memory
/// strategy and the compute precision of the generative-model preset.
struct recommendations {
  hardware_type hardware = hardware_type::unknown;  ///< what the batch size is for (batch_hardware)
  batch_size_recommendation batch;
  int batch_multiplier = 1;
  std::string memory_strategy;     ///< generative_model_preset(caps).strategy.name
  std::string precision = "fp32";  ///< "bf16", "fp16" or "fp32"
  bool mixed_precision = false;
};

/// The recommendations for what `caps` describes.
[[nodiscard]] DEVICEKIT_DECL recommendations recommend_for(const capabilities& caps);

/// One device's memory in a report: how its budget is reached, its pool's stats once the pool
/// exists, and the scratch devicekit's own operations (CUB batched copies, NCCL collectives)
/// took from the device's memory (devicekit::scratch_memory_stats).
struct device_memory_info {
  device id;
  memory_budget budget;
  std::optional<pool_stats> pool;
  std::size_t scratch_in_use_bytes = 0;
  std::size_t scratch_peak_bytes = 0;
  std::uint64_t scratch_allocations = 0;
  /// The pool's allocations by client (device_memory::client_stats): "devicekit", then the libraries
  /// that allocate through it ("rmm"); empty until the pool exists.
  std::vector<client_memory_stats> clients;
};

/// One device's clock rates in a report, read when the report was built (query_clock_rates).
struct device_clock_info {
  device id;
  clock_rates clocks;
};

struct device_report {
  capabilities caps;
  strategy_info strategy;
  std::string scheme = "single_device";
  device_assignment assignment;  ///< the scheme's devices, replica x computation
  device default_device;
  std::vector<std::string> environment_applied;
  /// Set by the settings after the CUDA runtime had started with another value (it keeps that).
  std::vector<std::string> environment_too_late;
  cost_table costs;
  std::vector<device_memory_info> memory;  ///< per device (and cpu:0 when its pool exists)
  /// Per usable cuda device present in this process; detection does not read clocks, the report
  /// does.
  std::vector<device_clock_info> clocks;
  /// The copy engine's pinned staging pool (devicekit::staging_memory_stats); none until a
  /// transfer needed staging.
  std::optional<pool_stats> staging;
  routing_info routing;
  std::vector<engine_info> engines = query_engines();

  [[nodiscard]] const device_memory_info* memory_of(device d) const;
  [[nodiscard]] const clock_rates* clocks_of(device d) const;

  [[nodiscard]] std::string backend() const { return std::string(to_string(caps.device_type)); }
  [[nodiscard]] hardware_type default_hardware() const;
  /// The platforms present, each once, in device order ("cuda", "cpu"), as jaxlib's placement
  /// info lists them.
  [[nodiscard]] std::vector<std::string> platforms() const;
  /// The device kinds present (the names the driver reports, "NVIDIA H100 80GB HBM3"), each once.
  [[nodiscard]] std::vector<std::string> device_kinds() const;
};

namespace detail {
[[nodiscard]] DEVICEKIT_DECL std::string format_bytes(std::uint64_t bytes);

[[nodiscard]] DEVICEKIT_DECL std::string format_fixed(double v, int digits);

[[nodiscard]] DEVICEKIT_DECL std::string memory_line(const device_memory_info& m);

[[nodiscard]] DEVICEKIT_DECL std::string staging_line(const pool_stats& p);
}  // namespace detail

/// Writes the report as text. `verbose` adds every property of each GPU; the cpu device has none
/// beyond the Host line, which is always written.
DEVICEKIT_DECL void write_text(std::ostream& os, const device_report& r, bool verbose = false);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/report/report.ipp>
#endif
