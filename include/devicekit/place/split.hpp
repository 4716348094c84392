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
[[nodiscard]] inline row_range balanced_rows(std::size_t rows, std::size_t parts, std::size_t index) {
  if (parts == 0) throw config_error("balanced_rows: cannot split " + std::to_string(rows) + " rows into zero parts");
  if (index >= parts) {
    throw config_error("balanced_rows: part " + std::to_string(index) + " asked of a split into " +
                       std::to_string(parts) + " parts (valid: 0 to " + std::to_string(parts - 1) + ")");
  }
  const std::size_t base = rows / parts;
  const std::size_t extra = rows % parts;  // the first `extra` parts hold one more row
  const std::size_t begin = index * base + (index < extra ? index : extra);
  return {begin, base + (index < extra ? 1 : 0)};
}

/// The row counts of all parts: balanced_rows(rows, parts, i).count for each i (10 over 4:
/// 3, 3, 2, 2).
[[nodiscard]] inline std::vector<std::size_t> balanced_row_counts(std::size_t rows, std::size_t parts) {
  if (parts == 0)
    throw config_error("balanced_row_counts: cannot split " + std::to_string(rows) + " rows into zero parts");
  std::vector<std::size_t> out(parts);
  for (std::size_t i = 0; i < parts; ++i) out[i] = balanced_rows(rows, parts, i).count;
  return out;
}

/// Checks row counts given for a batch (a custom split): one per part, summing to the batch.
/// Throws config_error, naming `what`, the counts and the batch, otherwise.
inline void check_row_counts(std::span<const std::size_t> counts, std::size_t parts, std::size_t rows,
                             std::string_view what) {
  std::string listed;
  std::size_t sum = 0;
  for (const std::size_t c : counts) {
    listed += (listed.empty() ? "" : ", ") + std::to_string(c);
    sum += c;
  }
  if (counts.size() != parts) {
    throw config_error(std::string(what) + ": " + std::to_string(counts.size()) + " row count(s) given (" + listed +
                       ") for " + std::to_string(parts) + " part(s); give one count per device");
  }
  if (sum != rows) {
    throw config_error(std::string(what) + ": the row counts " + listed + " sum to " + std::to_string(sum) +
                       " but the batch has " + std::to_string(rows) + " rows; the counts must cover every row once");
  }
}

}  // namespace devicekit
