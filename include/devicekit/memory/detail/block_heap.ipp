#pragma once
/// \file
/// The definitions behind memory/detail/block_heap.hpp: best fit and splitting, coalescing, growth
/// and chunk release.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/block_heap.hpp>

#include <algorithm>
#include <exception>
#include <limits>
#include <string>
#include <utility>

namespace devicekit::detail {

DEVICEKIT_DECL void block_heap::configure(pool_upstream* upstream, std::size_t min_chunk, std::size_t max_chunk,
                                          double growth_factor) noexcept {
  upstream_ = upstream;
  min_chunk_ = min_chunk;
  max_chunk_ = max_chunk;
  growth_factor_ = growth_factor;
}

DEVICEKIT_DECL block_heap::block* block_heap::take(std::size_t n, std::size_t alignment, free_index* own,
                                                   block_state as) {
  const std::size_t need = alignment > pool_granule ? n + alignment - pool_granule : n;
  block* b = own != nullptr ? own->best_fit(need) : nullptr;
  free_index* from = own;
  if (block* r = ready_.best_fit(need); r != nullptr && (b == nullptr || r->size < b->size)) {
    b = r;
    from = &ready_;
  }
  if (b == nullptr) return nullptr;
  free_index& idx = *from;
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

DEVICEKIT_DECL void block_heap::insert_free(block* b, std::uint16_t sid, std::uint64_t seq, free_index& idx) {
  b->state = block_state::free;
  b->stream = sid;
  b->seq = seq;
  if (block* p = b->prev_phys; p != nullptr && p->state == block_state::free && p->stream == sid) {
    idx.erase(p);
    p->size += b->size;
    p->next_phys = b->next_phys;
    if (b->next_phys != nullptr) b->next_phys->prev_phys = p;
    p->seq = std::max(p->seq, b->seq);
    blocks_.recycle(b);
    b = p;
  }
  if (block* n = b->next_phys; n != nullptr && n->state == block_state::free && n->stream == sid) {
    idx.erase(n);
    b->size += n->size;
    b->next_phys = n->next_phys;
    if (n->next_phys != nullptr) n->next_phys->prev_phys = b;
    b->seq = std::max(b->seq, n->seq);
    blocks_.recycle(n);
  }
  idx.insert(b);
}

DEVICEKIT_DECL bool block_heap::grow(std::size_t need, std::size_t max_size, device dev) {
  const std::size_t room = max_size > reserved_ ? (max_size - reserved_) & ~(pool_granule - 1) : 0;
  if (need > room) return false;
  std::size_t step = 0;
  if (growth_factor_ > 1.0) {
    const double g = static_cast<double>(reserved_) * (growth_factor_ - 1.0);
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
      p = upstream_->allocate(want, pool_granule);
    } catch (const std::exception& e) {
      last_upstream_error_ = e.what();
    }
    if (p != nullptr) {
      if ((reinterpret_cast<std::uintptr_t>(p) & (pool_granule - 1)) != 0) {
        upstream_->deallocate(p, want, pool_granule);
        throw config_error(
            "the pool's upstream on " + dev.str() +
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

DEVICEKIT_DECL void block_heap::add_chunk(void* p, std::size_t bytes, bool initial) {
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
  const auto pos =
      std::lower_bound(chunk_order_.begin(), chunk_order_.end(), std::make_pair(b->addr, std::uint32_t{0}));
  chunk_order_.insert(pos, {b->addr, id});
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++upstream_allocations_;
  insert_ready(b);
}

DEVICEKIT_DECL std::pair<std::size_t, std::size_t> block_heap::release_empty_chunks(bool keep_initial) {
  std::size_t bytes = 0;
  std::size_t count = 0;
  for (std::uint32_t id = 0; id < chunks_.size(); ++id) {
    chunk& c = chunks_[id];
    if (!c.live || (keep_initial && c.initial)) continue;
    block* b = c.first;
    if (b->state != block_state::free || b->stream != 0 || b->size != c.size) continue;
    ready_.erase(b);
    blocks_.recycle(b);
    upstream_->deallocate(reinterpret_cast<void*>(c.base), c.size, pool_granule);
    reserved_ -= c.size;
    ++upstream_frees_;
    bytes += c.size;
    ++count;
    const auto pos =
        std::lower_bound(chunk_order_.begin(), chunk_order_.end(), std::make_pair(c.base, std::uint32_t{0}));
    chunk_order_.erase(pos);
    c = chunk{};
    spare_chunk_ids_.push_back(id);
  }
  return {bytes, count};
}

DEVICEKIT_DECL void block_heap::release_all() noexcept {
  for (auto& c : chunks_) {
    if (!c.live) continue;
    upstream_->deallocate(reinterpret_cast<void*>(c.base), c.size, pool_granule);
    c.live = false;
  }
  chunks_.clear();
  chunk_order_.clear();
  reserved_ = 0;
}

DEVICEKIT_DECL bool block_heap::inside_chunk(std::uintptr_t a) const noexcept {
  auto it = std::upper_bound(chunk_order_.begin(), chunk_order_.end(),
                             std::make_pair(a, std::numeric_limits<std::uint32_t>::max()));
  if (it == chunk_order_.begin()) return false;
  --it;
  const chunk& c = chunks_[it->second];
  return a >= c.base && a < c.base + c.size;
}

}  // namespace devicekit::detail
