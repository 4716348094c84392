#pragma once
/// \file
/// The collectives on flat leaves, written once over a backend (MPI for host memory, NCCL for
/// device memory). Each operation:
///   1. compares a structure summary across all ranks (one small all-gather) and, when the
///      ranks disagree, throws structure_mismatch_error on every rank: no rank is left waiting
///      in a collective that the others never join;
///   2. checks the arguments (the same checks on every rank, on data the ranks agreed on, so the
///      same verdict everywhere);
///   3. plans buckets (bucket.hpp) and runs one backend collective per bucket; one-leaf buckets
///      go straight from and into the leaf, others are packed into a staging buffer that the
///      backend keeps between calls.
///
/// A backend may drive several local participants (NCCL's ncclCommInitAll: one process, one
/// rank per GPU); then every leaf list comes once per participant, and the calls of one bucket
/// are issued between group_begin() and group_end() (ncclGroupStart/End).
///
/// Backend interface (see mpi.hpp and nccl.hpp for the two models):
///   int participants(); int size(); int rank(int p);  std::string_view name();
///   bool can_reduce(element_type);
///   void group_begin(); void group_end();
///   void* scratch(int p, int slot, std::size_t bytes);          // slot 0 or 1
///   void copy(int p, void* dst, const void* src, std::size_t bytes);
///   void exchange(const void* mine, std::size_t bytes_each, void* all);   // host memory
///   void broadcast(int p, void* buf, std::size_t count, element_type, int root);
///   void all_reduce(int p, const void* s, void* r, std::size_t count, element_type, reduce_op);
///   void all_gather(int p, const void* s, void* r, std::size_t count, element_type);
///   void reduce_scatter(int p, const void* s, void* r, std::size_t recv_count, element_type, reduce_op);
///   void scatter(int p, const void* s, const std::size_t* bytes, const std::size_t* displs,
///                void* r, std::size_t recv_bytes, int root);
///   void finish(std::string_view operation);                    // wait, poll errors
#include <devicekit/distribute/bucket.hpp>
#include <devicekit/distribute/leaf.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devicekit {

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

