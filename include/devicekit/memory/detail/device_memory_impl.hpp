#pragma once
/// \file
/// Out-of-class definitions of devicekit::device_memory's longer members: small requests (slabs),
/// large blocks (best fit, splitting, coalescing), growth and release of chunks, stream-ordered
/// reuse, and the consistency check the tests run. The class itself, with what each member is
/// for, is in <devicekit/memory/device_memory.hpp>.
#include <devicekit/memory/device_memory.hpp>

namespace devicekit {

inline auto device_memory::take_small(int cls, std::uint16_t sid) -> taken {
  const std::size_t slot = detail::size_classes::slot_size(cls);
  if (sid != 0) {
    auto& pending = streams_[sid - 1u]->small[static_cast<std::size_t>(cls)];
    if (!pending.empty()) {  // freed on this very stream: reusable in stream order
      const detail::pending_slot p = pending.back();
      pending.pop_back();
      --streams_[sid - 1u]->small_pending;
      return {p.addr, p.slab, slot, detail::live_kind::small};
    }
  }
  detail::class_state& c = classes_[static_cast<std::size_t>(cls)];
  slab* s = c.partial;
  if (s == nullptr) {
    s = make_slab(cls);
    if (s == nullptr) return {};
  }
  std::uint32_t idx = 0;
  if (!s->free_slots.empty()) {
    idx = s->free_slots.back();
    s->free_slots.pop_back();
  } else {
    idx = s->bump++;
  }
  ++s->used;
  if (c.empty == s) c.empty = nullptr;
  if (!s->has_ready_slot()) partial_remove(s);
  return {s->base + static_cast<std::uintptr_t>(idx) * s->slot_size, s, slot, detail::live_kind::small};
}

inline auto device_memory::make_slab(int cls) -> slab* {
  const std::size_t bytes = detail::size_classes::slab_bytes(cls);
  // Only ready blocks: a slab's slots go to any stream.
  block* b = take_large(bytes, detail::pool_granule, 0, detail::block_state::slab);
  if (b == nullptr) return nullptr;
  slab* s = nullptr;
  if (!spare_slabs_.empty()) {
    s = spare_slabs_.back();
    spare_slabs_.pop_back();
  } else {
    slab_store_.push_back(std::make_unique<slab>());
    s = slab_store_.back().get();
  }
  s->blk = b;
  s->base = b->addr;
  s->slot_size = static_cast<std::uint32_t>(detail::size_classes::slot_size(cls));
  s->capacity = static_cast<std::uint32_t>(bytes / s->slot_size);
  s->used = 0;
  s->bump = 0;
  s->cls = static_cast<std::uint16_t>(cls);
  s->free_slots.clear();
  partial_push(s);
  ++slab_count_;
  return s;
}

inline auto device_memory::partial_push(slab* s) noexcept -> void {
  auto& c = classes_[s->cls];
  s->prev = nullptr;
  s->next = c.partial;
  if (c.partial != nullptr) c.partial->prev = s;
  c.partial = s;
  s->in_partial = true;
}

inline auto device_memory::partial_remove(slab* s) noexcept -> void {
  auto& c = classes_[s->cls];
  if (s->prev != nullptr) {
    s->prev->next = s->next;
  } else {
    c.partial = s->next;
  }
  if (s->next != nullptr) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
  s->in_partial = false;
}

inline auto device_memory::release_slot(slab* s, std::uintptr_t addr) -> void {
  s->free_slots.push_back(static_cast<std::uint32_t>((addr - s->base) / s->slot_size));
  --s->used;
  if (!s->in_partial) partial_push(s);
  if (s->used == 0) {
    auto& c = classes_[s->cls];
    if (c.empty == nullptr) {
      c.empty = s;
    } else if (c.empty != s) {
      destroy_slab(s);
    }
  }
}

inline auto device_memory::destroy_slab(slab* s) -> void {
  auto& c = classes_[s->cls];
  if (c.empty == s) c.empty = nullptr;
  if (s->in_partial) partial_remove(s);
  block* b = s->blk;
  s->blk = nullptr;
  s->free_slots.clear();
  spare_slabs_.push_back(s);
  --slab_count_;
  insert_free(b, 0, 0);
}

inline auto device_memory::release_empty_slabs() -> void {
  for (auto& c : classes_) {
    if (c.empty != nullptr) destroy_slab(c.empty);
  }
}

inline auto device_memory::take_large(std::size_t n, std::size_t alignment, std::uint16_t sid, detail::block_state as) -> block* {
  const std::size_t need = alignment > detail::pool_granule ? n + alignment - detail::pool_granule : n;
  block* b = nullptr;
  std::uint16_t from = 0;
  if (sid != 0) {
    b = streams_[sid - 1u]->large.best_fit(need);
    from = sid;
  }
  if (block* r = ready_.best_fit(need); r != nullptr && (b == nullptr || r->size < b->size)) {
    b = r;
    from = 0;
  }
  if (b == nullptr) return nullptr;
  detail::free_index& idx = index_of(from);
  idx.erase(b);
  const std::uintptr_t start = (b->addr + alignment - 1) & ~static_cast<std::uintptr_t>(alignment - 1);
  if (start != b->addr) {  // the front piece stays free, on the same stream
    block* f = blocks_.make();
    f->addr = b->addr;
    f->size = start - b->addr;
    f->chunk = b->chunk;
    f->stream = b->stream;
    f->seq = b->seq;
    f->prev_phys = b->prev_phys;
    f->next_phys = b;
    if (b->prev_phys != nullptr) {
      b->prev_phys->next_phys = f;
    } else {
      chunks_[b->chunk].first = f;
    }
    b->prev_phys = f;
    b->addr = start;
    b->size -= f->size;
    idx.insert(f);
  }
  if (b->size > n) {  // so does the tail
    block* t = blocks_.make();
    t->addr = b->addr + n;
    t->size = b->size - n;
    t->chunk = b->chunk;
    t->stream = b->stream;
    t->seq = b->seq;
    t->prev_phys = b;
    t->next_phys = b->next_phys;
    if (b->next_phys != nullptr) b->next_phys->prev_phys = t;
    b->next_phys = t;
    b->size = n;
    idx.insert(t);
  }
  b->state = as;
  b->stream = 0;
  b->seq = 0;
  return b;
}

inline auto device_memory::insert_free(block* b, std::uint16_t sid, std::uint64_t seq) -> void {
  b->state = detail::block_state::free;
  b->stream = sid;
  b->seq = seq;
  detail::free_index& idx = index_of(sid);
  if (block* p = b->prev_phys; p != nullptr && p->state == detail::block_state::free && p->stream == sid) {
    idx.erase(p);
    p->size += b->size;
    p->next_phys = b->next_phys;
    if (b->next_phys != nullptr) b->next_phys->prev_phys = p;
    p->seq = std::max(p->seq, b->seq);
    blocks_.recycle(b);
    b = p;
  }
  if (block* n = b->next_phys; n != nullptr && n->state == detail::block_state::free && n->stream == sid) {
    idx.erase(n);
    b->size += n->size;
    b->next_phys = n->next_phys;
    if (n->next_phys != nullptr) n->next_phys->prev_phys = b;
    b->seq = std::max(b->seq, n->seq);
    blocks_.recycle(n);
  }
  idx.insert(b);
}

inline auto device_memory::grow(std::size_t need) -> bool {
  const std::size_t room = max_size_ > reserved_ ? (max_size_ - reserved_) & ~(detail::pool_granule - 1) : 0;
  if (need > room) return false;
  std::size_t step = 0;
  if (config_.growth_factor > 1.0) {
    const double g = static_cast<double>(reserved_) * (config_.growth_factor - 1.0);
    step = g >= static_cast<double>(max_chunk_) ? max_chunk_ : static_cast<std::size_t>(g);
  }
  // At least the request and min_chunk_size, in whole multiples of min_chunk_size (what is
  // left over serves the next requests), at most max_chunk_size (unless the request is
  // larger) and the room left in the budget.
  std::size_t want = std::max({need, step, min_chunk_});
  want = (want + min_chunk_ - 1) / min_chunk_ * min_chunk_;
  want = std::min(want, std::max(max_chunk_, need));
  want = std::max(std::min(want, room), need);
  for (;;) {
    void* p = nullptr;
    try {
      p = upstream_->allocate(want, detail::pool_granule);
    } catch (const std::exception& e) {
      last_upstream_error_ = e.what();
    }
    if (p != nullptr) {
      if ((reinterpret_cast<std::uintptr_t>(p) & (detail::pool_granule - 1)) != 0) {
        upstream_->deallocate(p, want, detail::pool_granule);
        throw config_error("the pool's upstream on " + device_.str() +
                           " returned memory not aligned to 256 bytes; an upstream must honour the alignment it is asked for");
      }
      last_upstream_error_.clear();
      add_chunk(p, want, false);
      return true;
    }
    if (want == need) return false;
    want = need;  // a smaller chunk may still be there
  }
}

inline auto device_memory::add_chunk(void* p, std::size_t bytes, bool initial) -> void {
  std::uint32_t id = 0;
  if (!spare_chunk_ids_.empty()) {
    id = spare_chunk_ids_.back();
    spare_chunk_ids_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(chunks_.size());
    chunks_.emplace_back();
  }
  block* b = blocks_.make();
  b->addr = reinterpret_cast<std::uintptr_t>(p);
  b->size = bytes;
  b->chunk = id;
  chunks_[id] = chunk{b->addr, bytes, b, initial, true};
  const auto pos = std::lower_bound(chunk_order_.begin(), chunk_order_.end(), std::make_pair(b->addr, std::uint32_t{0}));
  chunk_order_.insert(pos, {b->addr, id});
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++upstream_allocs_;
  insert_free(b, 0, 0);
  if (!observers_.empty()) notify(detail::pool_event::grew, 0);
}

inline auto device_memory::release_empty_chunks(bool keep_initial) -> std::pair<std::size_t, std::size_t> {
  std::size_t bytes = 0;
  std::size_t count = 0;
  for (std::uint32_t id = 0; id < chunks_.size(); ++id) {
    chunk& c = chunks_[id];
    if (!c.live || (keep_initial && c.initial)) continue;
    block* b = c.first;
    if (b->state != detail::block_state::free || b->stream != 0 || b->size != c.size) continue;
    ready_.erase(b);
    blocks_.recycle(b);
    upstream_->deallocate(reinterpret_cast<void*>(c.base), c.size, detail::pool_granule);
    reserved_ -= c.size;
    ++upstream_frees_;
    bytes += c.size;
    ++count;
    const auto pos = std::lower_bound(chunk_order_.begin(), chunk_order_.end(), std::make_pair(c.base, std::uint32_t{0}));
    chunk_order_.erase(pos);
    c = chunk{};
    spare_chunk_ids_.push_back(id);
  }
  return {bytes, count};
}

inline auto device_memory::inside_chunk(std::uintptr_t a) const noexcept -> bool {
  auto it = std::upper_bound(chunk_order_.begin(), chunk_order_.end(),
                             std::make_pair(a, std::numeric_limits<std::uint32_t>::max()));
  if (it == chunk_order_.begin()) return false;
  --it;
  const chunk& c = chunks_[it->second];
  return a >= c.base && a < c.base + c.size;
}

inline auto device_memory::stream_id(native_stream_handle h) -> std::uint16_t {
  if (last_sid_ != 0 && streams_[last_sid_ - 1u]->handle == h && !streams_[last_sid_ - 1u]->retired) return last_sid_;
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    if (!streams_[i]->retired && streams_[i]->handle == h) return last_sid_ = static_cast<std::uint16_t>(i + 1);
  }
  // A new stream takes a slot that release_stream freed, if there is one.
  std::size_t slot = streams_.size();
  for (std::size_t i = 0; i < streams_.size() && slot == streams_.size(); ++i) {
    if (streams_[i]->retired) slot = i;
  }
  if (slot == streams_.size() && streams_.size() >= max_stream_slots) {
    throw invalid_request("a memory pool serves at most " + std::to_string(max_stream_slots) +
                          " streams at once: call release_stream(s) for streams that are done");
  }
  if (slot == streams_.size()) streams_.push_back(std::make_unique<detail::stream_state>());
  detail::stream_state& st = *streams_[slot];
  st.handle = h;
  st.retired = false;
  st.small.resize(static_cast<std::size_t>(class_count_));
  return last_sid_ = static_cast<std::uint16_t>(slot + 1);
}

