#pragma once
/// \file
/// The collectives on flat leaves, written once over a backend (MPI for host memory, NCCL for
/// device memory, one rank for `self_communicator`), and the one communicator façade,
/// `basic_communicator<Backend>`, that `mpi_communicator`, `nccl_communicator` and
/// `self_communicator` are made of. Each operation:
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
/// are issued between group_begin() and group_end() (ncclGroupStart/End). Participants are
/// indexed by std::size_t; ranks are ints, as in MPI and NCCL.
///
/// A backend implements only the transport: the `collective_backend` concept below lists what
/// it provides, and `basic_communicator` checks it with a message that names a missing member.
#include <devicekit/core/device.hpp>
#include <devicekit/distribute/bucket.hpp>
#include <devicekit/distribute/leaf_span.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
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

// --- the backend concept ---------------------------------------------------------------------------

/// One requirement of collective_backend per member, so that check_collective_backend can name
/// the one that is missing.
namespace detail::backend_requirements {
template <class B>
concept has_participants = requires(const B& cb) {
  { cb.participants() } -> std::convertible_to<std::size_t>;
};
template <class B>
concept has_size = requires(const B& cb) {
  { cb.size() } -> std::convertible_to<int>;
};
template <class B>
concept has_rank = requires(const B& cb, std::size_t p) {
  { cb.rank(p) } -> std::convertible_to<int>;
};
template <class B>
concept has_name = requires {
  { B::name() } -> std::convertible_to<std::string_view>;
};
template <class B>
concept has_can_reduce = requires(element_type t) {
  { B::can_reduce(t) } -> std::convertible_to<bool>;
};
template <class B>
concept has_accepts = requires(const B& cb, std::size_t p, device d) {
  { cb.accepts(d, p) } -> std::convertible_to<bool>;
};
template <class B>
concept has_memory_description = requires(const B& cb, std::size_t p) {
  { cb.memory_description(p) } -> std::convertible_to<std::string>;
};
template <class B>
concept has_set_operation = requires(B& b, std::string_view op) {
  b.set_operation(op);
};
template <class B>
concept has_group_begin = requires(B& b) {
  b.group_begin();
};
template <class B>
concept has_group_end = requires(B& b) {
  b.group_end();
};
template <class B>
concept has_scratch = requires(B& b, std::size_t p, int slot, std::size_t n) {
  { b.scratch(p, slot, n) } -> std::convertible_to<void*>;
};
template <class B>
concept has_copy = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n) {
  b.copy(p, r, s, n);
};
template <class B>
concept has_exchange = requires(B& b, void* r, const void* s, std::size_t n) {
  b.exchange(s, n, r);
};
template <class B>
concept has_broadcast = requires(B& b, std::size_t p, void* r, std::size_t n, element_type t, int root) {
  b.broadcast(p, r, n, t, root);
};
template <class B>
concept has_all_reduce = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n, element_type t,
                                  reduce_op rop) {
  b.all_reduce(p, s, r, n, t, rop);
};
template <class B>
concept has_all_gather = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n, element_type t) {
  b.all_gather(p, s, r, n, t);
};
template <class B>
concept has_reduce_scatter = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n, element_type t,
                                      reduce_op rop) {
  b.reduce_scatter(p, s, r, n, t, rop);
};
template <class B>
concept has_scatter = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n, int root,
                               const std::size_t* sizes) {
  b.scatter(p, s, sizes, sizes, r, n, root);
};
template <class B>
concept has_finish = requires(B& b, std::string_view op) {
  b.finish(op);
};
}  // namespace detail::backend_requirements

