#pragma once
/// \file
/// The definitions behind memory/detail/pool_invariants.hpp: the walk over every structure of a
/// pool.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/pool_invariants.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL void check_pool_invariants(const block_heap& heap, const slab_cache& slabs,
                                          const pool_stream_registry& streams, const allocation_registry& live,
                                          const pool_counters& counters) {
  auto fail = [](const std::string& what) { throw std::logic_error("memory pool invariant broken: " + what); };
  using block = pool_block;
  const auto& chunks = heap.chunks();
  const auto& stream_slots = streams.slots();
  std::size_t reserved = 0;
  std::size_t free_blocks = 0;
  std::size_t free_bytes_walk = 0;
  std::size_t used_large = 0;
  std::size_t used_large_bytes = 0;
  std::size_t slab_blocks = 0;
  std::size_t live_chunks = 0;
  for (std::uint32_t id = 0; id < chunks.size(); ++id) {
    const block_heap::chunk& c = chunks[id];
    if (!c.live) continue;
    ++live_chunks;
    reserved += c.size;
    std::uintptr_t at = c.base;
    const block* prev = nullptr;
    for (const block* b = c.first; b != nullptr; b = b->next_phys) {
      if (b->addr != at) fail("blocks do not tile chunk " + std::to_string(id));
      if (b->size == 0 || b->size % pool_granule != 0) fail("a block size is not a multiple of 256");
      if (b->prev_phys != prev) fail("a block's prev link is wrong");
      if (b->chunk != id) fail("a block names the wrong chunk");
      if (b->state == block_state::free) {
        ++free_blocks;
        free_bytes_walk += b->size;
        if (prev != nullptr && prev->state == block_state::free && prev->stream == b->stream) {
          fail("two neighbouring free blocks on the same stream were not merged");
        }
        if (b->stream > stream_slots.size()) fail("a free block names an unknown stream");
      } else if (b->state == block_state::used) {
        ++used_large;
        used_large_bytes += b->size;
        const live_record* r = live.find(b->addr);
        if (r == nullptr || r->owner() != b || r->kind() != live_kind::large) fail("a used block has no live record");
      } else {
        ++slab_blocks;
      }
      at += b->size;
      prev = b;
    }
    if (at != c.base + c.size) fail("blocks do not cover chunk " + std::to_string(id));
  }
  if (live_chunks != heap.chunk_order().size()) fail("the chunk order index is out of date");
  if (!std::is_sorted(heap.chunk_order().begin(), heap.chunk_order().end()))
    fail("the chunk order index is not sorted");
  if (reserved != heap.reserved()) fail("reserved bytes do not match the chunks");
  const free_index& ready = heap.ready();
  std::size_t indexed = ready.count();
  std::size_t indexed_bytes = ready.bytes();
  ready.for_each([&](block* b) {
    if (b->state != block_state::free || b->stream != 0) fail("the ready list holds a block that is not ready");
    if (free_index::bin_of(b->size) != b->bin || !ready.holds(b)) fail("a free block sits in the wrong bin");
  });
  std::size_t pending_small = 0;
  std::size_t pending_small_bytes = 0;
  for (std::size_t i = 0; i < stream_slots.size(); ++i) {
    const auto& st = *stream_slots[i];
    if (st.retired && st.pending() != 0 && !st.orphaned) fail("a released stream slot still holds pending frees");
    if (st.orphaned && (!st.retired || !st.fenced)) fail("an orphaned stream slot is in use or has no fence");
    // Streams the fence does not cover record at every free; fenced ones only when asked.
    if (st.pending() != 0 && !st.fenced && !st.event_in_flight)
      fail("pending frees are not covered by a recorded event");
    indexed += st.large.count();
    indexed_bytes += st.large.bytes();
    st.large.for_each([&](block* b) {
      if (b->state != block_state::free || b->stream != i + 1) fail("a stream list holds a foreign block");
      if (b->seq == 0 || b->seq >= st.next_seq) fail("a pending block has an impossible sequence number");
      if (!st.large.holds(b)) fail("a pending block sits in the wrong bin");
    });
    std::size_t n = 0;
    for (const auto& v : st.small) {
      n += v.size();
      for (const auto& ps : v) pending_small_bytes += ps.slab->slot_size;
    }
    if (n != st.small_pending) fail("a stream's pending slot count is wrong");
    pending_small += n;
  }
  if (indexed != free_blocks || indexed_bytes != free_bytes_walk)
    fail("the free lists do not hold exactly the free blocks");
  std::size_t slab_used = 0;
  std::size_t slab_used_bytes = 0;
  std::size_t slabs_seen = 0;
  for (const auto& owned : slabs.slabs()) {
    const pool_slab* s = owned.get();
    if (s->blk == nullptr) continue;
    ++slabs_seen;
    if (s->blk->state != block_state::slab) fail("a slab's block is not marked as a slab");
    if (s->used + s->free_slots.size() + (s->capacity - s->bump) != s->capacity)
      fail("a slab's slot counts do not add up");
    if (s->in_partial != s->has_ready_slot()) fail("a slab with a ready slot is not in its class list, or the reverse");
    slab_used += s->used;
    slab_used_bytes += static_cast<std::size_t>(s->used) * s->slot_size;
    if (s->used == 0 && slabs.classes()[s->cls].empty != s)
      fail("an empty slab is kept besides the class's one empty slab");
  }
  if (slabs_seen != slab_blocks || slabs_seen != slabs.slab_count()) fail("slab blocks and slab records disagree");
  std::size_t live_bytes = 0;
  std::size_t live_small = 0;
  live.for_each([&](const live_record& r) {
    live_bytes += r.requested;
    if (r.kind() == live_kind::small) ++live_small;
  });
  if (live.size() != counters.active) fail("active blocks do not match the live records");
  if (live_bytes != counters.allocated) fail("allocated bytes do not match the live records");
  if (used_large + live_small != live.size()) fail("live records do not match used blocks and slots");
  if (slab_used != live_small + pending_small) fail("slab slot counts do not match live and pending slots");
  if (used_large_bytes + slab_used_bytes - pending_small_bytes != counters.in_use) {
    fail("in-use bytes do not match the blocks");
  }
}

}  // namespace devicekit::detail
