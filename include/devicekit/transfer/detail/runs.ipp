#pragma once
/// \file
/// The definitions behind transfer/detail/runs.hpp: merging items into runs.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/runs.hpp>

namespace devicekit::detail {

DEVICEKIT_DECL std::vector<copy_run> coalesce(std::span<const copy_item> items) {
  std::vector<copy_run> runs;
  const copy_item* prev = nullptr;
  for (const auto& it : items) {
    if (it.bytes == 0) continue;
    if (prev != nullptr && it.src_owner != nullptr && it.src_owner == prev->src_owner &&
        it.src_device == prev->src_device && it.src >= prev->src + prev->bytes && it.dst > prev->dst &&
        it.src - runs.back().src == it.dst - runs.back().dst) {
      runs.back().bytes = static_cast<std::size_t>(it.dst + it.bytes - runs.back().dst);
    } else {
      runs.push_back({it.src, it.src_device, it.dst, it.bytes});
    }
    prev = &it;
  }
  return runs;
}

}  // namespace devicekit::detail
