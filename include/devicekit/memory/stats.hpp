#pragma once
/// \file
/// What a pool reports about itself (`pool_stats`, PyTorch's memory_stats keys reduced to what a
/// user acts on: in memory/pool_stats.hpp, below the errors, since out_of_memory carries it) and
/// one device's figures in jaxlib's terms (`device_memory_stats`). The errors the memory layer
/// throws are in <devicekit/memory/errors.hpp>, included here for code that includes only this
/// header.
#include <devicekit/core/config.hpp>
#include <devicekit/memory/clients.hpp>
#include <devicekit/memory/errors.hpp>      // IWYU pragma: export
#include <devicekit/memory/pool_stats.hpp>  // IWYU pragma: export

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace devicekit {

/// One device's memory in jaxlib's terms (Device.memory_stats(), whose keys come from XLA's
/// AllocatorStats): what `device_manager::memory_stats(dev)` returns. Summed over the pools that
/// serve the device (the manager's, and the process's default placement pool where one exists);
/// a peak is then the sum of the pools' peaks, an upper bound. bytes_limit is the manager's
/// budget for the device (`operator+=` leaves it alone).
struct device_memory_stats {
  std::uint64_t bytes_in_use = 0;              ///< live bytes as requested
  std::uint64_t peak_bytes_in_use = 0;         ///< highest bytes_in_use (per pool, summed)
  std::uint64_t bytes_limit = 0;               ///< the budget: what the manager's pool may reserve
  std::uint64_t num_allocs = 0;                ///< allocations served since creation
  std::uint64_t largest_alloc_size = 0;        ///< the largest single allocation served
  std::uint64_t bytes_reserved = 0;            ///< held from the driver now
  std::uint64_t largest_free_block_bytes = 0;  ///< the largest request served without growing
  /// bytes_in_use by client (memory/clients.hpp): "devicekit" first, then the libraries that
  /// allocate through devicekit's pools ("rmm"). Not one of jaxlib's keys: as_map leaves it out.
  std::vector<client_memory_stats> clients;

  /// Adds one pool's figures.
  device_memory_stats& operator+=(const pool_stats& p);

  /// The figures under jaxlib's key names, exactly those seven.
  [[nodiscard]] std::map<std::string, std::int64_t> as_map() const;
  /// The map as a JSON object, keys in alphabetical order (stable for comparisons and logs).
  [[nodiscard]] std::string to_json() const;

  friend bool operator==(const device_memory_stats&, const device_memory_stats&) = default;
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/stats.ipp>
#endif
