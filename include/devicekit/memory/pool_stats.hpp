#pragma once
/// \file
/// What a pool reports about itself (`pool_stats`, PyTorch's memory_stats keys reduced to what a
/// user acts on) and the byte counts its messages print. Apart from memory/stats.hpp because
/// out_of_memory (memory/errors.hpp) carries a pool_stats, and stats.hpp includes the errors.
#include <devicekit/core/config.hpp>

#include <cstddef>
#include <cstdint>
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

namespace detail {
[[nodiscard]] DEVICEKIT_DECL std::string human_bytes(std::uint64_t bytes);
}  // namespace detail

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/pool_stats.ipp>
#endif
