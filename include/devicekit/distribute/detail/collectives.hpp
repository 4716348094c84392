#pragma once
/// \file
/// The five collectives on flat leaves, written once over any collective_backend: structure
/// check, argument checks, bucket plan, then one backend call per bucket (see
/// distribute/collectives.hpp for the contract).
#include <devicekit/distribute/bucket.hpp>
#include <devicekit/distribute/detail/checks.hpp>
#include <devicekit/distribute/detail/pack.hpp>
#include <devicekit/distribute/leaf_span.hpp>
#include <devicekit/distribute/options.hpp>
#include <devicekit/distribute/structure.hpp>
#include <devicekit/memory/trace.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// Notes a collective in a memory trace being recorded (memory/trace.hpp), once per local rank:
/// the bytes and leaves of its tree (the output's, where there is one), on the device and stream
/// the backend names (backends that have `device_of(p)` / `stream_of(p)`; the host otherwise).
template <class B, class Span>
void record_collective(const B& b, transfer_kind what, per_participant<Span> parts) noexcept {
  if (!memory_trace_recording()) [[likely]]
    return;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    std::uint64_t bytes = 0;
    for (const auto& l : parts[p]) bytes += l.bytes();
    device d = device::cpu();
    const void* s = nullptr;
    if constexpr (requires { b.device_of(p); }) d = b.device_of(p);
    if constexpr (requires { b.stream_of(p); }) s = b.stream_of(p);
    record_transfer(what, d, d, bytes, parts[p].size(), s);
  }
}

// --- broadcast ------------------------------------------------------------------------------------

template <class B>
void broadcast(B& b, per_participant<leaf_span> parts, int root, const collective_options& o,
               std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "broadcast";
  const std::size_t np = b.participants();
  std::vector<structure_summary> mine;
  for (std::size_t p = 0; p < np; ++p) {
    mine.push_back(summarize(parts[p]));
    mine.back().root = root;
  }
  verify_structure(b, op, std::move(mine), info, o);
  check_root(b, op, root);
  record_collective(b, transfer_kind::broadcast, parts);
  std::vector<element_type> types;
  std::vector<std::size_t> counts;
  types_and_counts(parts[0], types, counts);
  std::vector<void*> buf(np);
  for (const auto& bk : plan_buckets(types, counts, o.bucket_bytes, false)) {
    if (bk.direct()) {
      b.group_begin();
      for (std::size_t p = 0; p < np; ++p) {
        const auto& l = parts[p][bk.leaves[0]];
        b.broadcast(p, l.data, l.bytes(), element_type::opaque, root);
      }
      b.group_end();
      continue;
    }
    for (std::size_t p = 0; p < np; ++p) {
      buf[p] = b.scratch(p, 0, bk.bytes());
      if (b.rank(p) == root) pack(b, p, bk, buf[p], whole(parts[p]));
    }
    b.group_begin();
    for (std::size_t p = 0; p < np; ++p) b.broadcast(p, buf[p], bk.bytes(), element_type::opaque, root);
    b.group_end();
    for (std::size_t p = 0; p < np; ++p) {
      if (b.rank(p) != root) unpack(b, p, bk, buf[p], whole(parts[p]));
    }
  }
  b.finish(op);
}

// --- all-reduce -------------------------------------------------------------------------------------

/// A backend that reduces packed buckets in slices of B::slice_bytes() (the MPI backend).
template <class B>
concept sliced_all_reduce_backend = requires {
  { B::slice_bytes() } -> std::convertible_to<std::size_t>;
};

/// A backend that can all-reduce a list of leaves where they lie, without packing them, and may
/// decline (false, nothing sent): the MPI backend's ring (mpi_backend::all_reduce_leaves).
template <class B>
concept leafwise_all_reduce_backend = requires(B& b, std::span<const leaf_span> leaves,
                                               std::span<const std::size_t> which, element_type t, reduce_op op) {
  { b.all_reduce_leaves(leaves, which, t, op) } -> std::same_as<bool>;
};

