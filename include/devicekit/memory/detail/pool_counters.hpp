#pragma once
/// \file
/// `pool_counters`: the running figures of a pool's allocations (bytes as requested and as
/// blocks, live blocks, counts, peaks, out-of-memory errors), and `compute_stats`, which turns them
/// and the components' own figures (reserved bytes and chunk traffic from the block_heap, the
/// largest free piece, pending frees) into a pool_stats, PyTorch's memory_stats reduced to what a
/// user acts on. Kept apart so that every figure is computed in one place. Not locked:
/// device_memory updates and reads them under its own lock.
#include <devicekit/memory/detail/block_heap.hpp>
#include <devicekit/memory/detail/slab_cache.hpp>
#include <devicekit/memory/detail/pool_stream_registry.hpp>
#include <devicekit/memory/stats.hpp>

#include <cstddef>
#include <cstdint>

namespace devicekit::detail {

struct pool_counters {
  std::size_t allocated = 0;  ///< live bytes as requested
  std::size_t peak_allocated = 0;
  std::size_t in_use = 0;  ///< live bytes as blocks and slots (rounded), pending ones included
  std::size_t active = 0;  ///< live allocations
  std::size_t peak_active = 0;
  std::uint64_t allocations = 0;
  std::size_t largest_allocation = 0;
  std::uint64_t frees = 0;
  std::uint64_t ooms = 0;
  std::uint64_t retries = 0;  ///< allocations that needed the recovery ladder

  void allocated_one(std::size_t bytes, std::size_t rounded) noexcept;
  void freed_one(std::size_t bytes) noexcept {
    allocated -= bytes;
    --active;
    ++frees;
  }
  void reset_peaks() noexcept {
    peak_allocated = allocated;
    peak_active = active;
  }
};

[[nodiscard]] DEVICEKIT_DECL pool_stats compute_stats(const pool_counters& c, const block_heap& heap,
                                                      const slab_cache& slabs, const pool_stream_registry& streams,
                                                      std::size_t max_size);

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/pool_counters.ipp>
#endif
