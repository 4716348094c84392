#pragma once
/// \file
/// The definitions behind manager/detail/row_shares.hpp: the row counts of a plan that splits the batch.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/manager/detail/row_shares.hpp>

namespace devicekit::detail {

DEVICEKIT_DECL std::vector<std::size_t> row_share_counts(const distribution_plan& plan, const tree_summary& summary,
                                                         std::string_view scheme) {
  std::vector<std::size_t> counts;
  std::size_t next = 0;
  for (std::size_t i = 0; i < plan.shares.size(); ++i) {
    const auto& share = plan.shares[i];
    if (share.whole || share.begin != next || share.padding != 0) {
      throw row_share_out_of_order_error(scheme, i, share, next);
    }
    counts.push_back(share.count);
    next += share.count;
  }
  if (next != summary.batch) throw row_shares_sum_error(scheme, next, summary.batch);
  return counts;
}

}  // namespace devicekit::detail
