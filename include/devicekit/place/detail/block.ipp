#pragma once
/// \file
/// The definitions behind place/detail/block.hpp: freeing host-resident blocks and the page-offset padding.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/detail/block.hpp>

#include <cstdint>

namespace devicekit::detail {

DEVICEKIT_DECL std::size_t page_offset_padding(const void* src, std::size_t offset, std::size_t bytes) noexcept {
  constexpr std::size_t page = 4096;
  if (bytes < page) return 0;
  const std::size_t target = (reinterpret_cast<std::uintptr_t>(src) % page) / placement_alignment * placement_alignment;
  const std::size_t pad = (target + page - offset % page) % page;
  return pad <= bytes / 4 ? pad : 0;
}

DEVICEKIT_DECL void give_back_host_resident(void* pool, void* p, std::size_t bytes) noexcept {
  try {
    static_cast<device_memory*>(pool)->deallocate(p, bytes, placement_alignment);
  } catch (...) {
    // Only a foreign pointer or a wrong size throws, neither of which place produces.
  }
}

DEVICEKIT_DECL host_resident_block host_resident_deleter(device_memory& pool, std::size_t bytes) noexcept {
  return {static_cast<void*>(&pool), bytes, &give_back_host_resident};
}

}  // namespace devicekit::detail
