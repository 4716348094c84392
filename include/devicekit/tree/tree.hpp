#pragma once
/// \file
/// PyTree traversal. A tree is a leaf (tree/leaf.hpp: arithmetic scalars, contiguous ranges of
/// arithmetic values, shaped arrays) or a node (tree/node.hpp: `std::tuple`, `std::pair`,
/// `std::array` / `std::vector` of subtrees; Boost.Hana structs with tree/hana.hpp), nested in
/// any way.
///
///   tree_map(f, t, ts...)            the same structure, each leaf f(leaf, leaves of ts...)
///   tree_map_with_path(f, t, ts...)  the same, f(path, leaf, ...)
///   for_each_leaf(f, t, ts...)       f(leaf, leaves of ts...) in order
///   for_each_leaf_with_path(f, t)    f(path, leaf) in order
///   leaves(t, root)                  every leaf as a `leaf_info`, with its path ("batch.images")
///   leaf_count(t), total_bytes(t)    counts
///   structure(t), same_structure(a, b)
///
/// An array or vector of arithmetic values is a leaf, so mapping the leaves under a vector node
/// to scalars makes that node a leaf: map to ranges (or wrap scalars in a tuple) to keep it.
///
/// Traversal order is depth first, children in order (tuple position, struct member order,
/// array index); every function here visits leaves in that same order. Paths join struct member
/// names with '.' and positions with "[i]": "batch.images", "layers[2].w", "[0]".
///
/// A type that is neither a leaf nor a node stops the compilation with an error that shows
/// `devicekit::neither_leaf_nor_node<T>` with the offending T.
#include <devicekit/tree/array.hpp>
#include <devicekit/tree/detail/check.hpp>
#include <devicekit/tree/detail/structure.hpp>
#include <devicekit/tree/detail/walk.hpp>
#include <devicekit/tree/errors.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/node.hpp>
#include <devicekit/tree/path.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

/// True when `T` is a tree: a leaf, or a node whose children are trees, all the way down.
template <class T>
inline constexpr bool is_tree_v = detail::soft_tree_type<std::remove_cvref_t<T>>();

/// A leaf or a node of trees, checked all the way down.
template <class T>
concept tree = is_tree_v<T>;

/// Fails to compile, naming the first part of T that is neither a leaf nor a node, unless T is a
/// tree: `static_assert(require_tree<T>())` gives a better message than the concept.
template <class T>
constexpr bool require_tree() {
  return detail::check_tree_type<std::remove_cvref_t<T>>();
}

/// The same structure with each leaf replaced by `f(leaf, leaves of trees...)`. The other trees
/// must have the same structure (compile-time shape, and the same lengths of vector nodes:
/// tree_structure_error otherwise). Leaves come with the value category of their tree.
template <class F, class T, class... Ts>
[[nodiscard]] auto tree_map(F&& f, T&& t, Ts&&... ts) {
  auto g = [&f](const tree_path&, auto&&... leaves) -> decltype(auto) {
    return f(std::forward<decltype(leaves)>(leaves)...);
  };
  const tree_path root;
  return detail::map(g, root, std::forward<T>(t), std::forward<Ts>(ts)...);
}

/// tree_map with the leaf's path first: `f(const tree_path&, leaf, leaves...)`.
template <class F, class T, class... Ts>
[[nodiscard]] auto tree_map_with_path(F&& f, T&& t, Ts&&... ts) {
  const tree_path root;
  return detail::map(f, root, std::forward<T>(t), std::forward<Ts>(ts)...);
}

/// Calls `f(leaf, leaves of trees...)` for every leaf, in traversal order.
template <class F, class T, class... Ts>
void for_each_leaf(F&& f, T&& t, Ts&&... ts) {
  auto g = [&f](const tree_path&, auto&&... leaves) { f(std::forward<decltype(leaves)>(leaves)...); };
  const tree_path root;
  detail::walk(g, root, std::forward<T>(t), std::forward<Ts>(ts)...);
}

