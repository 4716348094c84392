#pragma once
/// \file
/// Collectives on trees (tree/tree.hpp), over any devicekit communicator (`mpi_communicator`
/// for host trees, `nccl_communicator` for device trees):
///
///   broadcast(comm, tree, root)              root's leaves to every rank, in place
///   all_reduce(comm, tree, op)               in place; op: sum, average, min, max, product
///   all_gather(comm, in, out)                out's leaf i = in's leaf i of every rank, rank-major
///   all_gathered(comm, in)                   the same, into a new tree of std::vector leaves
///   reduce_scatter(comm, in, out, op)        out = this rank's part of the reduction of in
///   scatter(comm, in, out, root)             root's leaves split in rank order; each rank's part
///                                            is as large as its own out leaf (sizes may differ)
///
/// The leaves are flattened in traversal order and coalesced into buckets (collective_options::
/// bucket_bytes), so a tree of many small leaves costs one collective per bucket. Before any data
/// moves, the ranks compare a hash of the tree's structure (node kinds, member names, lengths,
/// leaf types and sizes): trees that differ make every rank throw structure_mismatch_error; a
/// leaf in memory the communicator cannot use (a device leaf given to MPI, a leaf on another GPU
/// given to NCCL, or a GPU's leaf placed in host memory, memory kind pinned_host or host, given to
/// NCCL) makes every rank throw config_error. A leaf is judged by where its bytes are: the host
/// communicators take a GPU's leaves placed in host memory.
///
/// An NCCL communicator that drives several local GPUs (init_all) takes one tree per local rank:
/// `all_reduce(comm, one_per_device(trees))`.
#include <devicekit/distribute/collectives.hpp>
#include <devicekit/place/sharded.hpp>
#include <devicekit/place/split.hpp>
#include <devicekit/tree/flat.hpp>
#include <devicekit/tree/tree.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

/// A devicekit communicator: rank, size, options, the backend the collectives run on, and which
/// memory it can use (`accepts(device, local_rank)`, and in words `memory_description(local)`).
template <class C>
concept communicator = requires(C& c, const C& cc, device d) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  { cc.options() } -> std::convertible_to<const collective_options&>;
  { cc.accepts(d, 0) } -> std::convertible_to<bool>;
  { cc.memory_description(0) } -> std::convertible_to<std::string>;
  c.backend();
};

/// One tree per local rank of a communicator that drives several (NCCL init_all), in the order
/// of its devices.
template <class Tree>
struct one_per_device_trees {
  std::span<Tree> trees;
};
template <class Tree>
[[nodiscard]] one_per_device_trees<Tree> one_per_device(std::span<Tree> trees) noexcept {
  return {trees};
}
template <class Tree>
[[nodiscard]] one_per_device_trees<Tree> one_per_device(std::vector<Tree>& trees) noexcept {
  return {std::span<Tree>(trees)};
}
template <class Tree>
[[nodiscard]] one_per_device_trees<const Tree> one_per_device(const std::vector<Tree>& trees) noexcept {
  return {std::span<const Tree>(trees)};
}

/// A hash of a tree's structure (tree_def: node kinds, member names, lengths), stable across
/// processes; of a tree, or of its structure(t) when that is already at hand.
[[nodiscard]] inline std::uint64_t structure_hash(const tree_def& def) noexcept {
  structure_hasher h;
  h.add(std::string_view(def.str()));
  return h.value();
}
template <class Tree>
[[nodiscard]] std::uint64_t structure_hash(const Tree& t) {
  return structure_hash(structure(t));
}

