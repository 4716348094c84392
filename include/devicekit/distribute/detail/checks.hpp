#pragma once
/// \file
/// What every collective checks before data moves, the same way on every rank: the structure
/// summaries of all ranks (verify_structure), the root, reducible element types, and the sizes
/// of gathered and scattered leaves.
#include <devicekit/core/error.hpp>
#include <devicekit/distribute/errors.hpp>
#include <devicekit/distribute/leaf_span.hpp>
#include <devicekit/distribute/options.hpp>
#include <devicekit/distribute/structure.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL std::string hex(std::uint64_t v);

/// Throws structure_mismatch_error (on every rank) when the summaries differ across ranks, and
/// config_error (on every rank) when a rank reported a problem with its own arguments.
template <class B>
void verify_structure(B& b, std::string_view operation, std::vector<structure_summary> mine,
                      std::span<const tree_info> info, const collective_options& o) {
  std::string my_problem;
  for (std::size_t p = 0; p < mine.size() && p < info.size(); ++p) {
    structure_hasher h;
    h.add(mine[p].hash);
    h.add(info[p].tag);
    mine[p].hash = h.value();
    mine[p].problem = info[p].problem.empty() ? 0 : 1;
    if (!info[p].problem.empty() && my_problem.empty()) my_problem = info[p].problem;
  }
  if (!o.check_structure) {
    if (!my_problem.empty()) throw config_error(std::string(operation) + ": " + my_problem);
    return;
  }
  std::vector<structure_summary> all(static_cast<std::size_t>(b.size()));
  b.exchange(mine.data(), sizeof(structure_summary), all.data());
  std::string bad;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].problem != 0) bad += (bad.empty() ? "" : ",") + std::to_string(r);
  }
  if (!bad.empty()) {
    if (!my_problem.empty()) {
      throw config_error(std::string(operation) + " on rank " + std::to_string(b.rank(0)) + ": " + my_problem +
                         "; nothing was sent");
    }
    throw config_error(std::string(operation) + " on rank " + std::to_string(b.rank(0)) + ": rank(s) " + bad +
                       " passed leaves they cannot send (their own error says which); nothing was sent");
  }
  if (std::all_of(all.begin(), all.end(), [&](const auto& s) { return s == all.front(); })) return;
  // Every rank holds the same table, so every rank throws the same message.
  std::string msg = "the ranks passed different trees or arguments, so nothing was sent:";
  std::vector<bool> done(all.size(), false);
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (done[i]) continue;
    std::string ranks;
    std::size_t n = 0;
    for (std::size_t j = i; j < all.size(); ++j) {
      if (!done[j] && all[j] == all[i]) {
        done[j] = true;
        // append() rather than operator+ on temporaries: g++ 12 at -O3 warns (-Wrestrict) about
        // the latter, a false positive that -Werror would turn into an error for our users.
        if (!ranks.empty()) ranks.append(",");
        ranks.append(std::to_string(j));
        ++n;
      }
    }
    msg.append(i == 0 ? " " : "; ").append(n == 1 ? "rank " : "ranks ").append(ranks).append(": ");
    msg.append(std::to_string(all[i].leaf_count)).append(" leaves, ").append(std::to_string(all[i].total_bytes));
    msg.append(" bytes, structure ").append(hex(all[i].hash));
    if (all[i].root >= 0) msg += ", root " + std::to_string(all[i].root);
  }
  throw structure_mismatch_error(operation, b.rank(0), msg);
}

template <class B, class Span>
void check_reducible(B& b, std::string_view operation, std::span<const Span> leaves) {
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const element_type t = leaves[i].type;
    if (t == element_type::opaque) {
      throw config_error(std::string(operation) + ": leaf " + std::to_string(i) +
                         " holds opaque elements (bool, a struct, long double): such leaves can be broadcast, "
                         "gathered or scattered, not reduced");
    }
    if (!b.can_reduce(t)) {
      throw config_error(std::string(operation) + ": the " + std::string(b.name()) + " backend cannot reduce " +
                         std::string(to_string(t)) + " leaves (leaf " + std::to_string(i) + ")");
    }
  }
}

template <class B>
void check_root(B& b, std::string_view operation, int root) {
  if (root < 0 || root >= b.size()) {
    throw config_error(std::string(operation) + ": root " + std::to_string(root) + " is not a rank of a " +
                       std::to_string(b.size()) + "-rank communicator");
  }
}

template <class Span>
std::vector<const_leaf_span> as_const(std::span<const Span> s) {
  return {s.begin(), s.end()};
}

template <class Span>
void types_and_counts(std::span<const Span> leaves, std::vector<element_type>& types,
                      std::vector<std::size_t>& counts) {
  types.clear();
  counts.clear();
  for (const auto& l : leaves) {
    types.push_back(l.type);
    counts.push_back(l.count);
  }
}

/// The summary of an (input, output) pair of leaf lists.
DEVICEKIT_DECL structure_summary summarize_pair(std::span<const const_leaf_span> in, std::span<const leaf_span> out);

/// `big` = `small` x ranks, leaf by leaf (all_gather: out is big; reduce_scatter: in is big).
DEVICEKIT_DECL void check_scaled(std::string_view operation, std::span<const const_leaf_span> small,
                                 std::span<const const_leaf_span> big, int ranks, std::string_view small_name,
                                 std::string_view big_name);

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/distribute/detail/checks.ipp>
#endif
