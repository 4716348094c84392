#pragma once
/// \file
/// The definitions behind memory/pool.hpp: the total memory of a device, a pool's default budget
/// basis.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/pool.hpp>

#include <unistd.h>

namespace devicekit::detail {

DEVICEKIT_DECL std::uint64_t total_memory_of(device dev) {
  if (dev.is_cpu()) {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
  }
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dev.ordinal());
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  DEVICEKIT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return total;
#else
  return 0;
#endif
}

}  // namespace devicekit::detail
