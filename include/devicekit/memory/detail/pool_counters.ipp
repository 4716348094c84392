#pragma once
/// \file
/// The definitions behind memory/detail/pool_counters.hpp: counting an allocation and the pool's
/// stats.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/pool_counters.hpp>

#include <algorithm>

namespace devicekit::detail {

DEVICEKIT_DECL void pool_counters::allocated_one(std::size_t bytes, std::size_t rounded) noexcept {
  allocated += bytes;
  in_use += rounded;
  ++active;
  ++allocations;
  largest_allocation = std::max(largest_allocation, bytes);
  peak_allocated = std::max(peak_allocated, allocated);
  peak_active = std::max(peak_active, active);
}

DEVICEKIT_DECL pool_stats compute_stats(const pool_counters& c, const block_heap& heap, const slab_cache& slabs,
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
  s.stream_fences = streams.fences();
  s.max_size = max_size;
  return s;
}

}  // namespace devicekit::detail
