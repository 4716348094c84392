#pragma once
/// \file
/// What a pool reports about itself (`pool_stats`, PyTorch's memory_stats keys reduced to what a
/// user acts on) and one device's figures in jaxlib's terms (`device_memory_stats`). The errors
/// the memory layer throws are in <devicekit/memory/errors.hpp>.
#include <devicekit/core/config.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace devicekit {

/// A pool's figures. Bytes "allocated" are what callers asked for; "in use" adds the rounding to
/// blocks and size classes; "reserved" is what the pool holds from its upstream.
struct pool_stats {
  std::size_t allocated_bytes = 0;       ///< live bytes as requested
  std::size_t peak_allocated_bytes = 0;  ///< highest allocated_bytes since creation (or reset)
  std::size_t in_use_bytes = 0;          ///< live bytes as blocks (rounded)
  std::size_t reserved_bytes = 0;        ///< held from the upstream
  std::size_t peak_reserved_bytes = 0;
  std::size_t free_bytes = 0;          ///< reserved - in use (cached, ready or pending on a stream)
  std::size_t largest_free_block = 0;  ///< the largest request served without growing
  double fragmentation = 0.0;          ///< 1 - largest free block / free bytes (0 when nothing is free)
  std::size_t active_blocks = 0;       ///< live allocations
  std::size_t peak_active_blocks = 0;
  std::uint64_t allocation_count = 0;        ///< successful allocations (0-byte requests are not counted)
  std::size_t largest_allocation_bytes = 0;  ///< the largest request served since creation
  std::uint64_t free_count = 0;              ///< successful frees
  std::uint64_t oom_count = 0;               ///< out_of_memory errors thrown
  std::uint64_t alloc_retries = 0;           ///< allocations that needed the recovery ladder
  std::uint64_t upstream_allocations = 0;
  std::uint64_t upstream_frees = 0;
  std::size_t chunk_count = 0;           ///< upstream allocations held now
  std::size_t pending_stream_frees = 0;  ///< frees waiting for another stream's event
  /// Times the pool waited for its whole device (cudaDeviceSynchronize) to reuse frees that no
  /// stream event covered: the last resort before growing fails (memory/device_memory.hpp).
  std::uint64_t stream_fences = 0;
  std::size_t max_size = 0;  ///< the cap on reserved bytes (the budget)
  /// Memory of captured CUDA graphs made from this pool (graph memory nodes: each live graph's
  /// most at once), counted against max_size with reserved_bytes until the graph is destroyed.
  std::size_t graph_bytes = 0;
  std::size_t graph_blocks = 0;  ///< blocks allocated inside captures and not yet freed

  friend bool operator==(const pool_stats&, const pool_stats&) = default;
};

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

  /// Adds one pool's figures.
  device_memory_stats& operator+=(const pool_stats& p);

  /// The figures under jaxlib's key names, exactly those seven.
  [[nodiscard]] std::map<std::string, std::int64_t> as_map() const;
  /// The map as a JSON object, keys in alphabetical order (stable for comparisons and logs).
  [[nodiscard]] std::string to_json() const;

  friend bool operator==(const device_memory_stats&, const device_memory_stats&) = default;
};

namespace detail {
[[nodiscard]] DEVICEKIT_DECL std::string human_bytes(std::uint64_t bytes);
}  // namespace detail

}  // namespace devicekit

// The errors used to live here: code that includes only this header keeps getting them. Included
// last, after pool_stats, which out_of_memory carries.
#include <devicekit/memory/errors.hpp>

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/stats.ipp>
#endif