namespace detail {

template <class T>
using per_participant = std::span<const std::span<const T>>;

inline std::byte* byte_at(void* p, std::size_t off) noexcept { return static_cast<std::byte*>(p) + off; }
inline const std::byte* byte_at(const void* p, std::size_t off) noexcept {
  return static_cast<const std::byte*>(p) + off;
}

inline std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

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

template <class B>
void check_reducible(B& b, std::string_view operation, std::span<const const_leaf_span> leaves) {
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

// --- broadcast ------------------------------------------------------------------------------------

template <class B>
void broadcast(B& b, per_participant<leaf_span> parts, int root, const collective_options& o,
               std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "broadcast";
  const int np = b.participants();
  std::vector<structure_summary> mine;
  for (int p = 0; p < np; ++p) {
    mine.push_back(summarize(parts[static_cast<std::size_t>(p)]));
    mine.back().root = root;
  }
  verify_structure(b, op, std::move(mine), info, o);
  check_root(b, op, root);
  std::vector<element_type> types;
  std::vector<std::size_t> counts;
  types_and_counts(parts[0], types, counts);
  for (const auto& bk : plan_buckets(types, counts, o.bucket_bytes, false)) {
    if (bk.direct()) {
      b.group_begin();
      for (int p = 0; p < np; ++p) {
        const auto& l = parts[static_cast<std::size_t>(p)][bk.leaves[0]];
        b.broadcast(p, l.data, l.bytes(), element_type::opaque, root);
      }
      b.group_end();
      continue;
    }
    std::vector<void*> buf(static_cast<std::size_t>(np));
    for (int p = 0; p < np; ++p) {
      buf[static_cast<std::size_t>(p)] = b.scratch(p, 0, bk.bytes());
      if (b.rank(p) != root) continue;
      std::size_t off = 0;
      for (auto i : bk.leaves) {
        const auto& l = parts[static_cast<std::size_t>(p)][i];
        b.copy(p, byte_at(buf[static_cast<std::size_t>(p)], off), l.data, l.bytes());
        off += l.bytes();
      }
    }
    b.group_begin();
    for (int p = 0; p < np; ++p) b.broadcast(p, buf[static_cast<std::size_t>(p)], bk.bytes(), element_type::opaque, root);
    b.group_end();
    for (int p = 0; p < np; ++p) {
      if (b.rank(p) == root) continue;
      std::size_t off = 0;
      for (auto i : bk.leaves) {
        const auto& l = parts[static_cast<std::size_t>(p)][i];
        b.copy(p, l.data, byte_at(buf[static_cast<std::size_t>(p)], off), l.bytes());
        off += l.bytes();
      }
    }
  }
  b.finish(op);
}

// --- all-reduce -------------------------------------------------------------------------------------

template <class B>
void all_reduce(B& b, per_participant<leaf_span> parts, reduce_op rop, const collective_options& o,
                std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "all_reduce";
  const int np = b.participants();
  std::vector<structure_summary> mine;
  for (int p = 0; p < np; ++p) mine.push_back(summarize(parts[static_cast<std::size_t>(p)]));
  verify_structure(b, op, std::move(mine), info, o);
  check_reducible(b, op, as_const(parts[0]));
  std::vector<element_type> types;
  std::vector<std::size_t> counts;
  types_and_counts(parts[0], types, counts);
  for (const auto& bk : plan_buckets(types, counts, o.bucket_bytes, true)) {
    if (bk.direct()) {
      b.group_begin();
      for (int p = 0; p < np; ++p) {
        const auto& l = parts[static_cast<std::size_t>(p)][bk.leaves[0]];
        b.all_reduce(p, l.data, l.data, l.count, l.type, rop);
      }
      b.group_end();
      continue;
    }
    std::vector<void*> buf(static_cast<std::size_t>(np));
    for (int p = 0; p < np; ++p) {
      buf[static_cast<std::size_t>(p)] = b.scratch(p, 0, bk.bytes());
      std::size_t off = 0;
      for (auto i : bk.leaves) {
        const auto& l = parts[static_cast<std::size_t>(p)][i];
        b.copy(p, byte_at(buf[static_cast<std::size_t>(p)], off), l.data, l.bytes());
        off += l.bytes();
      }
    }
    b.group_begin();
    for (int p = 0; p < np; ++p) {
      void* x = buf[static_cast<std::size_t>(p)];
      b.all_reduce(p, x, x, bk.count, bk.type, rop);
    }
    b.group_end();
    for (int p = 0; p < np; ++p) {
      std::size_t off = 0;
      for (auto i : bk.leaves) {
        const auto& l = parts[static_cast<std::size_t>(p)][i];
        b.copy(p, l.data, byte_at(buf[static_cast<std::size_t>(p)], off), l.bytes());
        off += l.bytes();
      }
    }
  }
  b.finish(op);
}

// --- all-gather and reduce-scatter ---------------------------------------------------------------

/// The summary of an (input, output) pair of leaf lists.
inline structure_summary summarize_pair(std::span<const const_leaf_span> in, std::span<const leaf_span> out) {
  structure_summary s = summarize(in);
  const structure_summary t = summarize(out);
  structure_hasher h;
  h.add(s.hash);
  h.add(t.hash);
  s.hash = h.value();
  s.total_bytes += t.total_bytes;
  return s;
}

/// `big` = `small` x ranks, leaf by leaf (all_gather: out is big; reduce_scatter: in is big).
inline void check_scaled(std::string_view operation, std::span<const const_leaf_span> small,
                         std::span<const const_leaf_span> big, int ranks, std::string_view small_name,
                         std::string_view big_name) {
  if (small.size() != big.size()) {
    throw config_error(std::string(operation) + ": " + std::string(small_name) + " has " +
                       std::to_string(small.size()) + " leaves, " + std::string(big_name) + " has " +
                       std::to_string(big.size()));
  }
  for (std::size_t i = 0; i < small.size(); ++i) {
    if (small[i].type != big[i].type || big[i].count != small[i].count * static_cast<std::size_t>(ranks)) {
      throw config_error(std::string(operation) + ": leaf " + std::to_string(i) + " of " + std::string(big_name) +
                         " must hold " + std::to_string(ranks) + " x " + std::string(small_name) + " leaf (" +
                         std::to_string(small[i].count) + " " + std::string(to_string(small[i].type)) +
                         "), it holds " + std::to_string(big[i].count) + " " + std::string(to_string(big[i].type)));
    }
  }
}

template <class B>
void all_gather(B& b, per_participant<const_leaf_span> ins, per_participant<leaf_span> outs,
                const collective_options& o, std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "all_gather";
  const int np = b.participants();
  const int n = b.size();
  std::vector<structure_summary> mine;
  for (int p = 0; p < np; ++p) {
    mine.push_back(summarize_pair(ins[static_cast<std::size_t>(p)], outs[static_cast<std::size_t>(p)]));
  }
  verify_structure(b, op, std::move(mine), info, o);
  check_scaled(op, ins[0], as_const(outs[0]), n, "the input", "the output");
  std::vector<element_type> types;
  std::vector<std::size_t> counts;
  types_and_counts(ins[0], types, counts);
  for (const auto& bk : plan_buckets(types, counts, o.bucket_bytes, false)) {
    if (bk.direct()) {
      // The output is rank-major, exactly the layout of a one-buffer all-gather.
      b.group_begin();
      for (int p = 0; p < np; ++p) {
        const auto& in = ins[static_cast<std::size_t>(p)][bk.leaves[0]];
        b.all_gather(p, in.data, outs[static_cast<std::size_t>(p)][bk.leaves[0]].data, in.bytes(),
                     element_type::opaque);
      }
      b.group_end();
      continue;
    }
    const std::size_t chunk = bk.bytes();
    std::vector<void*> send(static_cast<std::size_t>(np)), recv(static_cast<std::size_t>(np));
    for (int p = 0; p < np; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      send[pi] = b.scratch(p, 0, chunk);
      recv[pi] = b.scratch(p, 1, chunk * static_cast<std::size_t>(n));
      std::size_t off = 0;
      for (auto i : bk.leaves) {
        b.copy(p, byte_at(send[pi], off), ins[pi][i].data, ins[pi][i].bytes());
        off += ins[pi][i].bytes();
      }
    }
    b.group_begin();
    for (int p = 0; p < np; ++p) {
      b.all_gather(p, send[static_cast<std::size_t>(p)], recv[static_cast<std::size_t>(p)], chunk, element_type::opaque);
    }
    b.group_end();
    for (int p = 0; p < np; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      for (int r = 0; r < n; ++r) {
        std::size_t off = 0;
        for (auto i : bk.leaves) {
          const std::size_t lb = ins[pi][i].bytes();
          b.copy(p, byte_at(outs[pi][i].data, static_cast<std::size_t>(r) * lb),
                 byte_at(recv[pi], static_cast<std::size_t>(r) * chunk + off), lb);
          off += lb;
        }
      }
    }
  }
  b.finish(op);
}

template <class B>
void reduce_scatter(B& b, per_participant<const_leaf_span> ins, per_participant<leaf_span> outs, reduce_op rop,
                    const collective_options& o, std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "reduce_scatter";
  const int np = b.participants();
  const int n = b.size();
  std::vector<structure_summary> mine;
  for (int p = 0; p < np; ++p) {
    mine.push_back(summarize_pair(ins[static_cast<std::size_t>(p)], outs[static_cast<std::size_t>(p)]));
  }
  verify_structure(b, op, std::move(mine), info, o);
  check_scaled(op, as_const(outs[0]), ins[0], n, "the output", "the input");
  check_reducible(b, op, ins[0]);
  std::vector<element_type> types;
  std::vector<std::size_t> counts;
  types_and_counts(outs[0], types, counts);
  for (const auto& bk : plan_buckets(types, counts, o.bucket_bytes, true)) {
    if (bk.direct()) {
      b.group_begin();
      for (int p = 0; p < np; ++p) {
        const auto& out = outs[static_cast<std::size_t>(p)][bk.leaves[0]];
        b.reduce_scatter(p, ins[static_cast<std::size_t>(p)][bk.leaves[0]].data, out.data, out.count, out.type, rop);
      }
      b.group_end();
      continue;
    }
    const std::size_t chunk = bk.bytes();
    std::vector<void*> send(static_cast<std::size_t>(np)), recv(static_cast<std::size_t>(np));
    for (int p = 0; p < np; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      send[pi] = b.scratch(p, 0, chunk * static_cast<std::size_t>(n));
      recv[pi] = b.scratch(p, 1, chunk);
      // Rank-major: the part of every leaf that rank r keeps, then rank r + 1's.
      for (int r = 0; r < n; ++r) {
        std::size_t off = 0;
        for (auto i : bk.leaves) {
          const std::size_t lb = outs[pi][i].bytes();
          b.copy(p, byte_at(send[pi], static_cast<std::size_t>(r) * chunk + off),
                 byte_at(ins[pi][i].data, static_cast<std::size_t>(r) * lb), lb);
          off += lb;
        }
      }
    }
    b.group_begin();
    for (int p = 0; p < np; ++p) {
      b.reduce_scatter(p, send[static_cast<std::size_t>(p)], recv[static_cast<std::size_t>(p)], bk.count, bk.type, rop);
    }
    b.group_end();
    for (int p = 0; p < np; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      std::size_t off = 0;
      for (auto i : bk.leaves) {
        b.copy(p, outs[pi][i].data, byte_at(recv[pi], off), outs[pi][i].bytes());
        off += outs[pi][i].bytes();
      }
    }
  }
  b.finish(op);
}

// --- scatter with unequal sizes ----------------------------------------------------------------

/// Root's leaf i is split in rank order: rank r receives the elements
/// [sum of the counts of ranks < r, + its own count), where each rank's count is the size of its
/// own output leaf. `ins` matters on the root only (other ranks may pass empty lists).
template <class B>
void scatter(B& b, per_participant<const_leaf_span> ins, per_participant<leaf_span> outs, int root,
             const collective_options& o, std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "scatter";
  const int np = b.participants();
  const int n = b.size();
  const std::size_t leaves = outs[0].size();
  // Receive sizes differ by design: the structure is the leaf count and types.
  std::vector<structure_summary> mine;
  for (int p = 0; p < np; ++p) {
    mine.push_back(summarize(outs[static_cast<std::size_t>(p)], false));
    mine.back().root = root;
    mine.back().total_bytes = 0;
  }
  verify_structure(b, op, std::move(mine), info, o);
  check_root(b, op, root);
  // Every rank learns every rank's counts, and what the root holds: per rank, per leaf,
  // (own count, root's input count, root's input type). Every rank then checks the same table.
  const std::size_t rec = 3 * leaves;
  std::vector<std::uint64_t> local(static_cast<std::size_t>(np) * rec, 0);
  for (int p = 0; p < np; ++p) {
    const auto pi = static_cast<std::size_t>(p);
    const bool is_root = b.rank(p) == root;
    for (std::size_t i = 0; i < leaves; ++i) {
      local[pi * rec + i] = outs[pi][i].count;
      if (is_root && i < ins[pi].size()) {
        local[pi * rec + leaves + i] = ins[pi][i].count;
        local[pi * rec + 2 * leaves + i] = static_cast<std::uint64_t>(ins[pi][i].type);
      }
    }
    if (is_root && ins[pi].size() != leaves) {
      local[pi * rec] = ~std::uint64_t{0};  // a marker every rank recognises below
    }
  }
  std::vector<std::uint64_t> all(static_cast<std::size_t>(n) * rec);
  if (rec > 0) b.exchange(local.data(), rec * sizeof(std::uint64_t), all.data());
  const auto ri = static_cast<std::size_t>(root);
  const auto count_of = [&](int r, std::size_t i) { return all[static_cast<std::size_t>(r) * rec + i]; };
  if (leaves > 0 && all[ri * rec] == ~std::uint64_t{0}) {
    throw config_error(std::string(op) + ": the root's input and the output trees have different leaf counts");
  }
  std::vector<std::vector<std::size_t>> offset(leaves, std::vector<std::size_t>(static_cast<std::size_t>(n) + 1, 0));
  for (std::size_t i = 0; i < leaves; ++i) {
    for (int r = 0; r < n; ++r) {
      offset[i][static_cast<std::size_t>(r) + 1] = offset[i][static_cast<std::size_t>(r)] + count_of(r, i);
    }
    const std::uint64_t root_count = all[ri * rec + leaves + i];
    const auto root_type = static_cast<element_type>(all[ri * rec + 2 * leaves + i]);
    if (root_type != outs[0][i].type || root_count != offset[i][static_cast<std::size_t>(n)]) {
      throw config_error(std::string(op) + ": leaf " + std::to_string(i) + ": the root holds " +
                         std::to_string(root_count) + " " + std::string(to_string(root_type)) +
                         " elements, the ranks' outputs add up to " +
                         std::to_string(offset[i][static_cast<std::size_t>(n)]) + " " +
                         std::string(to_string(outs[0][i].type)));
    }
  }
  std::vector<element_type> types;
  std::vector<std::size_t> totals;
  for (std::size_t i = 0; i < leaves; ++i) {
    types.push_back(outs[0][i].type);
    totals.push_back(offset[i][static_cast<std::size_t>(n)]);
  }
  std::vector<std::size_t> bytes(static_cast<std::size_t>(n)), displs(static_cast<std::size_t>(n));
  for (const auto& bk : plan_buckets(types, totals, o.bucket_bytes, false)) {
    // Per destination rank: its bytes in this bucket and where they start in the send buffer.
    std::size_t at = 0;
    for (int r = 0; r < n; ++r) {
      const auto rr = static_cast<std::size_t>(r);
      std::size_t mine_bytes = 0;
      for (auto i : bk.leaves) mine_bytes += count_of(r, i) * size_of(types[i]);
      bytes[rr] = mine_bytes;
      displs[rr] = bk.direct() ? offset[bk.leaves[0]][rr] * size_of(types[bk.leaves[0]]) : at;
      at += mine_bytes;
    }
    std::vector<const void*> send(static_cast<std::size_t>(np));
    std::vector<void*> recv(static_cast<std::size_t>(np));
    for (int p = 0; p < np; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      const bool is_root = b.rank(p) == root;
      if (bk.direct()) {
        send[pi] = is_root ? ins[pi][bk.leaves[0]].data : nullptr;
        recv[pi] = outs[pi][bk.leaves[0]].data;
        continue;
      }
      recv[pi] = b.scratch(p, 1, std::max<std::size_t>(bytes[static_cast<std::size_t>(b.rank(p))], 1));
      if (!is_root) continue;
      void* s = b.scratch(p, 0, std::max<std::size_t>(at, 1));
      for (int r = 0; r < n; ++r) {
        std::size_t off = displs[static_cast<std::size_t>(r)];
        for (auto i : bk.leaves) {
          const std::size_t es = size_of(types[i]);
          const std::size_t lb = count_of(r, i) * es;
          b.copy(p, byte_at(s, off), byte_at(ins[pi][i].data, offset[i][static_cast<std::size_t>(r)] * es), lb);
          off += lb;
        }
      }
      send[pi] = s;
    }
    b.group_begin();
    for (int p = 0; p < np; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      b.scatter(p, send[pi], bytes.data(), displs.data(), recv[pi], bytes[static_cast<std::size_t>(b.rank(p))], root);
    }
    b.group_end();
    if (bk.direct()) continue;
    for (int p = 0; p < np; ++p) {
      const auto pi = static_cast<std::size_t>(p);
      std::size_t off = 0;
      for (auto i : bk.leaves) {
        b.copy(p, outs[pi][i].data, byte_at(recv[pi], off), outs[pi][i].bytes());
        off += outs[pi][i].bytes();
      }
    }
  }
  b.finish(op);
}

}  // namespace detail
}  // namespace devicekit
