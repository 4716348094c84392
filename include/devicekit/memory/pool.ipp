#pragma once
/// \file
/// The definitions behind memory/pool.hpp: a device's total and available memory, a pool's
/// default budget basis.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/clients.hpp>

#include <memory>
#include <utility>

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
  // What the pools hold is theirs to reuse, and what other clients hold beside them (NCCL's
  // communicators, memory/clients.hpp) is paid for by the budget itself (device_memory charges it
  // past the reserve for collectives): neither makes the budget smaller here, or it would be
  // counted twice.
  return {total, static_cast<std::uint64_t>(free_bytes) + pool_held_bytes(dev) + device_client_bytes(dev)};
#else
  return {};
#endif
}

}  // namespace devicekit::detail

namespace devicekit {

DEVICEKIT_DECL std::unique_ptr<device_memory> make_device_pool(device dev, pool_config config, allocator_kind kind) {
  if (dev.is_cpu()) return std::make_unique<memory_pool<host_resource>>(host_resource{}, std::move(config));
  (void)detail::validated(config);  // a bad configuration is refused before a driver pool is made for it
  if (!config.budget && !config.max_size) {
    // The budget is worked out here rather than by the pool, because the driver pool below is made
    // first and keeps up to it when idle: its default threshold (0) would hand memory back at
    // every synchronisation (CUDA runtime API, cudaMemPoolAttrReleaseThreshold).
    const detail::device_memory_figures f = detail::memory_figures_of(dev);
    config.budget = detail::budget_of(config, dev.kind(), f.total_bytes, f.available_bytes);
  }
  const std::uint64_t threshold = config.max_size ? *config.max_size : config.budget->budget_bytes;
  config.release_on_free = config.release_on_free || kind != allocator_kind::pool;
  const auto mode = kind == allocator_kind::platform ? cuda_device_resource::mode::synchronous
                    : kind == allocator_kind::async  ? cuda_device_resource::mode::device_default_pool
                                                     : cuda_device_resource::mode::async_pool;
  return std::make_unique<memory_pool<cuda_device_resource>>(cuda_device_resource(dev.ordinal(), threshold, mode),
                                                             std::move(config));
}

DEVICEKIT_DECL std::optional<std::uint64_t> device_available_bytes(device dev) {
  if (!DEVICEKIT_HAS_CUDA || !dev.is_cuda()) return std::nullopt;
  try {
    return detail::memory_figures_of(dev).available_bytes;
  } catch (const error&) {
    return std::nullopt;  // a device the runtime does not list, or no usable driver: nothing to measure
  }
}

}  // namespace devicekit
