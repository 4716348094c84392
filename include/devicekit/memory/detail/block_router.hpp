#pragma once
/// \file
/// Where a request is served from and where a freed allocation goes back to: a size-class slot
/// (slab_cache) for small requests, a best-fit block (block_heap) for the rest, a stream's own
/// pending frees first when the request is stream-ordered (pool_stream_registry). The routing
/// rules of device_memory, kept apart from its recovery ladder and lock (RMM's
/// stream_ordered_memory_resource separates "get a block from this stream's free list" the same
/// way). Not locked: device_memory calls it under its own lock.
#include <devicekit/memory/detail/block_heap.hpp>
#include <devicekit/memory/detail/pool_stream_registry.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/detail/slab_cache.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>

namespace devicekit::detail {

/// What a take found: the address, its block or slab, the bytes it occupies (0 address: nothing).
struct taken_block {
  std::uintptr_t addr = 0;
  void* owner = nullptr;
  std::size_t size = 0;
  live_kind kind = live_kind::large;
};

/// Serves `bytes` (aligned to `alignment`) on stream slot `sid` (0: unordered) from what the pool
/// already holds; grows nothing. Small requests take a slot freed on this very stream first (stream
/// order makes its reuse safe), then any ready slot.
[[nodiscard]] DEVICEKIT_DECL taken_block take_block(block_heap& heap, slab_cache& slabs, pool_stream_registry& streams,
                                                    std::size_t bytes, std::size_t alignment, std::uint16_t sid);

/// The largest request of `alignment` (a power of two) whose arithmetic fits in size_t: its block
/// (the size rounded up to the granule) plus the padding a larger alignment may need, grown by
/// whole chunks of `min_chunk` bytes (block_heap::grow rounds up to them). Anything larger wraps
/// around and would be taken for a small request, so device_memory refuses it before using it.
[[nodiscard]] constexpr std::size_t largest_request(std::size_t alignment, std::size_t min_chunk) noexcept {
  constexpr std::size_t top = std::numeric_limits<std::size_t>::max();
  const std::size_t pad = alignment > pool_granule ? alignment - pool_granule : 0;
  const std::size_t room = top - (min_chunk > 0 ? min_chunk - 1 : 0);  // need + min_chunk - 1 stays in range
  return room < pad ? 0 : (room - pad) & ~(pool_granule - 1);
}

static_assert(largest_request(pool_granule, pool_granule) == std::numeric_limits<std::size_t>::max() - 255);
static_assert(largest_request(std::size_t{1} << 63, pool_granule) <= (std::size_t{1} << 63));

/// The bytes growing must add for take_block to succeed with this request: a whole slab for a
/// small one, the rounded size plus the worst alignment padding for a large one.
[[nodiscard]] inline std::size_t growth_need(const slab_cache& slabs, std::size_t bytes,
                                             std::size_t alignment) noexcept {
  if (slabs.serves(bytes, alignment)) return size_classes::slab_bytes(size_classes::class_of(bytes));
  const std::size_t n = round_up_pow2(bytes, pool_granule);
  return alignment > pool_granule ? n + alignment - pool_granule : n;
}

/// Gives the allocation `r` (at `a`) back: a large block to the free lists (of stream `sid`, to
/// be reused by other streams once its event completes), a slot to its slab, or to the stream's
/// deferred slots when ordered. Returns the bytes it occupied.
DEVICEKIT_DECL std::size_t return_block(const live_record& r, std::uintptr_t a, std::uint16_t sid, block_heap& heap,
                                        slab_cache& slabs, pool_stream_registry& streams);

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/block_router.ipp>
#endif
