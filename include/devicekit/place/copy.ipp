#pragma once
/// \file
/// The definitions behind place/copy.hpp: grouping host items into runs of adjacent destinations.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/copy.hpp>

#include <algorithm>
#include <cstddef>

namespace devicekit::detail {

DEVICEKIT_DECL std::vector<std::vector<copy_item>> adjacent_runs(std::vector<owned_item> items) {
  std::sort(items.begin(), items.end(),
            [](const owned_item& a, const owned_item& b) { return a.item.dst < b.item.dst; });
  std::vector<std::vector<copy_item>> runs;
  const owned_item* prev = nullptr;
  for (const auto& it : items) {
    if (it.item.bytes == 0) continue;
    const bool joins =
        prev != nullptr && it.dst_owner != nullptr && it.dst_owner == prev->dst_owner &&
        it.item.dst >= prev->item.dst + prev->item.bytes &&
        it.item.dst - (prev->item.dst + prev->item.bytes) < static_cast<std::ptrdiff_t>(placement_alignment);
    if (!joins) runs.emplace_back();
    runs.back().push_back(it.item);
    prev = &it;
  }
  return runs;
}

}  // namespace devicekit::detail
