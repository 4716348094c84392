#pragma once
/// \file
/// The definitions behind place/detail/shard_runs.hpp: the runs of a strided box.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/detail/shard_runs.hpp>

#include <algorithm>

namespace devicekit::detail {

DEVICEKIT_DECL bool box_runs(std::span<const std::size_t> src_stride, std::span<const std::size_t> dst_stride,
                             std::span<const std::size_t> begin, std::span<const std::size_t> count, std::size_t esize,
                             std::vector<shard_byte_run>& out) {
  const std::size_t rank = count.size();
  for (const auto c : count) {
    if (c == 0) return true;
  }
  if (rank == 0) {
    out.push_back({0, 0, esize});
    return true;
  }
  std::vector<std::size_t> order(rank);
  for (std::size_t d = 0; d < rank; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return src_stride[a] < src_stride[b]; });
  const std::size_t f = order[0];
  if ((src_stride[f] != 1 || dst_stride[f] != 1) && count[f] != 1) return false;
  std::size_t run = count[f];
  std::size_t merged = 1;
  while (merged < rank && src_stride[order[merged]] == run && dst_stride[order[merged]] == run) {
    run *= count[order[merged]];
    ++merged;
  }
  std::size_t runs = 1;
  for (std::size_t k = merged; k < rank; ++k) runs *= count[order[k]];
  if (runs > max_device_shard_runs) return false;
  std::size_t base = 0;
  for (std::size_t d = 0; d < rank; ++d) base += begin[d] * src_stride[d];
  std::vector<std::size_t> idx(rank, 0);
  for (;;) {
    std::size_t s = base;
    std::size_t t = 0;
    for (std::size_t k = merged; k < rank; ++k) {
      s += idx[order[k]] * src_stride[order[k]];
      t += idx[order[k]] * dst_stride[order[k]];
    }
    out.push_back({s * esize, t * esize, run * esize});
    std::size_t k = merged;
    while (k < rank && ++idx[order[k]] == count[order[k]]) {
      idx[order[k]] = 0;
      ++k;
    }
    if (k == rank) return true;
  }
}

}  // namespace devicekit::detail