/// A packed bucket of one participant all-reduced in slices of about B::slice_bytes() (on leaf
/// boundaries). Each slice goes to the backend's leafwise all-reduce where it has one and takes
/// it; else it is packed into `buf`, reduced and unpacked before the next, so its bytes are still
/// in cache for the reduction and the unpack (see mpi_backend::slice_bytes for the measurements
/// behind this).
template <class B>
void all_reduce_sliced(B& b, const bucket& bk, void* buf, std::span<const leaf_span> leaves, reduce_op rop) {
  const std::size_t es = size_of(bk.type);
  std::size_t first = 0;
  while (first < bk.leaves.size()) {
    std::size_t last = first, bytes = 0;
    while (last < bk.leaves.size() && (bytes == 0 || bytes < B::slice_bytes()))
      bytes += leaves[bk.leaves[last++]].bytes();
    if constexpr (leafwise_all_reduce_backend<B>) {
      const std::span<const std::size_t> which(bk.leaves.data() + first, last - first);
      if (b.all_reduce_leaves(leaves, which, bk.type, rop)) {
        first = last;
        continue;
      }
    }
    std::size_t off = 0;
    for (std::size_t j = first; j < last; ++j) {
      const auto& l = leaves[bk.leaves[j]];
      b.copy(0, byte_at(buf, off), l.data, l.bytes());
      off += l.bytes();
    }
    b.all_reduce(0, buf, buf, bytes / es, bk.type, rop);
    off = 0;
    for (std::size_t j = first; j < last; ++j) {
      const auto& l = leaves[bk.leaves[j]];
      b.copy(0, l.data, byte_at(buf, off), l.bytes());
      off += l.bytes();
    }
    first = last;
  }
}

template <class B>
void all_reduce(B& b, per_participant<leaf_span> parts, reduce_op rop, const collective_options& o,
                std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "all_reduce";
  const std::size_t np = b.participants();
  std::vector<structure_summary> mine;
  for (std::size_t p = 0; p < np; ++p) mine.push_back(summarize(parts[p]));
  verify_structure(b, op, std::move(mine), info, o);
  check_reducible(b, op, parts[0]);
  record_collective(b, transfer_kind::all_reduce, parts);
  std::vector<element_type> types;
  std::vector<std::size_t> counts;
  types_and_counts(parts[0], types, counts);
  std::vector<void*> buf(np);
  for (const auto& bk : plan_buckets(types, counts, o.bucket_bytes, true)) {
    if (bk.direct()) {
      b.group_begin();
      for (std::size_t p = 0; p < np; ++p) {
        const auto& l = parts[p][bk.leaves[0]];
        b.all_reduce(p, l.data, l.data, l.count, l.type, rop);
      }
      b.group_end();
      continue;
    }
    if constexpr (sliced_all_reduce_backend<B>) {
      if (np == 1) {
        all_reduce_sliced(b, bk, b.scratch(0, 0, bk.bytes()), parts[0], rop);  // each slice from its start
        continue;
      }
    }
    for (std::size_t p = 0; p < np; ++p) {
      buf[p] = b.scratch(p, 0, bk.bytes());
      pack(b, p, bk, buf[p], whole(parts[p]));
    }
    b.group_begin();
    for (std::size_t p = 0; p < np; ++p) b.all_reduce(p, buf[p], buf[p], bk.count, bk.type, rop);
    b.group_end();
    for (std::size_t p = 0; p < np; ++p) unpack(b, p, bk, buf[p], whole(parts[p]));
  }
  b.finish(op);
}

// --- all-gather and reduce-scatter ---------------------------------------------------------------

