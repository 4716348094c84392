#pragma once
/// \file
/// The definitions behind detect/batch_size.hpp: the memory estimate and the recommendation for
/// detected hardware. Inline in a header-only build; compiled once under
/// DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/detect/batch_size.hpp>

#include <algorithm>
#include <limits>
#include <string>

namespace devicekit {

DEVICEKIT_DECL std::int64_t max_memory_batch_size(std::uint64_t budget_bytes, std::uint64_t per_sample_bytes,
                                                  std::uint64_t fixed_bytes) {
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

DEVICEKIT_DECL hardware_type batch_hardware(const capabilities& caps) {
  const device_properties* smallest = nullptr;
  for (const auto& d : caps.devices) {
    if (!d.id.is_cuda() || !d.usable()) continue;
    if (smallest == nullptr || d.total_memory_bytes < smallest->total_memory_bytes) smallest = &d;
  }
  if (smallest != nullptr) return smallest->hardware;
  const bool only_unusable_gpus = !caps.devices.empty();
  return caps.device_type == device_kind::cpu || only_unusable_gpus ? hardware_type::cpu : hardware_type::unknown;
}

DEVICEKIT_DECL batch_size_recommendation recommend_batch_size(const capabilities& caps, std::uint64_t budget_bytes,
                                                              std::uint64_t per_sample_bytes,
                                                              std::uint64_t fixed_bytes) {
  auto rec = recommend_batch_size(caps);
  const std::int64_t fits = max_memory_batch_size(budget_bytes, per_sample_bytes, fixed_bytes);
  rec.max_memory_batch_size = static_cast<int>(std::min<std::int64_t>(fits, std::numeric_limits<int>::max()));
  return rec;
}

DEVICEKIT_DECL batch_size_recommendation recommend_batch_size() {
  const capabilities caps = first_available<cuda_detector, cpu_detector>{}.detect(settings::from_environment());
  if (!caps.usable()) {
    throw config_error("recommend_batch_size: no device was detected to recommend for: " + caps.fallback_reason);
  }
  return recommend_batch_size(caps);
}

}  // namespace devicekit
