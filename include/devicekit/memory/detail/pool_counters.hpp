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

#include <algorithm>
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

  void allocated_one(std::size_t bytes, std::size_t rounded) noexcept {
    allocated += bytes;
    in_use += rounded;
    ++active;
    ++allocations;
    largest_allocation = std::max(largest_allocation, bytes);
    peak_allocated = std::max(peak_allocated, allocated);
    peak_active = std::max(peak_active, active);
  }
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

[[nodiscard]] inline pool_stats compute_stats(const pool_counters& c, const block_heap& heap, const slab_cache& slabs,
                                              const pool_stream_registry& streams, std::size_t max_size) {
  pool_stats s;
  s.allocated_bytes = c.allocated;
  s.peak_allocated_bytes = c.peak_allocated;
  s.in_use_bytes = c.in_use;
  s.reserved_bytes = heap.reserved();
  s.peak_reserved_bytes = heap.peak_reserved();
  s.free_bytes = heap.reserved() - c.in_use;
  std::size_t largest = 0;
  if (const pool_block* b = heap.ready().largest()) largest = b->size;
  largest = std::max({largest, streams.largest_pending_block(), slabs.largest_ready_slot()});
  s.largest_free_block = largest;
  s.fragmentation = s.free_bytes > 0 ? 1.0 - static_cast<double>(largest) / static_cast<double>(s.free_bytes) : 0.0;
  if (s.fragmentation < 0.0) s.fragmentation = 0.0;
  s.active_blocks = c.active;
  s.peak_active_blocks = c.peak_active;
  s.allocation_count = c.allocations;
  s.largest_allocation_bytes = c.largest_allocation;
  s.free_count = c.frees;
  s.oom_count = c.ooms;
  s.alloc_retries = c.retries;
  s.upstream_allocations = heap.upstream_allocations();
  s.upstream_frees = heap.upstream_frees();
  s.chunk_count = heap.chunk_count();
  s.pending_stream_frees = streams.pending();
  s.max_size = max_size;
  return s;
}

}  // namespace devicekit::detail
