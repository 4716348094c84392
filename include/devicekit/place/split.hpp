#pragma once
/// \file
/// How `rows` split into `parts` when they do not divide evenly: the balanced split of
/// numpy.array_split. Sizes differ by at most one and the first `rows % parts` parts get the
/// extra row, so 9 rows over 4 parts are 3, 2, 2, 2 and no part is empty while rows >= parts
/// (2 rows over 4 parts: 1, 1, 0, 0). Every place that splits a batch (the ragged policy of
/// place/shard.hpp, the shard_batch scheme, split_counts for scatter) computes it here, so a
/// shard's rows and the plan that describes them always agree.
#include <devicekit/core/error.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devicekit {

/// Rows [begin, begin + count) of a batch.
struct row_range {
  std::size_t begin = 0;
  std::size_t count = 0;

  friend bool operator==(const row_range&, const row_range&) = default;
};

/// Part `index` of `rows` split over `parts` (numpy.array_split). config_error for zero parts or
/// an index past the last part.
[[nodiscard]] DEVICEKIT_DECL row_range balanced_rows(std::size_t rows, std::size_t parts, std::size_t index);

/// The row counts of all parts: balanced_rows(rows, parts, i).count for each i (10 over 4:
/// 3, 3, 2, 2).
[[nodiscard]] DEVICEKIT_DECL std::vector<std::size_t> balanced_row_counts(std::size_t rows, std::size_t parts);

/// Checks row counts given for a batch (a custom split): one per part, summing to the batch.
/// Throws config_error, naming `what`, the counts and the batch, otherwise.
DEVICEKIT_DECL void check_row_counts(std::span<const std::size_t> counts, std::size_t parts, std::size_t rows,
                                     std::string_view what);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/split.ipp>
#endif
