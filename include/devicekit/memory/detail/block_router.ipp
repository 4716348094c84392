#pragma once
/// \file
/// The definitions behind memory/detail/block_router.hpp: taking a block for a request and taking
/// it back.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/block_router.hpp>

namespace devicekit::detail {

DEVICEKIT_DECL taken_block take_block(block_heap& heap, slab_cache& slabs, pool_stream_registry& streams,
                                      std::size_t bytes, std::size_t alignment, std::uint16_t sid) {
  if (slabs.serves(bytes, alignment)) {
    const int cls = size_classes::class_of(bytes);
    const std::size_t slot = size_classes::slot_size(cls);
    slab_cache::slot sl;
    if (sid != 0) sl = streams.take_own_slot(sid, cls);
    if (sl.addr == 0) sl = slabs.take(cls, heap);
    if (sl.addr == 0) return {};
    return {sl.addr, sl.owner, slot, live_kind::small};
  }
  const std::size_t n = round_up_pow2(bytes, pool_granule);
  pool_block* b = heap.take(n, alignment, sid != 0 ? &streams.at(sid).large : nullptr, block_state::used);
  if (b == nullptr) return {};
  return {b->addr, b, b->size, live_kind::large};
}

DEVICEKIT_DECL std::size_t return_block(const live_record& r, std::uintptr_t a, std::uint16_t sid, block_heap& heap,
                                        slab_cache& slabs, pool_stream_registry& streams) {
  if (r.kind() == live_kind::large) {
    auto* b = static_cast<pool_block*>(r.owner());
    const std::size_t size = b->size;
    heap.insert_free(b, sid, sid != 0 ? streams.at(sid).next_seq++ : 0, streams.index_of(sid, heap));
    return size;
  }
  auto* sl = static_cast<pool_slab*>(r.owner());
  const std::size_t size = sl->slot_size;  // before release_slot, which may free an empty slab
  if (sid != 0) {
    streams.defer_slot(sid, sl->cls, a, sl);
  } else {
    slabs.release_slot(sl, a, heap);
  }
  return size;
}

}  // namespace devicekit::detail