namespace detail {

/// Whether the elements of leaf L can be written through a non-const L.
template <class L>
constexpr bool leaf_is_writable() {
  using U = std::remove_reference_t<L>;
  if constexpr (std::is_const_v<U>) {
    return false;
  } else if constexpr (requires(U & u) { std::data(u); }) {
    return !std::is_const_v<std::remove_pointer_t<decltype(std::data(std::declval<U&>()))>>;
  } else if constexpr (requires(U & u) { u.data_handle(); }) {
    return !std::is_const_v<std::remove_pointer_t<decltype(std::declval<U&>().data_handle())>>;
  } else {
    return true;  // a scalar of a non-const tree
  }
}

/// The leaves of one tree as spans, the tree's tag, and the first leaf the communicator cannot
/// use (as a problem for verify_structure).
template <class Span>
struct flat_spans {
  std::vector<Span> spans;
  tree_info info;
};

/// A flattened leaf as the communicators take it (opaque leaves count bytes, as wire_count).
template <class Span>
[[nodiscard]] Span span_of(const flat_leaf& r) noexcept {
  const std::size_t count = r.type == element_type::opaque ? r.bytes : r.size();
  if constexpr (std::is_same_v<Span, leaf_span>) {
    return {const_cast<std::byte*>(r.data), count, r.type};  // the tree is writable (checked by the caller)
  } else {
    return {static_cast<const void*>(r.data), count, r.type};
  }
}

/// Why the communicator cannot use leaf number `index` of `t` (flat record `r`), with its path,
/// which the flattening walk does not keep: found by a walk of its own, on this path only.
template <class Comm, class Tree>
[[nodiscard]] std::string unusable_leaf(const Comm& comm, const Tree& t, std::size_t index, const flat_leaf& r,
                                        int local) {
  std::string path;
  std::size_t i = 0;
  for_each_leaf_with_path(
      [&](const tree_path& p, const auto&) {
        if (i++ == index) path = p.display();
      },
      t);
  const std::string where =
      r.in_host_memory ? "host memory (a leaf of " + r.device.str() + " placed with memory kind pinned_host or host)"
                       : r.device.str() + " memory";
  return "leaf '" + path + "' is in " + where + ", which " + std::string(comm.memory_description(local));
}

/// One walk of the tree: each leaf's flat record (tree/flat.hpp) becomes its span. A leaf is
/// judged by where its bytes are (flat_leaf::memory()), so a leaf of a GPU placed in host memory
/// goes where host memory goes. Nothing throws for a leaf the communicator cannot use: every
/// rank must reach the structure check, which reports it on all of them.
template <class Span, bool Reducing, class Comm, class Tree>
flat_spans<Span> flatten(const Comm& comm, Tree& t, int local) {
  static_assert(require_tree<Tree>(), "devicekit collectives: the argument is not a tree (see the message above)");
  flat_spans<Span> out;
  const tree_def def = structure(t);
  out.info.tag = structure_hash(def);
  out.spans.reserve(def.num_leaves());
  std::optional<std::size_t> unusable;
  flat_leaf unusable_record;
  for_each_leaf(
      [&](auto& leaf) {
        using L = std::remove_reference_t<decltype(leaf)>;
        using E = typename leaf_traits<std::remove_cv_t<L>>::element_type;
        if constexpr (Reducing) {
          static_assert(element_type_of<E> != element_type::opaque,
                        "devicekit: reductions need arithmetic leaves with a wire type; bool and long double leaves "
                        "can be broadcast, gathered and scattered, not reduced");
        }
        if constexpr (std::is_same_v<Span, leaf_span>) {
          static_assert(leaf_is_writable<L>(),
                        "devicekit collectives: this operation writes the tree's leaves, but a leaf is read-only "
                        "(a std::span<const T>, an mdspan of const T, or a const tree)");
        }
        const flat_leaf r = flatten_leaf(leaf);
        if (!unusable && !comm.accepts(r.memory(), local)) {
          unusable = out.spans.size();
          unusable_record = r;
        }
        out.spans.push_back(span_of<Span>(r));
      },
      t);
  if (unusable) out.info.problem = unusable_leaf(comm, t, *unusable, unusable_record, local);
  return out;
}

template <class Span, class Comm, class Tree>
struct flat_list {
  std::vector<flat_spans<Span>> trees;
  std::vector<std::span<const Span>> views;
  std::vector<tree_info> infos;
};

template <class Span, bool Reducing = false, class Comm, class Tree>
flat_list<Span, Comm, Tree> flatten_all(Comm& comm, std::span<Tree> trees, std::string_view operation) {
  if (trees.size() != comm.backend().participants()) {
    throw config_error(std::string(operation) + ": " + std::to_string(trees.size()) +
                       " tree(s) for a communicator with " + std::to_string(comm.backend().participants()) +
                       " local rank(s); a communicator over several local GPUs takes one_per_device(trees)");
  }
  flat_list<Span, Comm, Tree> out;
  for (std::size_t p = 0; p < trees.size(); ++p) {
    out.trees.push_back(flatten<Span, Reducing>(comm, trees[p], static_cast<int>(p)));
  }
  for (auto& f : out.trees) {
    out.views.emplace_back(f.spans);
    out.infos.push_back(f.info);
  }
  return out;
}

template <class Comm, class Tree>
void broadcast_trees(Comm& comm, std::span<Tree> trees, int root) {
  comm.backend().set_operation("broadcast");
  auto f = flatten_all<leaf_span>(comm, trees, "broadcast");
  detail::broadcast(comm.backend(), f.views, root, comm.options(), f.infos);
}

template <class Comm, class Tree>
void all_reduce_trees(Comm& comm, std::span<Tree> trees, reduce_op op) {
  comm.backend().set_operation("all_reduce");
  auto f = flatten_all<leaf_span, true>(comm, trees, "all_reduce");
  detail::all_reduce(comm.backend(), f.views, op, comm.options(), f.infos);
}

/// Mixes the output tree's structure into the input's tag (and takes the first problem).
template <class A, class B>
std::vector<tree_info> pair_infos(const A& in, const B& out) {
  std::vector<tree_info> infos;
  for (std::size_t p = 0; p < in.infos.size(); ++p) {
    structure_hasher h;
    h.add(in.infos[p].tag);
    h.add(out.infos[p].tag);
    infos.push_back({h.value(), in.infos[p].problem.empty() ? out.infos[p].problem : in.infos[p].problem});
  }
  return infos;
}

template <class Comm, class In, class Out>
void all_gather_trees(Comm& comm, std::span<In> in, std::span<Out> out) {
  comm.backend().set_operation("all_gather");
  auto fi = flatten_all<const_leaf_span>(comm, in, "all_gather");
  auto fo = flatten_all<leaf_span>(comm, out, "all_gather");
  const auto infos = pair_infos(fi, fo);
  detail::all_gather(comm.backend(), fi.views, fo.views, comm.options(), infos);
}

template <class Comm, class In, class Out>
void reduce_scatter_trees(Comm& comm, std::span<In> in, std::span<Out> out, reduce_op op) {
  comm.backend().set_operation("reduce_scatter");
  auto fi = flatten_all<const_leaf_span, true>(comm, in, "reduce_scatter");
  auto fo = flatten_all<leaf_span>(comm, out, "reduce_scatter");
  const auto infos = pair_infos(fi, fo);
  detail::reduce_scatter(comm.backend(), fi.views, fo.views, op, comm.options(), infos);
}

template <class Comm, class In, class Out>
void scatter_trees(Comm& comm, std::span<In> in, std::span<Out> out, int root) {
  comm.backend().set_operation("scatter");
  auto fi = flatten_all<const_leaf_span>(comm, in, "scatter");
  auto fo = flatten_all<leaf_span>(comm, out, "scatter");
  // The input tree matters on the root only; its structure is checked there (scatter compares
  // the root's leaf counts and types with every rank's outputs).
  auto infos = fo.infos;
  for (std::size_t p = 0; p < infos.size(); ++p) {
    if (infos[p].problem.empty() && comm.backend().rank(p) == root) infos[p].problem = fi.infos[p].problem;
  }
  detail::scatter(comm.backend(), fi.views, fo.views, root, comm.options(), infos);
}

}  // namespace detail