inline auto device_memory::retire_slot(detail::stream_state& st) noexcept -> void {
  if (st.event != nullptr) upstream_->destroy_event(st.event);
  st.event = nullptr;
  st.event_in_flight = false;
  st.recorded_seq = 0;
  st.retired = true;
  if (last_sid_ != 0 && streams_[last_sid_ - 1u].get() == &st) last_sid_ = 0;
}

inline auto device_memory::record_free_event(detail::stream_state& st) -> void {
  // The event is recorded now, at the free, while the stream certainly exists, never later: a
  // stream may be destroyed once its work is queued (cudaStreamDestroy returns at once and the
  // work still completes), and recording on a destroyed stream is undefined behaviour. RMM's
  // stream_ordered_memory_resource records at every deallocation for the same reason. One event
  // per stream, re-recorded: it then covers every free made on the stream so far.
  if (st.event == nullptr) st.event = upstream_->create_event(st.handle);
  upstream_->record_event(st.event, st.handle);
  st.recorded_seq = st.next_seq;  // the sequence number the free being made will take
  st.event_in_flight = true;
}

inline auto device_memory::poll_streams(std::uint16_t except, bool wait) -> bool {
  bool any = false;
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    if (i + 1 == except) continue;
    detail::stream_state& st = *streams_[i];
    // Only events are touched here, never the stream: it may be gone (see record_free_event).
    if (st.pending() == 0 || !st.event_in_flight) continue;
    if (wait) {
      upstream_->wait_event(st.event);
    } else if (!upstream_->event_complete(st.event)) {
      continue;
    }
    st.event_in_flight = false;
    any = migrate(st, st.recorded_seq) || any;
  }
  return any;
}

