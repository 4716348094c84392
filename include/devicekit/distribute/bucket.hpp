#pragma once
/// \file
/// Bucketing: many small leaves are packed into buckets so that they cost one collective per
/// bucket instead of one per leaf (PyTorch DDP does the same with 25 MiB buckets for gradients
/// and 250 MiB for the parameter broadcast). A leaf as large as a bucket travels alone and in
/// place, with no staging copy; so does any bucket that ends up holding one leaf.
///
/// The plan depends only on the leaves' types and sizes, which the ranks have already agreed on
/// (structure check), so every rank computes the same buckets in the same order.
#include <devicekit/core/element_type.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace devicekit {

/// DDP's default gradient bucket.
inline constexpr std::size_t default_bucket_bytes = std::size_t{25} << 20;

/// One bucket: leaves (indices into the caller's list) of one element type (or opaque bytes),
/// `count` elements in total.
struct bucket {
  element_type type = element_type::opaque;
  std::vector<std::size_t> leaves;
  std::size_t count = 0;

  [[nodiscard]] std::size_t bytes() const noexcept { return count * size_of(type); }
  /// A one-leaf bucket is sent straight from (and into) the leaf.
  [[nodiscard]] bool direct() const noexcept { return leaves.size() == 1; }
};

/// Plans buckets for leaves of `types[i]` with `counts[i]` elements each. `by_type` keeps one
/// element type per bucket (reductions need it); otherwise leaves are packed as bytes (opaque
/// buckets whose count is in bytes). Leaves with no elements are left out: nothing to send.
/// `bucket_bytes` 0 means one leaf per bucket (no coalescing).
[[nodiscard]] DEVICEKIT_DECL std::vector<bucket> plan_buckets(std::span<const element_type> types,
                                                              std::span<const std::size_t> counts,
                                                              std::size_t bucket_bytes, bool by_type);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/distribute/bucket.ipp>
#endif
