#pragma once
/// \file
/// The definitions behind memory/pool.hpp: a device's total and available memory, a pool's
/// default budget basis.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/pool.hpp>

#include <unistd.h>

namespace devicekit::detail {

DEVICEKIT_DECL device_memory_figures memory_figures_of(device dev) {
  if (dev.is_cpu()) {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGE_SIZE);
    return {pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0, {}};
  }
#if DEVICEKIT_HAS_CUDA
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  {
    scoped_device on(dev.ordinal());
    DEVICEKIT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  }
  return {total, static_cast<std::uint64_t>(free_bytes) + pool_held_bytes(dev)};
#else
  return {};
#endif
}

}  // namespace devicekit::detail

namespace devicekit {

DEVICEKIT_DECL std::optional<std::uint64_t> device_available_bytes(device dev) {
  if (!DEVICEKIT_HAS_CUDA || !dev.is_cuda()) return std::nullopt;
  try {
    return detail::memory_figures_of(dev).available_bytes;
  } catch (const error&) {
    return std::nullopt;  // a device the runtime does not list, or no usable driver: nothing to measure
  }
}

}  // namespace devicekit