/// What the collectives need of a transport (mpi.hpp, nccl.hpp and self.hpp hold the models):
///
///   std::size_t participants() const;  int size() const;  int rank(std::size_t p) const;
///   static std::string_view name();    static bool can_reduce(element_type);
///   bool accepts(device, std::size_t p) const;  std::string memory_description(std::size_t p) const;
///   void set_operation(std::string_view);       // names the operation in errors; may refuse
///   void group_begin(); void group_end();
///   void* scratch(std::size_t p, int slot, std::size_t bytes);        // slot 0 or 1
///   void copy(std::size_t p, void* dst, const void* src, std::size_t bytes);
///   void exchange(const void* mine, std::size_t bytes_each, void* all);   // host memory
///   void broadcast(std::size_t p, void* buf, std::size_t count, element_type, int root);
///   void all_reduce(std::size_t p, const void* s, void* r, std::size_t count, element_type, reduce_op);
///   void all_gather(std::size_t p, const void* s, void* r, std::size_t count, element_type);
///   void reduce_scatter(std::size_t p, const void* s, void* r, std::size_t recv_count, element_type,
///                       reduce_op);
///   void scatter(std::size_t p, const void* s, const std::size_t* bytes, const std::size_t* displs,
///                void* r, std::size_t recv_bytes, int root);
///   void finish(std::string_view operation);                    // wait, poll errors
template <class B>
concept collective_backend =
    detail::backend_requirements::has_participants<B> &&
    detail::backend_requirements::has_size<B> &&
    detail::backend_requirements::has_rank<B> &&
    detail::backend_requirements::has_name<B> &&
    detail::backend_requirements::has_can_reduce<B> &&
    detail::backend_requirements::has_accepts<B> &&
    detail::backend_requirements::has_memory_description<B> &&
    detail::backend_requirements::has_set_operation<B> &&
    detail::backend_requirements::has_group_begin<B> &&
    detail::backend_requirements::has_group_end<B> &&
    detail::backend_requirements::has_scratch<B> &&
    detail::backend_requirements::has_copy<B> &&
    detail::backend_requirements::has_exchange<B> &&
    detail::backend_requirements::has_broadcast<B> &&
    detail::backend_requirements::has_all_reduce<B> &&
    detail::backend_requirements::has_all_gather<B> &&
    detail::backend_requirements::has_reduce_scatter<B> &&
    detail::backend_requirements::has_scatter<B> &&
    detail::backend_requirements::has_finish<B>;