template <class B>
void all_gather(B& b, per_participant<const_leaf_span> ins, per_participant<leaf_span> outs,
                const collective_options& o, std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "all_gather";
  const std::size_t np = b.participants();
  const auto n = static_cast<std::size_t>(b.size());
  std::vector<structure_summary> mine;
  for (std::size_t p = 0; p < np; ++p) mine.push_back(summarize_pair(ins[p], outs[p]));
  verify_structure(b, op, std::move(mine), info, o);
  check_scaled(op, ins[0], as_const(outs[0]), b.size(), "the input", "the output");
  record_collective(b, transfer_kind::all_gather, outs);
  std::vector<element_type> types;
  std::vector<std::size_t> counts;
  types_and_counts(ins[0], types, counts);
  std::vector<void*> send(np), recv(np);
  for (const auto& bk : plan_buckets(types, counts, o.bucket_bytes, false)) {
    if (bk.direct()) {
      // The output is rank-major, exactly the layout of a one-buffer all-gather.
      b.group_begin();
      for (std::size_t p = 0; p < np; ++p) {
        const auto& in = ins[p][bk.leaves[0]];
        b.all_gather(p, in.data, outs[p][bk.leaves[0]].data, in.bytes(), element_type::opaque);
      }
      b.group_end();
      continue;
    }
    const std::size_t chunk = bk.bytes();
    for (std::size_t p = 0; p < np; ++p) {
      send[p] = b.scratch(p, 0, chunk);
      recv[p] = b.scratch(p, 1, chunk * n);
      pack(b, p, bk, send[p], whole(ins[p]));
    }
    b.group_begin();
    for (std::size_t p = 0; p < np; ++p) b.all_gather(p, send[p], recv[p], chunk, element_type::opaque);
    b.group_end();
    // Rank r's chunk holds its part of every leaf; that part goes to place r of each output leaf.
    for (std::size_t p = 0; p < np; ++p) {
      for (std::size_t r = 0; r < n; ++r) {
        unpack(b, p, bk, byte_at(recv[p], r * chunk), [&, p, r](std::size_t i) {
          const std::size_t lb = ins[p][i].bytes();
          return piece<void*>{byte_at(outs[p][i].data, r * lb), lb};
        });
      }
    }
  }
  b.finish(op);
}