inline auto device_memory::migrate(detail::stream_state& st, std::uint64_t upto) -> bool {
  bool any = false;
  migrate_scratch_.clear();
  st.large.for_each([&](block* b) {
    if (b->seq <= upto) migrate_scratch_.push_back(b);
  });
  for (block* b : migrate_scratch_) {
    st.large.erase(b);
    insert_free(b, 0, 0);
    any = true;
  }
  for (auto& pending : st.small) {
    std::size_t keep = 0;
    for (std::size_t j = 0; j < pending.size(); ++j) {
      if (pending[j].seq <= upto) {
        release_slot(pending[j].slab, pending[j].addr);
        --st.small_pending;
        any = true;
      } else {
        pending[keep++] = pending[j];
      }
    }
    pending.resize(keep);
  }
  return any;
}

inline auto device_memory::check_consistency_locked() const -> void {
  auto fail = [](const std::string& what) { throw std::logic_error("memory pool invariant broken: " + what); };
  std::size_t reserved = 0;
  std::size_t free_blocks = 0;
  std::size_t free_bytes_walk = 0;
  std::size_t used_large = 0;
  std::size_t used_large_bytes = 0;
  std::size_t slab_blocks = 0;
  std::size_t live_chunks = 0;
  for (std::uint32_t id = 0; id < chunks_.size(); ++id) {
    const chunk& c = chunks_[id];
    if (!c.live) continue;
    ++live_chunks;
    reserved += c.size;
    std::uintptr_t at = c.base;
    const block* prev = nullptr;
    for (const block* b = c.first; b != nullptr; b = b->next_phys) {
      if (b->addr != at) fail("blocks do not tile chunk " + std::to_string(id));
      if (b->size == 0 || b->size % detail::pool_granule != 0) fail("a block size is not a multiple of 256");
      if (b->prev_phys != prev) fail("a block's prev link is wrong");
      if (b->chunk != id) fail("a block names the wrong chunk");
      if (b->state == detail::block_state::free) {
        ++free_blocks;
        free_bytes_walk += b->size;
        if (prev != nullptr && prev->state == detail::block_state::free && prev->stream == b->stream) {
          fail("two neighbouring free blocks on the same stream were not merged");
        }
        if (b->stream > streams_.size()) fail("a free block names an unknown stream");
      } else if (b->state == detail::block_state::used) {
        ++used_large;
        used_large_bytes += b->size;
        const detail::live_record* r = live_.find(b->addr);
        if (r == nullptr || r->owner() != b || r->kind() != detail::live_kind::large) {
          fail("a used block has no live record");
        }
      } else {
        ++slab_blocks;
      }
      at += b->size;
      prev = b;
    }
    if (at != c.base + c.size) fail("blocks do not cover chunk " + std::to_string(id));
  }
  if (live_chunks != chunk_order_.size()) fail("the chunk order index is out of date");
  if (!std::is_sorted(chunk_order_.begin(), chunk_order_.end())) fail("the chunk order index is not sorted");
  if (reserved != reserved_) fail("reserved bytes do not match the chunks");
  std::size_t indexed = ready_.count();
  std::size_t indexed_bytes = ready_.bytes();
  ready_.for_each([&](block* b) {
    if (b->state != detail::block_state::free || b->stream != 0) fail("the ready list holds a block that is not ready");
    if (detail::free_index::bin_of(b->size) != b->bin || !ready_.holds(b)) fail("a free block sits in the wrong bin");
  });
  std::size_t pending_small = 0;
  std::size_t pending_small_bytes = 0;
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    const auto& st = *streams_[i];
    if (st.retired && st.pending() != 0) fail("a released stream slot still holds pending frees");
    if (st.pending() != 0 && !st.event_in_flight) fail("pending frees are not covered by a recorded event");
    indexed += st.large.count();
    indexed_bytes += st.large.bytes();
    st.large.for_each([&](block* b) {
      if (b->state != detail::block_state::free || b->stream != i + 1) fail("a stream list holds a foreign block");
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
  if (indexed != free_blocks || indexed_bytes != free_bytes_walk) fail("the free lists do not hold exactly the free blocks");
  std::size_t slab_used = 0;
  std::size_t slab_used_bytes = 0;
  std::size_t slabs_seen = 0;
  for (const auto& owned : slab_store_) {
    const slab* s = owned.get();
    if (s->blk == nullptr) continue;
    ++slabs_seen;
    if (s->blk->state != detail::block_state::slab) fail("a slab's block is not marked as a slab");
    if (s->used + s->free_slots.size() + (s->capacity - s->bump) != s->capacity) fail("a slab's slot counts do not add up");
    if (s->in_partial != s->has_ready_slot()) fail("a slab with a ready slot is not in its class list, or the reverse");
    slab_used += s->used;
    slab_used_bytes += static_cast<std::size_t>(s->used) * s->slot_size;
    if (s->used == 0 && classes_[s->cls].empty != s) fail("an empty slab is kept besides the class's one empty slab");
  }
  if (slabs_seen != slab_blocks || slabs_seen != slab_count_) fail("slab blocks and slab records disagree");
  std::size_t live_bytes = 0;
  std::size_t live_small = 0;
  live_.for_each([&](const detail::live_record& r) {
    live_bytes += r.requested;
    if (r.kind() == detail::live_kind::small) ++live_small;
  });
  if (live_.size() != active_) fail("active blocks do not match the live records");
  if (live_bytes != allocated_) fail("allocated bytes do not match the live records");
  if (used_large + live_small != live_.size()) fail("live records do not match used blocks and slots");
  if (slab_used != live_small + pending_small) fail("slab slot counts do not match live and pending slots");
  if (used_large_bytes + slab_used_bytes - pending_small_bytes != in_use_) fail("in-use bytes do not match the blocks");
}

}  // namespace devicekit