namespace detail {

/// collective_backend<B>, with a message naming each member B lacks.
template <class B>
constexpr bool check_collective_backend() {
  namespace req = backend_requirements;
  static_assert(req::has_participants<B>, "collective_backend: the backend has no `std::size_t participants() const`");
  static_assert(req::has_size<B>, "collective_backend: the backend has no `int size() const`");
  static_assert(req::has_rank<B>, "collective_backend: the backend has no `int rank(std::size_t) const`");
  static_assert(req::has_name<B>, "collective_backend: the backend has no `static std::string_view name()`");
  static_assert(req::has_can_reduce<B>,
                "collective_backend: the backend has no `static bool can_reduce(element_type)`");
  static_assert(req::has_accepts<B>,
                "collective_backend: the backend has no `bool accepts(device, std::size_t) const`");
  static_assert(req::has_memory_description<B>,
                "collective_backend: the backend has no `std::string memory_description(std::size_t) const`");
  static_assert(req::has_set_operation<B>,
                "collective_backend: the backend has no `void set_operation(std::string_view)`");
  static_assert(req::has_group_begin<B>, "collective_backend: the backend has no `void group_begin()`");
  static_assert(req::has_group_end<B>, "collective_backend: the backend has no `void group_end()`");
  static_assert(req::has_scratch<B>,
                "collective_backend: the backend has no `void* scratch(std::size_t, int, std::size_t)`");
  static_assert(req::has_copy<B>,
                "collective_backend: the backend has no `void copy(std::size_t, void*, const void*, std::size_t)`");
  static_assert(req::has_exchange<B>,
                "collective_backend: the backend has no `void exchange(const void*, std::size_t, void*)`");
  static_assert(
      req::has_broadcast<B>,
      "collective_backend: the backend has no `void broadcast(std::size_t, void*, std::size_t, element_type, int)`");
  static_assert(req::has_all_reduce<B>,
                "collective_backend: the backend has no `void all_reduce(std::size_t, const void*, void*, std::size_t, "
                "element_type, reduce_op)`");
  static_assert(req::has_all_gather<B>,
                "collective_backend: the backend has no `void all_gather(std::size_t, const void*, void*, std::size_t, "
                "element_type)`");
  static_assert(req::has_reduce_scatter<B>,
                "collective_backend: the backend has no `void reduce_scatter(std::size_t, const void*, void*, "
                "std::size_t, element_type, reduce_op)`");
  static_assert(req::has_scatter<B>,
                "collective_backend: the backend has no `void scatter(std::size_t, const void*, const std::size_t*, "
                "const std::size_t*, void*, std::size_t, int)`");
  static_assert(req::has_finish<B>, "collective_backend: the backend has no `void finish(std::string_view)`");
  return collective_backend<B>;
}

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


// --- packing a bucket ----------------------------------------------------------------------------

/// One leaf's part of a bucket: where its bytes are, and how many.
template <class Ptr>
struct piece {
  Ptr data;
  std::size_t bytes;
};

/// Copies the bucket's leaves into `buf`, back to back in bucket order; `part(i)` says where leaf
/// i's bytes come from and how many there are. Returns the bytes packed.
template <class B, class Part>
std::size_t pack(B& b, std::size_t p, const bucket& bk, void* buf, Part part) {
  std::size_t off = 0;
  for (const std::size_t i : bk.leaves) {
    const auto x = part(i);
    b.copy(p, byte_at(buf, off), x.data, x.bytes);
    off += x.bytes;
  }
  return off;
}

/// The reverse of pack: the bucket's leaves out of `buf`, back to back in bucket order.
template <class B, class Part>
std::size_t unpack(B& b, std::size_t p, const bucket& bk, const void* buf, Part part) {
  std::size_t off = 0;
  for (const std::size_t i : bk.leaves) {
    const auto x = part(i);
    b.copy(p, x.data, byte_at(buf, off), x.bytes);
    off += x.bytes;
  }
  return off;
}

/// Whole leaves of a list, as pack and unpack take them.
template <class Span>
auto whole(std::span<const Span> leaves) {
  return [leaves](std::size_t i) { return piece<decltype(leaves[i].data)>{leaves[i].data, leaves[i].bytes()}; };
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

template <class B>
void all_reduce(B& b, per_participant<leaf_span> parts, reduce_op rop, const collective_options& o,
                std::span<const tree_info> info = {}) {
  constexpr std::string_view op = "all_reduce";
  const std::size_t np = b.participants();
  std::vector<structure_summary> mine;
  for (std::size_t p = 0; p < np; ++p) mine.push_back(summarize(parts[p]));
  verify_structure(b, op, std::move(mine), info, o);
  check_reducible(b, op, as_const(parts[0]));
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
  const std::size_t np = b.participants();
  const auto n = static_cast<std::size_t>(b.size());
  std::vector<structure_summary> mine;
  for (std::size_t p = 0; p < np; ++p) mine.push_back(summarize_pair(ins[p], outs[p]));
  verify_structure(b, op, std::move(mine), info, o);
  check_scaled(op, ins[0], as_const(outs[0]), b.size(), "the input", "the output");
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

}  // namespace detail

// --- the communicator façade ----------------------------------------------------------------------

namespace detail {
/// "nccl_communicator" for the backend named "NCCL": the public name, for messages.
inline std::string communicator_name(std::string_view backend) {
  std::string s;
  for (const char c : backend) s.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  return s + "_communicator";
}
}  // namespace detail

/// Collectives on flat leaf spans over a backend, written once: rank and size, the options, the
/// memory it accepts, and the five collectives in two forms, one leaf list (one local rank) and
/// one leaf list per local rank (a backend driving several, such as NCCL over the GPUs of one
/// process). `Self` is the derived public type (mpi_communicator, nccl_communicator) that the
/// setters return, so that calls chain; `void` when the façade is used as it is
/// (self_communicator). Tree forms (`dk::all_reduce(comm, tree)`) are in tree_collectives.hpp.
///
/// Every collective is called by every rank with leaves of the same structure; when they differ,
/// every rank throws structure_mismatch_error (see above).
template <class Backend, class Self = void>
class basic_communicator {
  static_assert(detail::check_collective_backend<Backend>(),
                "basic_communicator<Backend>: Backend is not a collective_backend (the message above names what "
                "it lacks)");

 public:
  using backend_type = Backend;
  using self_type = std::conditional_t<std::is_void_v<Self>, basic_communicator, Self>;

  /// A communicator over a default backend (for self_communicator: the one-rank backend).
  explicit basic_communicator(collective_options options = {})
    requires std::default_initializable<Backend>
      : options_(options) {}
  basic_communicator(Backend backend, collective_options options)
      : backend_(std::move(backend)), options_(options) {}

  /// This process's rank (of local rank `local` when it drives several).
  [[nodiscard]] int rank(int local = 0) const { return backend_.rank(index(local)); }
  [[nodiscard]] int size() const noexcept { return backend_.size(); }
  /// How many ranks this process drives (NCCL init_all: one per device; otherwise 1).
  [[nodiscard]] int local_ranks() const noexcept { return static_cast<int>(backend_.participants()); }

  [[nodiscard]] const collective_options& options() const noexcept { return options_; }
  self_type& set_options(const collective_options& o) noexcept {
    options_ = o;
    return self();
  }
  self_type& set_bucket_bytes(std::size_t bytes) noexcept {
    options_.bucket_bytes = bytes;
    return self();
  }

  /// Whether local rank `local` can use memory of device `d` (MPI and self: host memory; NCCL:
  /// the local rank's GPU), and in words what it cannot use.
  [[nodiscard]] bool accepts(device d, int local = 0) const { return backend_.accepts(d, index(local)); }
  [[nodiscard]] std::string memory_description(int local = 0) const {
    return backend_.memory_description(index(local));
  }

  // --- one local rank: one leaf list ---

  /// Root's leaves to every rank, in place.
  void broadcast(std::span<const leaf_span> leaves, int root = 0) {
    single("broadcast");
    detail::broadcast(backend_, one(leaves), root, options_);
  }
  /// Every rank's leaves become the element-wise reduction over all ranks, in place.
  void all_reduce(std::span<const leaf_span> leaves, reduce_op op = reduce_op::sum) {
    single("all_reduce");
    detail::all_reduce(backend_, one(leaves), op, options_);
  }
  /// out[i] = in[i] of rank 0, then of rank 1, ... (out[i] holds size() x in[i]).
  void all_gather(std::span<const const_leaf_span> in, std::span<const leaf_span> out) {
    single("all_gather");
    detail::all_gather(backend_, one(in), one(out), options_);
  }
  /// out[i] = part rank() of the reduction of in[i] over all ranks (in[i] holds size() x out[i]).
  void reduce_scatter(std::span<const const_leaf_span> in, std::span<const leaf_span> out,
                      reduce_op op = reduce_op::sum) {
    single("reduce_scatter");
    detail::reduce_scatter(backend_, one(in), one(out), op, options_);
  }
  /// Root's in[i] split in rank order, each rank receiving out[i].count elements (sizes may
  /// differ across ranks; they must add up to in[i].count). `in` is read on the root only.
  void scatter(std::span<const const_leaf_span> in, std::span<const leaf_span> out, int root = 0) {
    single("scatter");
    detail::scatter(backend_, one(in), one(out), root, options_);
  }

  // --- several local ranks: one leaf list per local rank, in local rank order ---

  void broadcast(std::span<const std::vector<leaf_span>> per_rank, int root = 0) {
    multi("broadcast", per_rank.size());
    detail::broadcast(backend_, views(per_rank), root, options_);
  }
  void all_reduce(std::span<const std::vector<leaf_span>> per_rank, reduce_op op = reduce_op::sum) {
    multi("all_reduce", per_rank.size());
    detail::all_reduce(backend_, views(per_rank), op, options_);
  }
  void all_gather(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out) {
    multi("all_gather", in.size());
    multi("all_gather", out.size());
    detail::all_gather(backend_, views(in), views(out), options_);
  }
  void reduce_scatter(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out,
                      reduce_op op = reduce_op::sum) {
    multi("reduce_scatter", in.size());
    multi("reduce_scatter", out.size());
    detail::reduce_scatter(backend_, views(in), views(out), op, options_);
  }
  void scatter(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out,
               int root = 0) {
    multi("scatter", in.size());
    multi("scatter", out.size());
    detail::scatter(backend_, views(in), views(out), root, options_);
  }

  /// Waits until every rank has reached it (where the backend has a barrier: MPI, self).
  void barrier()
    requires requires(Backend& b) { b.barrier(); }
  {
    backend_.set_operation("barrier");
    backend_.barrier();
  }

  /// The backend, for the tree forms and for tests.
  [[nodiscard]] Backend& backend() noexcept { return backend_; }
  [[nodiscard]] const Backend& backend() const noexcept { return backend_; }

 private:
  static std::size_t index(int local) noexcept { return static_cast<std::size_t>(local); }
  self_type& self() noexcept { return static_cast<self_type&>(*this); }

  void single(std::string_view op) {
    backend_.set_operation(op);
    if (backend_.participants() != 1) {
      throw config_error(detail::communicator_name(Backend::name()) + "::" + std::string(op) +
                         ": this communicator drives " + std::to_string(local_ranks()) +
                         " local ranks; pass one leaf list per local rank");
    }
  }
  void multi(std::string_view op, std::size_t given) {
    backend_.set_operation(op);
    if (given != backend_.participants()) {
      throw config_error(detail::communicator_name(Backend::name()) + "::" + std::string(op) + ": " +
                         std::to_string(given) + " leaf lists for " + std::to_string(local_ranks()) +
                         " local ranks");
    }
  }
  template <class T>
  static std::span<const std::span<const T>, 1> one(std::span<const T>& s) noexcept {
    return std::span<const std::span<const T>, 1>(&s, 1);
  }
  template <class T>
  static std::vector<std::span<const T>> views(std::span<const std::vector<T>> lists) {
    return {lists.begin(), lists.end()};
  }

  Backend backend_;
  collective_options options_;
};

}  // namespace devicekit