// --- one tree per process ------------------------------------------------------------------------

/// Root's leaves to every rank, in place. Every rank passes a tree of the same structure.
template <communicator Comm, class Tree>
requires(!detail::is_per_device_v<Tree>) void broadcast(Comm& comm, Tree& tree, int root = 0) {
  detail::broadcast_trees(comm, std::span<Tree>(&tree, 1), root);
}

/// Every leaf becomes the element-wise reduction over the ranks, in place.
template <communicator Comm, class Tree>
requires(!detail::is_per_device_v<Tree>) void all_reduce(Comm& comm, Tree& tree, reduce_op op = reduce_op::sum) {
  detail::all_reduce_trees(comm, std::span<Tree>(&tree, 1), op);
}

/// out's leaf i (size() times as large as in's) = in's leaf i of rank 0, rank 1, ...
template <communicator Comm, class In, class Out>
void all_gather(Comm& comm, const In& in, Out& out) {
  detail::all_gather_trees(comm, std::span<const In>(&in, 1), std::span<Out>(&out, 1));
}

/// A new tree of the same structure whose leaves are std::vector holding every rank's leaf, in
/// rank order.
template <communicator Comm, class In>
[[nodiscard]] auto all_gathered(Comm& comm, const In& in) {
  const auto n = static_cast<std::size_t>(comm.size());
  auto out = tree_map(
      [n](const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        using E = typename traits::element_type;
        static_assert(!std::is_same_v<E, bool>,
                      "all_gathered: bool leaves would become std::vector<bool>, which is not "
                      "contiguous; gather them into your own output tree");
        return std::vector<E>(traits::size(leaf) * n);
      },
      in);
  all_gather(comm, in, out);
  return out;
}