/// Calls `f(const tree_path&, leaf, leaves...)` for every leaf, in traversal order.
template <class F, class T, class... Ts>
void for_each_leaf_with_path(F&& f, T&& t, Ts&&... ts) {
  const tree_path root;
  detail::walk(f, root, std::forward<T>(t), std::forward<Ts>(ts)...);
}

/// One leaf, as `leaves()` reports it. `data` points into the tree (device memory when `device`
/// is not the cpu); it is valid while the tree is.
struct leaf_info {
  std::string path;
  leaf_kind kind = leaf_kind::scalar;
  devicekit::device device;
  const void* data = nullptr;
  std::size_t size = 0;          ///< stored elements
  std::size_t element_size = 0;  ///< bytes per element
  std::size_t bytes = 0;         ///< size * element_size
  std::vector<std::size_t> shape;
  std::string_view element_type;  ///< "float32", "int64", ...
};

/// Describes one leaf (no path).
template <class L>
[[nodiscard]] leaf_info describe_leaf(const L& leaf) {
  using traits = leaf_traits<std::remove_cvref_t<L>>;
  static_assert(traits::is_leaf, "describe_leaf: L must be a leaf");
  leaf_info info;
  info.kind = traits::kind;
  info.device = traits::device(leaf);
  info.data = traits::data(leaf);
  info.size = traits::size(leaf);
  info.element_size = sizeof(typename traits::element_type);
  info.bytes = info.size * info.element_size;
  const auto s = traits::shape(leaf);
  info.shape.assign(s.begin(), s.end());
  info.element_type = element_type_name<typename traits::element_type>();
  return info;
}

/// Every leaf of `t` in traversal order, with its path under the root name `root`.
template <class T>
[[nodiscard]] std::vector<leaf_info> leaves(const T& t, std::string_view root = {}) {
  std::vector<leaf_info> out;
  auto f = [&out](const tree_path& path, const auto& leaf) {
    out.push_back(describe_leaf(leaf));
    out.back().path = path.str();
  };
  const tree_path r(root);
  detail::walk(f, r, t);
  return out;
}

/// Number of leaves.
template <class T>
[[nodiscard]] std::size_t leaf_count(const T& t) {
  std::size_t n = 0;
  for_each_leaf([&n](const auto&) { ++n; }, t);
  return n;
}

/// Bytes stored in all leaves (scalars count their size).
template <class T>
[[nodiscard]] std::size_t total_bytes(const T& t) {
  std::size_t n = 0;
  for_each_leaf(
      [&n](const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        n += traits::size(leaf) * sizeof(typename traits::element_type);
      },
      t);
  return n;
}

/// A tree's structure without its leaves, printable and comparable: leaves are `*`, tuples
/// `(a,b)`, arrays and vectors `[a,b]`, structs `{name:a,other:b}`. Two trees have the same
/// structure when their node kinds, arities, lengths and member names agree, whatever their
/// leaf types (so a host tree and its placed copy compare equal).
class tree_def {
 public:
  tree_def() = default;
  tree_def(std::string repr, std::size_t leaves) : repr_(std::move(repr)), leaves_(leaves) {}
  [[nodiscard]] const std::string& str() const noexcept { return repr_; }
  [[nodiscard]] std::size_t num_leaves() const noexcept { return leaves_; }
  friend bool operator==(const tree_def& a, const tree_def& b) noexcept { return a.repr_ == b.repr_; }

 private:
  std::string repr_;
  std::size_t leaves_ = 0;
};

/// The structure of `t`.
template <class T>
[[nodiscard]] tree_def structure(const T& t) {
  std::string repr;
  std::size_t n = 0;
  detail::describe_structure(t, repr, n);
  return {std::move(repr), n};
}

/// True when `a` and `b` have the same structure (see tree_def).
template <class A, class B>
[[nodiscard]] bool same_structure(const A& a, const B& b) {
  return structure(a) == structure(b);
}

}  // namespace devicekit
