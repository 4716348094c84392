#pragma once
/// \file
/// The definitions behind place/split.hpp: the balanced split and the row-count check.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/split.hpp>

#include <devicekit/core/error.hpp>

#include <limits>
#include <string>

namespace devicekit {

DEVICEKIT_DECL row_range balanced_rows(std::size_t rows, std::size_t parts, std::size_t index) {
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

DEVICEKIT_DECL std::vector<std::size_t> balanced_row_counts(std::size_t rows, std::size_t parts) {
  if (parts == 0)
    throw config_error("balanced_row_counts: cannot split " + std::to_string(rows) + " rows into zero parts");
  std::vector<std::size_t> out(parts);
  for (std::size_t i = 0; i < parts; ++i) out[i] = balanced_rows(rows, parts, i).count;
  return out;
}

DEVICEKIT_DECL void check_row_counts(std::span<const std::size_t> counts, std::size_t parts, std::size_t rows,
                                     std::string_view what) {
  std::string listed;
  std::size_t sum = 0;
  bool overflows = false;  // counts whose sum wraps around (a -1 read into a size_t) cover no batch
  for (const std::size_t c : counts) {
    listed += (listed.empty() ? "" : ", ") + std::to_string(c);
    overflows = overflows || c > std::numeric_limits<std::size_t>::max() - sum;
    sum += c;
  }
  if (counts.size() != parts) {
    throw config_error(std::string(what) + ": " + std::to_string(counts.size()) + " row count(s) given (" + listed +
                       ") for " + std::to_string(parts) + " part(s); give one count per device");
  }
  if (overflows || sum != rows) {
    throw config_error(std::string(what) + ": the row counts " + listed + " sum to " +
                       (overflows ? std::string("more than SIZE_MAX") : std::to_string(sum)) + " but the batch has " +
                       std::to_string(rows) + " rows; the counts must cover every row once");
  }
}

}  // namespace devicekit