/// out's leaf i = part rank() of the reduction of in's leaf i (size() times as large as out's).
template <communicator Comm, class In, class Out>
void reduce_scatter(Comm& comm, const In& in, Out& out, reduce_op op = reduce_op::sum) {
  detail::reduce_scatter_trees(comm, std::span<const In>(&in, 1), std::span<Out>(&out, 1), op);
}

/// Root's leaves split in rank order: each rank receives as many elements as its own out leaf
/// holds (sizes may differ across ranks and must add up to the root's leaf). `in` is read on the
/// root only; other ranks may pass a tree with empty leaves.
template <communicator Comm, class In, class Out>
void scatter(Comm& comm, const In& in, Out& out, int root = 0) {
  detail::scatter_trees(comm, std::span<const In>(&in, 1), std::span<Out>(&out, 1), root);
}

// --- one tree per local rank (NCCL over several local GPUs) ------------------------------------

template <communicator Comm, class Tree>
void broadcast(Comm& comm, one_per_device_trees<Tree> trees, int root = 0) {
  detail::broadcast_trees(comm, trees.trees, root);
}
template <communicator Comm, class Tree>
void all_reduce(Comm& comm, one_per_device_trees<Tree> trees, reduce_op op = reduce_op::sum) {
  detail::all_reduce_trees(comm, trees.trees, op);
}
template <communicator Comm, class In, class Out>
void all_gather(Comm& comm, one_per_device_trees<In> in, one_per_device_trees<Out> out) {
  detail::all_gather_trees(comm, in.trees, out.trees);
}
template <communicator Comm, class In, class Out>
void reduce_scatter(Comm& comm, one_per_device_trees<In> in, one_per_device_trees<Out> out,
                    reduce_op op = reduce_op::sum) {
  detail::reduce_scatter_trees(comm, in.trees, out.trees, op);
}
template <communicator Comm, class In, class Out>
void scatter(Comm& comm, one_per_device_trees<In> in, one_per_device_trees<Out> out, int root = 0) {
  detail::scatter_trees(comm, in.trees, out.trees, root);
}

// --- what replicate / shard / dm.distribute return: one tree per device ---------------------------

/// `dk::all_reduce(comm, dm.replicate(grads))` over an NCCL communicator of the same devices.
template <communicator Comm, class Tree>
void broadcast(Comm& comm, per_device<Tree>& trees, int root = 0) {
  detail::broadcast_trees(comm, std::span<Tree>(trees.trees), root);
}
template <communicator Comm, class Tree>
void all_reduce(Comm& comm, per_device<Tree>& trees, reduce_op op = reduce_op::sum) {
  detail::all_reduce_trees(comm, std::span<Tree>(trees.trees), op);
}

/// Balanced counts for scatter: `total` split over `parts`, the first `total % parts` parts one
/// larger (10 over 4: 3, 3, 2, 2).
/// The same split as shard's ragged policy and the shard_batch scheme (place/split.hpp), so a
/// rank's scattered rows are the rows its shard would hold.
[[nodiscard]] inline std::vector<std::size_t> split_counts(std::size_t total, std::size_t parts) {
  if (parts == 0) throw config_error("split_counts: zero parts");
  return balanced_row_counts(total, parts);
}

}  // namespace devicekit
