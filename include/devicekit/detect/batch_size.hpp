#pragma once
/// \file
/// Batch sizes for the hardware at hand: `recommend_batch_size` (the table row of the detected
/// hardware, or of the hardware given) and `max_memory_batch_size` (the largest batch whose
/// samples fit a memory budget).
#include <devicekit/core/error.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace devicekit {

/// The largest batch whose samples fit `budget_bytes`:
///     floor((budget_bytes - fixed_bytes) / per_sample_bytes)
/// where `per_sample_bytes` is what one sample costs on the device (inputs, activations and
/// their gradients: everything that scales with the batch) and `fixed_bytes` what does not
/// (weights, optimizer state, workspace). A budget at or below `fixed_bytes` gives 0: not even
/// one sample fits. The division cannot overflow, and the result saturates at INT64_MAX.
/// config_error for `per_sample_bytes == 0` (every batch would fit: the question has no answer).
[[nodiscard]] inline std::int64_t max_memory_batch_size(std::uint64_t budget_bytes, std::uint64_t per_sample_bytes,
                                                        std::uint64_t fixed_bytes = 0) {
  if (per_sample_bytes == 0) {
    throw config_error(
        "max_memory_batch_size: per_sample_bytes is 0, so any batch would fit; pass the device bytes one sample "
        "needs (inputs, activations and their gradients)");
  }
  if (budget_bytes <= fixed_bytes) return 0;
  const std::uint64_t samples = (budget_bytes - fixed_bytes) / per_sample_bytes;
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(std::min(samples, max));
}

/// The recommendation row for `h`.
[[nodiscard]] inline batch_size_recommendation recommend_batch_size(hardware_type h) {
  return batch_size_recommendation_for(h);
}

/// The hardware a batch-size recommendation for `caps` is for: with several GPUs the one with
/// the least memory, since in data-parallel training every device takes the same share and the
/// smallest decides what fits; the CPU when no usable GPU was found (GPUs that only NVML sees
/// cannot run the work, the host will).
[[nodiscard]] inline hardware_type batch_hardware(const capabilities& caps) {
  const device_properties* smallest = nullptr;
  for (const auto& d : caps.devices) {
    if (!d.id.is_cuda() || !d.usable()) continue;
    if (smallest == nullptr || d.total_memory_bytes < smallest->total_memory_bytes) smallest = &d;
  }
  if (smallest != nullptr) return smallest->hardware;
  const bool only_unusable_gpus = !caps.devices.empty();
  return caps.device_type == device_kind::cpu || only_unusable_gpus ? hardware_type::cpu : hardware_type::unknown;
}

/// The recommendation for detected hardware (see batch_hardware).
[[nodiscard]] inline batch_size_recommendation recommend_batch_size(const capabilities& caps) {
  return recommend_batch_size(batch_hardware(caps));
}

/// The recommendation for the detected hardware, with a memory estimate: `max_memory_batch_size`
/// is filled from `budget_bytes` (e.g. a manager's budget(dev).budget_bytes), `per_sample_bytes`
/// and `fixed_bytes` as max_memory_batch_size computes it, clamped to int. config_error for
/// `per_sample_bytes == 0`.
[[nodiscard]] inline batch_size_recommendation recommend_batch_size(const capabilities& caps,
                                                                    std::uint64_t budget_bytes,
                                                                    std::uint64_t per_sample_bytes,
                                                                    std::uint64_t fixed_bytes = 0) {
  auto rec = recommend_batch_size(caps);
  const std::int64_t fits = max_memory_batch_size(budget_bytes, per_sample_bytes, fixed_bytes);
  rec.max_memory_batch_size = static_cast<int>(std::min<std::int64_t>(fits, std::numeric_limits<int>::max()));
  return rec;
}

/// The recommendation for the hardware this process detects, when none is given: the default
/// chain (CUDA, else the CPU) under the environment's settings (DEVICEKIT_PREFER,
/// DEVICEKIT_PLATFORMS, ...). The CUDA probe is cached, so repeated calls are cheap. config_error
/// when no platform is left (a platform list that excludes everything found), with the reasons.
[[nodiscard]] inline batch_size_recommendation recommend_batch_size() {
  const capabilities caps = first_available<cuda_detector, cpu_detector>{}.detect(settings::from_environment());
  if (!caps.usable()) {
    throw config_error("recommend_batch_size: no device was detected to recommend for: " + caps.fallback_reason);
  }
  return recommend_batch_size(caps);
}

}  // namespace devicekit
