#pragma once
/// \file
/// The definitions behind distribute/bucket.hpp: planning the buckets of a collective.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/distribute/bucket.hpp>

#include <optional>

namespace devicekit {

DEVICEKIT_DECL std::vector<bucket> plan_buckets(std::span<const element_type> types,
                                                std::span<const std::size_t> counts, std::size_t bucket_bytes,
                                                bool by_type) {
  std::vector<bucket> out;
  // The bucket still open for each element type (one when !by_type).
  std::optional<std::size_t> open[element_type_count];
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (counts[i] == 0) continue;
    const element_type t = by_type ? types[i] : element_type::opaque;
    const std::size_t n = by_type ? counts[i] : counts[i] * size_of(types[i]);
    const std::size_t bytes = n * size_of(t);
    if (bytes >= bucket_bytes) {
      out.push_back({t, {i}, n});
      continue;
    }
    auto& slot = open[static_cast<std::size_t>(t)];
    if (slot && out[*slot].bytes() + bytes > bucket_bytes) slot.reset();
    if (!slot) {
      slot = out.size();
      out.push_back({t, {}, 0});
    }
    out[*slot].leaves.push_back(i);
    out[*slot].count += n;
  }
  return out;
}

}  // namespace devicekit
