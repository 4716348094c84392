#pragma once
/// \file
/// The definitions behind memory/detail/slab_cache.hpp: slots taken and released, slabs made and
/// destroyed.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/slab_cache.hpp>

#include <memory>

namespace devicekit::detail {

DEVICEKIT_DECL slab_cache::slot slab_cache::take(int cls, block_heap& heap) {
  class_state& c = classes_[static_cast<std::size_t>(cls)];
  slab* s = c.partial;
  if (s == nullptr) {
    s = make_slab(cls, heap);
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
  return {s->base + static_cast<std::uintptr_t>(idx) * s->slot_size, s};
}

DEVICEKIT_DECL void slab_cache::release_slot(slab* s, std::uintptr_t addr, block_heap& heap) {
  s->free_slots.push_back(static_cast<std::uint32_t>((addr - s->base) / s->slot_size));
  --s->used;
  if (!s->in_partial) partial_push(s);
  if (s->used == 0) {
    auto& c = classes_[s->cls];
    if (c.empty == nullptr) {
      c.empty = s;
    } else if (c.empty != s) {
      destroy_slab(s, heap);
    }
  }
}

DEVICEKIT_DECL std::size_t slab_cache::largest_ready_slot() const noexcept {
  for (std::size_t c = classes_.size(); c-- > 0;) {
    if (const slab* sl = classes_[c].partial; sl != nullptr) return sl->slot_size;
  }
  return 0;
}

DEVICEKIT_DECL slab_cache::slab* slab_cache::make_slab(int cls, block_heap& heap) {
  const std::size_t bytes = size_classes::slab_bytes(cls);
  block_heap::block* b = heap.take(bytes, pool_granule, nullptr, block_state::slab);
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
  s->slot_size = static_cast<std::uint32_t>(size_classes::slot_size(cls));
  s->capacity = static_cast<std::uint32_t>(bytes / s->slot_size);
  s->used = 0;
  s->bump = 0;
  s->cls = static_cast<std::uint16_t>(cls);
  s->free_slots.clear();
  partial_push(s);
  ++slab_count_;
  return s;
}

DEVICEKIT_DECL void slab_cache::destroy_slab(slab* s, block_heap& heap) {
  auto& c = classes_[s->cls];
  if (c.empty == s) c.empty = nullptr;
  if (s->in_partial) partial_remove(s);
  block_heap::block* b = s->blk;
  s->blk = nullptr;
  s->free_slots.clear();
  spare_slabs_.push_back(s);
  --slab_count_;
  heap.insert_ready(b);
}

DEVICEKIT_DECL void slab_cache::partial_push(slab* s) noexcept {
  auto& c = classes_[s->cls];
  s->prev = nullptr;
  s->next = c.partial;
  if (c.partial != nullptr) c.partial->prev = s;
  c.partial = s;
  s->in_partial = true;
}

DEVICEKIT_DECL void slab_cache::partial_remove(slab* s) noexcept {
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

}  // namespace devicekit::detail
