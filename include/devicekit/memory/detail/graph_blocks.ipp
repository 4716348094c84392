#pragma once
/// \file
/// The definitions behind memory/detail/graph_blocks.hpp: per-capture live bytes and peaks.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/graph_blocks.hpp>

#include <algorithm>

namespace devicekit::detail {

DEVICEKIT_DECL const graph_blocks::capture_use* graph_blocks::use_of(unsigned long long id) const noexcept {
  for (const capture_use& c : captures_) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

DEVICEKIT_DECL std::size_t graph_blocks::growth_for(unsigned long long id, std::size_t bytes) const noexcept {
  const capture_use* c = use_of(id);
  const std::size_t live = c != nullptr ? c->live : 0;
  const std::size_t peak = c != nullptr ? c->peak : 0;
  return live + bytes > peak ? live + bytes - peak : 0;
}

DEVICEKIT_DECL void graph_blocks::add(const void* p, std::size_t bytes, unsigned long long id) {
  capture_use* c = use_of(id);
  if (c == nullptr) c = &captures_.emplace_back(capture_use{id, 0, 0});
  blocks_[reinterpret_cast<std::uintptr_t>(p)] = {bytes, id, false};
  c->live += bytes;
  if (c->live > c->peak) {
    reserved_ += c->live - c->peak;
    c->peak = c->live;
  }
}

DEVICEKIT_DECL void graph_blocks::remove(const void* p) noexcept {
  const auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == blocks_.end()) return;
  if (!it->second.orphaned) {
    if (capture_use* c = use_of(it->second.id)) c->live -= it->second.bytes;
  }
  blocks_.erase(it);
}

DEVICEKIT_DECL void graph_blocks::release(unsigned long long id) noexcept {
  for (auto& [addr, b] : blocks_) {
    if (b.id == id) b.orphaned = true;
  }
  const auto it = std::find_if(captures_.begin(), captures_.end(), [id](const capture_use& c) { return c.id == id; });
  if (it == captures_.end()) return;
  reserved_ -= it->peak;
  captures_.erase(it);
}

DEVICEKIT_DECL std::size_t graph_blocks::live(unsigned long long id) const noexcept {
  const capture_use* c = use_of(id);
  return c != nullptr ? c->live : 0;
}

DEVICEKIT_DECL std::size_t graph_blocks::peak(unsigned long long id) const noexcept {
  const capture_use* c = use_of(id);
  return c != nullptr ? c->peak : 0;
}

}  // namespace devicekit::detail
