#pragma once
/// \file
/// The definitions behind memory/detail/pool_structures.hpp: the block arena, the free index and
/// the live map.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/pool_structures.hpp>

#include <bit>
#include <memory>
#include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL pool_block* block_arena::make() {
  if (free_ == nullptr) grow();
  pool_block* b = free_;
  free_ = b->next_free;
  *b = pool_block{};
  return b;
}

DEVICEKIT_DECL void block_arena::grow() {
  constexpr std::size_t n = 256;
  auto nodes = std::make_unique<pool_block[]>(n);
  for (std::size_t i = 0; i < n; ++i) nodes[i].next_free = i + 1 < n ? &nodes[i + 1] : free_;
  free_ = &nodes[0];
  storage_.push_back(std::move(nodes));
}

DEVICEKIT_DECL int free_index::bin_of(std::size_t size) noexcept {
  const std::size_t u = size / pool_granule;
  if (u < 8) return static_cast<int>(u);
  const int fl = std::bit_width(u) - 1;
  const int sl = static_cast<int>((u >> (fl - 3)) & 7u);
  return (fl - 2) * 8 + sl;
}

DEVICEKIT_DECL void free_index::insert(pool_block* b) {
  const int k = bin_of(b->size);
  auto& bin = bins_[static_cast<std::size_t>(k)];
  b->bin = static_cast<std::uint16_t>(k);
  b->slot = static_cast<std::uint32_t>(bin.size());
  bin.push_back({b->size, b});
  bitmap_[static_cast<std::size_t>(k >> 6)] |= 1ull << (k & 63);
  ++count_;
  bytes_ += b->size;
}

DEVICEKIT_DECL void free_index::erase(pool_block* b) noexcept {
  const std::size_t k = b->bin;
  auto& bin = bins_[k];
  const entry last = bin.back();
  bin[b->slot] = last;
  last.blk->slot = b->slot;
  bin.pop_back();
  if (bin.empty()) bitmap_[k >> 6] &= ~(1ull << (k & 63));
  --count_;
  bytes_ -= b->size;
}

DEVICEKIT_DECL pool_block* free_index::best_fit(std::size_t size) const noexcept {
  const int k = bin_of(size);
  if (pool_block* b = smallest_fitting(bins_[static_cast<std::size_t>(k)], size)) return b;
  const int k2 = next_nonempty(k + 1);
  return k2 < 0 ? nullptr : smallest_fitting(bins_[static_cast<std::size_t>(k2)], size);
}

DEVICEKIT_DECL pool_block* free_index::largest() const noexcept {
  for (int w = static_cast<int>(bitmap_.size()) - 1; w >= 0; --w) {
    const std::uint64_t bits = bitmap_[static_cast<std::size_t>(w)];
    if (bits == 0) continue;
    const int k = w * 64 + 63 - std::countl_zero(bits);
    const entry* best = nullptr;
    for (const entry& e : bins_[static_cast<std::size_t>(k)]) {
      if (best == nullptr || e.size > best->size) best = &e;
    }
    return best->blk;
  }
  return nullptr;
}

DEVICEKIT_DECL pool_block* free_index::smallest_fitting(const std::vector<entry>& bin, std::size_t size) noexcept {
  const entry* best = nullptr;
  const std::size_t n = bin.size();
  const std::size_t stop = n > scan_limit ? n - scan_limit : 0;
  for (std::size_t i = n; i-- > stop;) {
    const entry& e = bin[i];
    if (e.size >= size && (best == nullptr || e.size < best->size)) {
      best = &e;
      if (e.size == size) break;
    }
  }
  return best != nullptr ? best->blk : nullptr;
}

DEVICEKIT_DECL int free_index::next_nonempty(int from) const noexcept {
  if (from >= bin_count) return -1;
  std::size_t w = static_cast<std::size_t>(from >> 6);
  std::uint64_t bits = bitmap_[w] & (~0ull << (from & 63));
  while (bits == 0) {
    if (++w == bitmap_.size()) return -1;
    bits = bitmap_[w];
  }
  return static_cast<int>(w * 64) + std::countr_zero(bits);
}

DEVICEKIT_DECL live_record* live_map::find(std::uintptr_t key) noexcept {
  for (std::size_t i = home(key);; i = (i + 1) & mask_) {
    live_record& r = slots_[i];
    if (r.key == key) return &r;
    if (r.key == 0) return nullptr;
  }
}

DEVICEKIT_DECL void live_map::erase(live_record* r) noexcept {
  std::size_t i = static_cast<std::size_t>(r - slots_.data());
  std::size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    if (slots_[j].key == 0) break;
    const std::size_t k = home(slots_[j].key);
    // Entry j may move into the hole at i unless its home lies cyclically in (i, j].
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = live_record{};
  --size_;
}

DEVICEKIT_DECL void live_map::rehash(std::size_t capacity) {
  std::vector<live_record> old = std::move(slots_);
  slots_.assign(capacity, live_record{});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
  for (const auto& r : old) {
    if (r.key != 0) place(r);
  }
}

}  // namespace devicekit::detail
