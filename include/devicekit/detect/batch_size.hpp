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

#include <cstdint>

namespace devicekit {

/// The largest batch whose samples fit `budget_bytes`:
///     floor((budget_bytes - fixed_bytes) / per_sample_bytes)
/// where `per_sample_bytes` is what one sample costs on the device (inputs, activations and
/// their gradients: everything that scales with the batch) and `fixed_bytes` what does not
/// (weights, optimizer state, workspace). A budget at or below `fixed_bytes` gives 0: not even
/// one sample fits. The division cannot overflow, and the result saturates at INT64_MAX.
/// config_error for `per_sample_bytes == 0` (every batch would fit: the question has no answer).
[[nodiscard]] DEVICEKIT_DECL std::int64_t max_memory_batch_size(std::uint64_t budget_bytes,
                                                                std::uint64_t per_sample_bytes,
                                                                std::uint64_t fixed_bytes = 0);

/// The recommendation row for `h`.
[[nodiscard]] inline batch_size_recommendation recommend_batch_size(hardware_type h) {
  return batch_size_recommendation_for(h);
}

/// The hardware a batch-size recommendation for `caps` is for: with several GPUs the one with
/// the least memory, since in data-parallel training every device takes the same share and the
/// smallest decides what fits; the CPU when no usable GPU was found (GPUs that only NVML sees
/// cannot run the work, the host will).
[[nodiscard]] DEVICEKIT_DECL hardware_type batch_hardware(const capabilities& caps);

/// The recommendation for detected hardware (see batch_hardware).
[[nodiscard]] inline batch_size_recommendation recommend_batch_size(const capabilities& caps) {
  return recommend_batch_size(batch_hardware(caps));
}

/// The recommendation for the detected hardware, with a memory estimate: `max_memory_batch_size`
/// is filled from `budget_bytes` (e.g. a manager's budget(dev).budget_bytes), `per_sample_bytes`
/// and `fixed_bytes` as max_memory_batch_size computes it, clamped to int. config_error for
/// `per_sample_bytes == 0`.
[[nodiscard]] DEVICEKIT_DECL batch_size_recommendation recommend_batch_size(const capabilities& caps,
                                                                            std::uint64_t budget_bytes,
                                                                            std::uint64_t per_sample_bytes,
                                                                            std::uint64_t fixed_bytes = 0);

/// The recommendation for the hardware this process detects, when none is given: the default
/// chain (CUDA, else the CPU) under the environment's settings (DEVICEKIT_PREFER,
/// DEVICEKIT_PLATFORMS, ...). The CUDA probe is cached, so repeated calls are cheap. config_error
/// when no platform is left (a platform list that excludes everything found), with the reasons.
[[nodiscard]] DEVICEKIT_DECL batch_size_recommendation recommend_batch_size();

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/detect/batch_size.ipp>
#endif
