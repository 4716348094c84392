#pragma once
/// \file
/// The checks device_manager::distribute makes on a custom scheme's plan before it places a tree
/// by it: row shares must cover the batch in order, without padding, and only a scheme that
/// declares `splits_batch` may give them. validate_plan (distribute/scheme.hpp) checks what holds
/// for every plan; these are what placing by rows needs on top. Their text is in
/// manager/detail/errors.hpp.
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/manager/detail/errors.hpp>

#include <cstddef>
#include <string_view>
#include <vector>

namespace devicekit::detail {

/// The row count of each share of `plan`, in plan order, for a scheme that declares
/// splits_batch: share i must start where share i - 1 ends, with no whole copy and no padding,
/// and the shares must sum to the batch (config_error otherwise).
[[nodiscard]] DEVICEKIT_DECL std::vector<std::size_t> row_share_counts(const distribution_plan& plan,
                                                                       const tree_summary& summary,
                                                                       std::string_view scheme);

/// A scheme that does not declare splits_batch may only give whole copies (config_error if one
/// of its shares is a row share).
inline void check_whole_shares(bool whole, std::string_view scheme) {
  if (!whole) throw row_shares_undeclared_error(scheme);
}

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/manager/detail/row_shares.ipp>
#endif
