#pragma once
/// \file
/// `capabilities`: what a detector found: device type and count, memory, compute capability,
/// CUDA and driver versions, mixed precision, distributed support, plus what a C++ user needs to act on it: the per-device
/// properties, the host, and why the program fell back to the CPU when it did.
#include <devicekit/detect/host.hpp>
#include <devicekit/detect/properties.hpp>

#include <optional>
#include <string>
#include <vector>

namespace devicekit {

/// Formats a CUDA version number (13000 -> "13.0", 12040 -> "12.4"); 0 means none.
[[nodiscard]] inline std::string format_cuda_version(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

struct capabilities {
  device_kind device_type = device_kind::cpu;
  int device_count = 0;  ///< usable devices of device_type
  int gpu_count = 0;     ///< CUDA devices the runtime can use (0 when the CPU was chosen, and for
                         ///< GPUs that only NVML sees: see device_properties::unusable_reason)
  /// Sum of the memory of the listed devices (host memory for the cpu device).
  std::uint64_t total_memory_bytes = 0;
  /// The lowest compute capability among the GPUs (what every device can run); none on CPU.
  std::optional<compute_capability> cc;
  int cuda_runtime_version = 0;  ///< e.g. 13000; 0 without CUDA
  int driver_version = 0;        ///< e.g. 13000; 0 without a driver
  precision_support precision;
  bool supports_distributed = false;  ///< more than one device to spread work over
  /// Empty when a GPU is used; otherwise why not ("no NVIDIA driver: ...").
  std::string fallback_reason;
  std::string detector;  ///< which detector produced this
  std::vector<device_properties> devices;
  host_info host;

  [[nodiscard]] std::uint64_t total_memory_mb() const noexcept { return total_memory_bytes >> 20; }
  [[nodiscard]] bool supports_mixed_precision() const noexcept {
    return precision.fp16 || precision.bf16 || precision.fp8;
  }
  [[nodiscard]] bool usable() const noexcept { return device_count > 0; }
};

}  // namespace devicekit
