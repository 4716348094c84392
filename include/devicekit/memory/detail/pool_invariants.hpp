#pragma once
/// \file
/// `check_pool_invariants`: walks every structure of a pool and throws std::logic_error naming the
/// first broken invariant (blocks tile each chunk, free neighbours on the same stream are merged,
/// the free lists hold exactly the free blocks, slabs and records and counters agree). What
/// device_memory::check_consistency runs, for tests and the model checks; O(size of the pool), so
/// kept out of the pool's own code, like the debug checks of allocators such as jemalloc's.
#include <devicekit/memory/detail/allocation_registry.hpp>
#include <devicekit/memory/detail/block_heap.hpp>
#include <devicekit/memory/detail/pool_counters.hpp>
#include <devicekit/memory/detail/slab_cache.hpp>
#include <devicekit/memory/detail/pool_stream_registry.hpp>

#include <cstddef>
#include <cstdint>

namespace devicekit::detail {

DEVICEKIT_DECL void check_pool_invariants(const block_heap& heap, const slab_cache& slabs,
                                          const pool_stream_registry& streams, const allocation_registry& live,
                                          const pool_counters& counters);

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/pool_invariants.ipp>
#endif
