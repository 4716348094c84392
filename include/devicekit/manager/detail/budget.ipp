#pragma once
/// \file
/// The definitions behind manager/detail/budget.hpp: measuring what a GPU has available, once, and the
/// budget a manager gives a device.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/manager/detail/budget.hpp>

#include <devicekit/detect/detectors.hpp>
#include <devicekit/memory/pool.hpp>

#include <cstddef>
#include <mutex>
#include <optional>

namespace devicekit::detail {

DEVICEKIT_DECL bool listed_by_runtime(const capabilities& caps, device d) {
#if DEVICEKIT_HAS_CUDA
  for (const auto& p : caps.devices) {
    if (p.id != d) continue;
    if (!p.usable() || p.compile_only) return false;
    const cuda_probe& probe = cached_cuda_probe();
    const auto ordinal = static_cast<std::size_t>(d.ordinal());
    return ordinal < probe.devices.size() && probe.devices[ordinal].uuid == p.uuid;
  }
#else
  (void)caps;
  (void)d;
#endif
  return false;
}

DEVICEKIT_DECL std::optional<std::uint64_t> available_memory::measure(const capabilities& caps, device d) const {
  if (!d.is_cuda()) return std::nullopt;
  if (!state_) return listed_by_runtime(caps, d) ? device_available_bytes(d) : std::nullopt;  // moved from
  std::lock_guard lock(state_->mutex);
  for (const auto& [dev, bytes] : state_->measured) {
    if (dev == d) return bytes;
  }
  const std::optional<std::uint64_t> bytes = listed_by_runtime(caps, d) ? device_available_bytes(d) : std::nullopt;
  state_->measured.emplace_back(d, bytes);
  return bytes;
}

DEVICEKIT_DECL std::optional<std::uint64_t> available_memory::known(device d) const {
  if (!state_) return std::nullopt;
  std::lock_guard lock(state_->mutex);
  for (const auto& [dev, bytes] : state_->measured) {
    if (dev == d) return bytes;
  }
  return std::nullopt;
}

DEVICEKIT_DECL memory_budget manager_budget(memory_budget b, device d, std::uint64_t collective_reserve,
                                            const capabilities& caps, const available_memory& available, bool measure) {
  if (!d.is_cuda()) return b;
  if (const auto bytes = measure ? available.measure(caps, d) : available.known(d)) b = cap_to_available(b, *bytes);
  return reserve_for_collectives(b, collective_reserve, d.str());
}

}  // namespace devicekit::detail
