#pragma once
/// \file
/// The definitions behind memory/stats.hpp: adding up, listing and printing the figures.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/stats.hpp>

#include <algorithm>
#include <map>
#include <string>

namespace devicekit {

DEVICEKIT_DECL device_memory_stats& device_memory_stats::operator+=(const pool_stats& p) {
  bytes_in_use += p.allocated_bytes;
  peak_bytes_in_use += p.peak_allocated_bytes;
  num_allocs += p.allocation_count;
  largest_alloc_size = std::max<std::uint64_t>(largest_alloc_size, p.largest_allocation_bytes);
  bytes_reserved += p.reserved_bytes;
  largest_free_block_bytes = std::max<std::uint64_t>(largest_free_block_bytes, p.largest_free_block);
  return *this;
}

DEVICEKIT_DECL std::map<std::string, std::int64_t> device_memory_stats::as_map() const {
  auto i = [](std::uint64_t v) { return static_cast<std::int64_t>(v); };
  return {{"bytes_in_use", i(bytes_in_use)},
          {"peak_bytes_in_use", i(peak_bytes_in_use)},
          {"bytes_limit", i(bytes_limit)},
          {"num_allocs", i(num_allocs)},
          {"largest_alloc_size", i(largest_alloc_size)},
          {"bytes_reserved", i(bytes_reserved)},
          {"largest_free_block_bytes", i(largest_free_block_bytes)}};
}

DEVICEKIT_DECL std::string device_memory_stats::to_json() const {
  std::string out = "{";
  for (const auto& [key, value] : as_map()) {
    out += (out.size() > 1 ? ", \"" : "\"") + key + "\": " + std::to_string(value);
  }
  return out + "}";
}

}  // namespace devicekit