template <class B>
void reduce_scatter(B& b, per_participant<const_leaf_span> ins, per_participant<leaf_span> outs, reduce_op rop,
                    const collective_options& o, std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "reduce_scatter";
  const std::size_t np = b.participants();
  const auto n = static_cast<std::size_t>(b.size());
  std::vector<structure_summary> mine;
  for (std::size_t p = 0; p < np; ++p) mine.push_back(summarize_pair(ins[p], outs[p]));
  verify_structure(b, op, std::move(mine), info, o);
  check_scaled(op, as_const(outs[0]), ins[0], b.size(), "the output", "the input");
  check_reducible(b, op, ins[0]);
  record_collective(b, transfer_kind::reduce_scatter, outs);
  std::vector<element_type> types;
  std::vector<std::size_t> counts;
  types_and_counts(outs[0], types, counts);
  std::vector<void*> send(np), recv(np);
  for (const auto& bk : plan_buckets(types, counts, o.bucket_bytes, true)) {
    if (bk.direct()) {
      b.group_begin();
      for (std::size_t p = 0; p < np; ++p) {
        const auto& out = outs[p][bk.leaves[0]];
        b.reduce_scatter(p, ins[p][bk.leaves[0]].data, out.data, out.count, out.type, rop);
      }
      b.group_end();
      continue;
    }
    const std::size_t chunk = bk.bytes();
    for (std::size_t p = 0; p < np; ++p) {
      send[p] = b.scratch(p, 0, chunk * n);
      recv[p] = b.scratch(p, 1, chunk);
      // Rank-major: the part of every leaf that rank r keeps, then rank r + 1's.
      for (std::size_t r = 0; r < n; ++r) {
        pack(b, p, bk, byte_at(send[p], r * chunk), [&, p, r](std::size_t i) {
          const std::size_t lb = outs[p][i].bytes();
          return piece<const void*>{byte_at(ins[p][i].data, r * lb), lb};
        });
      }
    }
    b.group_begin();
    for (std::size_t p = 0; p < np; ++p) b.reduce_scatter(p, send[p], recv[p], bk.count, bk.type, rop);
    b.group_end();
    for (std::size_t p = 0; p < np; ++p) unpack(b, p, bk, recv[p], whole(outs[p]));
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
  const std::size_t np = b.participants();
  const auto n = static_cast<std::size_t>(b.size());
  const std::size_t leaves = outs[0].size();
  // Receive sizes differ by design: the structure is the leaf count and types.
  std::vector<structure_summary> mine;
  for (std::size_t p = 0; p < np; ++p) {
    mine.push_back(summarize(outs[p], false));
    mine.back().root = root;
    mine.back().total_bytes = 0;
  }
  verify_structure(b, op, std::move(mine), info, o);
  check_root(b, op, root);
  record_collective(b, transfer_kind::scatter, outs);
  // Every rank learns every rank's counts, and what the root holds: per rank, per leaf,
  // (own count, root's input count, root's input type). Every rank then checks the same table.
  const std::size_t rec = 3 * leaves;
  std::vector<std::uint64_t> local(np * rec, 0);
  for (std::size_t p = 0; p < np; ++p) {
    const bool is_root = b.rank(p) == root;
    for (std::size_t i = 0; i < leaves; ++i) {
      local[p * rec + i] = outs[p][i].count;
      if (is_root && i < ins[p].size()) {
        local[p * rec + leaves + i] = ins[p][i].count;
        local[p * rec + 2 * leaves + i] = static_cast<std::uint64_t>(ins[p][i].type);
      }
    }
    if (is_root && ins[p].size() != leaves) {
      local[p * rec] = ~std::uint64_t{0};  // a marker every rank recognises below
    }
  }
  std::vector<std::uint64_t> all(n * rec);
  if (rec > 0) b.exchange(local.data(), rec * sizeof(std::uint64_t), all.data());
  const auto ri = static_cast<std::size_t>(root);
  const auto count_of = [&](std::size_t r, std::size_t i) { return all[r * rec + i]; };
  if (leaves > 0 && all[ri * rec] == ~std::uint64_t{0}) {
    throw config_error(std::string(op) + ": the root's input and the output trees have different leaf counts");
  }
  std::vector<std::vector<std::size_t>> offset(leaves, std::vector<std::size_t>(n + 1, 0));
  for (std::size_t i = 0; i < leaves; ++i) {
    for (std::size_t r = 0; r < n; ++r) offset[i][r + 1] = offset[i][r] + count_of(r, i);
    const std::uint64_t root_count = all[ri * rec + leaves + i];
    const auto root_type = static_cast<element_type>(all[ri * rec + 2 * leaves + i]);
    if (root_type != outs[0][i].type || root_count != offset[i][n]) {
      throw config_error(std::string(op) + ": leaf " + std::to_string(i) + ": the root holds " +
                         std::to_string(root_count) + " " + std::string(to_string(root_type)) +
                         " elements, the ranks' outputs add up to " + std::to_string(offset[i][n]) + " " +
                         std::string(to_string(outs[0][i].type)));
    }
  }
  std::vector<element_type> types;
  std::vector<std::size_t> totals;
  for (std::size_t i = 0; i < leaves; ++i) {
    types.push_back(outs[0][i].type);
    totals.push_back(offset[i][n]);
  }
  std::vector<std::size_t> bytes(n), displs(n);
  std::vector<const void*> send(np);
  std::vector<void*> recv(np);
  for (const auto& bk : plan_buckets(types, totals, o.bucket_bytes, false)) {
    // Per destination rank: its bytes in this bucket and where they start in the send buffer.
    std::size_t at = 0;
    for (std::size_t r = 0; r < n; ++r) {
      std::size_t mine_bytes = 0;
      for (auto i : bk.leaves) mine_bytes += count_of(r, i) * size_of(types[i]);
      bytes[r] = mine_bytes;
      displs[r] = bk.direct() ? offset[bk.leaves[0]][r] * size_of(types[bk.leaves[0]]) : at;
      at += mine_bytes;
    }
    for (std::size_t p = 0; p < np; ++p) {
      const bool is_root = b.rank(p) == root;
      const auto own = static_cast<std::size_t>(b.rank(p));
      if (bk.direct()) {
        send[p] = is_root ? ins[p][bk.leaves[0]].data : nullptr;
        recv[p] = outs[p][bk.leaves[0]].data;
        continue;
      }
      recv[p] = b.scratch(p, 1, std::max<std::size_t>(bytes[own], 1));
      if (!is_root) continue;
      void* s = b.scratch(p, 0, std::max<std::size_t>(at, 1));
      // Rank r's elements of every leaf, from where rank r's part of the root's leaf starts.
      for (std::size_t r = 0; r < n; ++r) {
        pack(b, p, bk, byte_at(s, displs[r]), [&, p, r](std::size_t i) {
          const std::size_t es = size_of(types[i]);
          return piece<const void*>{byte_at(ins[p][i].data, offset[i][r] * es), count_of(r, i) * es};
        });
      }
      send[p] = s;
    }
    b.group_begin();
    for (std::size_t p = 0; p < np; ++p) {
      b.scatter(p, send[p], bytes.data(), displs.data(), recv[p], bytes[static_cast<std::size_t>(b.rank(p))], root);
    }
    b.group_end();
    if (bk.direct()) continue;
    for (std::size_t p = 0; p < np; ++p) unpack(b, p, bk, recv[p], whole(outs[p]));
  }
  b.finish(op);
}

}  // namespace devicekit::detail
