#pragma once
/// \file
/// What a collective is called with besides its leaves: the reduction (`reduce_op`), how the
/// communicator runs it (`collective_options`), and what the tree layer adds (`tree_info`).
#include <devicekit/distribute/bucket.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace devicekit {

/// Reductions. `average` is the sum divided by the number of ranks; for integer leaves the
/// division truncates, as NCCL's ncclAvg does.
enum class reduce_op : std::uint8_t { sum, average, min, max, product };

[[nodiscard]] constexpr std::string_view to_string(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::average: return "average";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    default: return "product";
  }
}

/// How a communicator runs its collectives.
struct collective_options {
  /// Leaves are coalesced into buckets of at most this many bytes (a larger leaf goes alone).
  /// 0: one collective per leaf.
  std::size_t bucket_bytes = default_bucket_bytes;
  /// Compare the structure across ranks before each collective (one small all-gather; on NCCL
  /// also a wait for the stream, since the host reads the answer). Turning it off saves that
  /// round trip, and turns a mismatched tree into a hang or garbage.
  bool check_structure = true;
};

/// What the tree layer adds to a call, per local rank: a hash of the tree's structure (node
/// kinds, names, lengths) mixed into the summary, and a problem found locally (a leaf in memory
/// the backend cannot use). A problem on any rank makes every rank throw before any data moves.
struct tree_info {
  std::uint64_t tag = 0;
  std::string problem;
};

}  // namespace devicekit
