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
#include <devicekit/core/error.hpp>
#include <devicekit/tree/array.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/node.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

/// Trees that should have had the same structure did not (thrown where the difference is only
/// known at run time: lengths of `std::vector` nodes).
class tree_structure_error : public error {
 public:
  using error::error;
};

/// The position of a subtree: a chain of keys from the root, kept on the stack while a traversal
/// runs. `str()` spells it ("batch.images", "layers[2].w").
class tree_path {
 public:
  /// The root; `name` (may be empty) starts every path.
  explicit constexpr tree_path(std::string_view name = {}) noexcept : name_(name) {}
  /// A named child (struct member) of `parent`.
  constexpr tree_path(const tree_path& parent, std::string_view name) noexcept : parent_(&parent), name_(name) {}
  /// A positional child (tuple element, array index) of `parent`.
  constexpr tree_path(const tree_path& parent, std::size_t index) noexcept
      : parent_(&parent), index_(index), positional_(true) {}

  [[nodiscard]] constexpr const tree_path* parent() const noexcept { return parent_; }
  [[nodiscard]] constexpr bool positional() const noexcept { return positional_; }
  [[nodiscard]] constexpr std::size_t index() const noexcept { return index_; }
  [[nodiscard]] constexpr std::string_view name() const noexcept { return name_; }
  [[nodiscard]] constexpr std::size_t depth() const noexcept { return parent_ ? parent_->depth() + 1 : 0; }

  [[nodiscard]] std::string str() const {
    std::string s = parent_ ? parent_->str() : std::string();
    if (positional_) {
      s.append("[").append(std::to_string(index_)).append("]");
    } else if (!name_.empty()) {
      if (!s.empty()) s.push_back('.');
      s.append(name_);
    }
    return s;
  }
  /// `str()`, or "(root)" for the root of an unnamed tree: for messages.
  [[nodiscard]] std::string display() const {
    std::string s = str();
    return s.empty() ? std::string("(root)") : s;
  }

 private:
  const tree_path* parent_ = nullptr;
  std::string_view name_;
  std::size_t index_ = 0;
  bool positional_ = false;
};

/// Instantiated for a type that is neither a leaf nor a node: the compiler's message shows T.
template <class T>
struct neither_leaf_nor_node {
  static_assert(sizeof(T) == 0,
                "devicekit tree: the type T in 'neither_leaf_nor_node<T>' is neither a leaf (arithmetic scalar, "
                "contiguous range of arithmetic values, shaped_array / mdspan) nor a node (std::tuple, std::pair, "
                "std::array or std::vector of subtrees, Boost.Hana struct: include <devicekit/tree/hana.hpp>); "
                "specialise devicekit::leaf_traits or devicekit::node_traits to make it one");
  static constexpr bool value = false;
};

/// Instantiated when trees traversed together differ in structure at compile time.
template <class First, class Other>
struct trees_differ_in_structure {
  static_assert(sizeof(First) == 0,
                "devicekit tree: trees traversed together must have the same structure; 'trees_differ_in_structure"
                "<First, Other>' shows a subtree of the first tree and the subtree at the same place in another");
  static constexpr bool value = false;
};

namespace detail {

template <class T>
constexpr std::size_t fixed_arity() noexcept {
  if constexpr (node_traits<T>::is_node) {
    if constexpr (node_traits<T>::fixed) return node_traits<T>::arity;
  }
  return 0;
}

template <class T, class Seq = std::make_index_sequence<fixed_arity<T>()>>
struct tree_check;

/// Walks the type of a tree; `value` is true when every part is a leaf or a node. The first
/// offending type is reported through neither_leaf_nor_node<T>.
template <class T>
constexpr bool check_tree_type() {
  if constexpr (leaf_traits<T>::is_leaf) {
    return true;
  } else if constexpr (node_traits<T>::is_node) {
    return tree_check<T>::value;
  } else {
    return neither_leaf_nor_node<T>::value;
  }
}

template <class T, std::size_t... I>
struct tree_check<T, std::index_sequence<I...>> {
  static constexpr bool value = [] {
    if constexpr (node_traits<T>::fixed) {
      return (check_tree_type<std::remove_cvref_t<typename node_traits<T>::template child_type<I>>>() && ...);
    } else {
      return check_tree_type<std::remove_cvref_t<typename node_traits<T>::child_type>>();
    }
  }();
};

}  // namespace detail

namespace detail {
template <class T, class Seq = std::make_index_sequence<fixed_arity<T>()>>
struct soft_tree_check;

/// check_tree_type without the diagnostic: false for a type that is not a tree.
template <class T>
constexpr bool soft_tree_type() {
  if constexpr (leaf_traits<T>::is_leaf) {
    return true;
  } else if constexpr (node_traits<T>::is_node) {
    return soft_tree_check<T>::value;
  } else {
    return false;
  }
}

template <class T, std::size_t... I>
struct soft_tree_check<T, std::index_sequence<I...>> {
  static constexpr bool value = [] {
    if constexpr (node_traits<T>::fixed) {
      return (soft_tree_type<std::remove_cvref_t<typename node_traits<T>::template child_type<I>>>() && ...);
    } else {
      return soft_tree_type<std::remove_cvref_t<typename node_traits<T>::child_type>>();
    }
  }();
};
}  // namespace detail

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

namespace detail {

template <class First, class Other>
constexpr void check_same_shape() {
  using F = std::remove_cvref_t<First>;
  using O = std::remove_cvref_t<Other>;
  if constexpr (leaf_traits<F>::is_leaf) {
    if constexpr (!leaf_traits<O>::is_leaf) (void)trees_differ_in_structure<F, O>::value;
  } else if constexpr (!node_traits<O>::is_node) {
    (void)trees_differ_in_structure<F, O>::value;
  } else if constexpr (node_traits<F>::fixed != node_traits<O>::fixed) {
    (void)trees_differ_in_structure<F, O>::value;
  } else if constexpr (node_traits<F>::fixed) {
    if constexpr (node_traits<F>::arity != node_traits<O>::arity) (void)trees_differ_in_structure<F, O>::value;
  }
}

template <class Node, class... Others>
void check_sizes(const tree_path& path, const Node& n, const Others&... os) {
  if constexpr (sizeof...(Others) != 0) {
    const std::size_t size = node_traits<std::remove_cvref_t<Node>>::size(n);
    std::size_t which = 1;
    auto one = [&](const auto& o) {
      ++which;
      const std::size_t other = node_traits<std::remove_cvref_t<decltype(o)>>::size(o);
      if (other != size) {
        throw tree_structure_error("trees traversed together differ at '" + path.display() + "': " +
                                   std::to_string(size) + " children in the first tree, " + std::to_string(other) +
                                   " in tree " + std::to_string(which));
      }
    };
    (one(os), ...);
  } else {
    (void)path;
    (void)n;
  }
}

template <class N, std::size_t I>
constexpr tree_path child_path(const tree_path& parent) noexcept {
  constexpr std::string_view name = node_traits<N>::template key_name<I>();
  if constexpr (name.empty()) {
    return tree_path(parent, I);
  } else {
    return tree_path(parent, name);
  }
}

template <class F, class T, class... Ts>
void walk(F& f, const tree_path& path, T&& t, Ts&&... ts);
template <class F, class T, class... Ts>
auto map(F& f, const tree_path& path, T&& t, Ts&&... ts);

/// Child I of fixed nodes t, ts... (a function of its own: g++ cannot expand the positions and
/// the trees in one pattern).
template <std::size_t I, class F, class T, class... Ts>
void walk_child(F& f, const tree_path& parent, T&& t, Ts&&... ts) {
  using N = std::remove_cvref_t<T>;
  walk(f, child_path<N, I>(parent), node_traits<N>::template get<I>(std::forward<T>(t)),
       node_traits<std::remove_cvref_t<Ts>>::template get<I>(std::forward<Ts>(ts))...);
}
template <std::size_t I, class F, class T, class... Ts>
auto map_child(F& f, const tree_path& parent, T&& t, Ts&&... ts) {
  using N = std::remove_cvref_t<T>;
  return map(f, child_path<N, I>(parent), node_traits<N>::template get<I>(std::forward<T>(t)),
             node_traits<std::remove_cvref_t<Ts>>::template get<I>(std::forward<Ts>(ts))...);
}

/// Calls f(path, leaf, leaves...) for every leaf, in order.
template <class F, class T, class... Ts>
void walk(F& f, const tree_path& path, T&& t, Ts&&... ts) {
  using N = std::remove_cvref_t<T>;
  (check_same_shape<T, Ts>(), ...);
  if constexpr (!check_tree_type<N>()) {
    return;  // the compiler has already named the offending type
  } else if constexpr (leaf_traits<N>::is_leaf) {
    f(path, std::forward<T>(t), std::forward<Ts>(ts)...);
  } else if constexpr (node_traits<N>::fixed) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (walk_child<I>(f, path, std::forward<T>(t), std::forward<Ts>(ts)...), ...);
    }(std::make_index_sequence<node_traits<N>::arity>{});
  } else {
    check_sizes(path, t, ts...);
    const std::size_t n = node_traits<N>::size(t);
    for (std::size_t i = 0; i < n; ++i) {
      walk(f, tree_path(path, i), node_traits<N>::get(std::forward<T>(t), i),
           node_traits<std::remove_cvref_t<Ts>>::get(std::forward<Ts>(ts), i)...);
    }
  }
}

/// The same structure with every leaf replaced by f(path, leaf, leaves...).
template <class F, class T, class... Ts>
auto map(F& f, const tree_path& path, T&& t, Ts&&... ts) {
  using N = std::remove_cvref_t<T>;
  (check_same_shape<T, Ts>(), ...);
  if constexpr (!check_tree_type<N>()) {
    return 0;  // the compiler has already named the offending type
  } else if constexpr (leaf_traits<N>::is_leaf) {
    using R = std::decay_t<decltype(f(path, std::forward<T>(t), std::forward<Ts>(ts)...))>;
    static_assert(!std::is_void_v<R>, "tree_map: the function must return the new leaf (use for_each_leaf to only visit)");
    return R(f(path, std::forward<T>(t), std::forward<Ts>(ts)...));
  } else if constexpr (node_traits<N>::fixed) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      // Braced initialisation evaluates the children left to right: the order every traversal
      // promises (placement relies on it).
      using children_t =
          std::tuple<decltype(map_child<I>(f, path, std::forward<T>(t), std::forward<Ts>(ts)...))...>;
      children_t children{map_child<I>(f, path, std::forward<T>(t), std::forward<Ts>(ts)...)...};
      return node_traits<N>::rebuild(std::move(children));
    }(std::make_index_sequence<node_traits<N>::arity>{});
  } else {
    check_sizes(path, t, ts...);
    using U = decltype(map(f, path, node_traits<N>::get(std::forward<T>(t), 0),
                           node_traits<std::remove_cvref_t<Ts>>::get(std::forward<Ts>(ts), 0)...));
    using Out = typename node_traits<N>::template rebind<U>;
    auto child = [&](std::size_t i) {
      return map(f, tree_path(path, i), node_traits<N>::get(std::forward<T>(t), i),
                 node_traits<std::remove_cvref_t<Ts>>::get(std::forward<Ts>(ts), i)...);
    };
    if constexpr (node_traits<N>::dynamic) {
      Out out;
      const std::size_t n = node_traits<N>::size(t);
      out.reserve(n);
      for (std::size_t i = 0; i < n; ++i) out.push_back(child(i));
      return out;
    } else if constexpr (std::is_default_constructible_v<U> && std::is_move_assignable_v<U>) {
      Out out;
      for (std::size_t i = 0; i < node_traits<N>::extent; ++i) out[i] = child(i);
      return out;
    } else {
      return [&]<std::size_t... I>(std::index_sequence<I...>) { return Out{child(I)...}; }(
          std::make_index_sequence<node_traits<N>::extent>{});
    }
  }
}

}  // namespace detail

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

namespace detail {
template <class T>
void describe_structure(const T& t, std::string& out, std::size_t& leaves) {
  using N = std::remove_cvref_t<T>;
  if constexpr (!check_tree_type<N>()) {
    return;  // the compiler has already named the offending type
  } else if constexpr (leaf_traits<N>::is_leaf) {
    out.push_back('*');
    ++leaves;
  } else if constexpr (node_traits<N>::fixed) {
    const bool record = node_traits<N>::kind == node_kind::record;
    out.push_back(record ? '{' : '(');
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto one = [&](auto index, const auto& child) {
        if (index.value != 0) out.push_back(',');
        constexpr std::string_view name = node_traits<N>::template key_name<decltype(index)::value>();
        if (!name.empty()) out.append(name).push_back(':');
        describe_structure(child, out, leaves);
      };
      (one(std::integral_constant<std::size_t, I>{}, node_traits<N>::template get<I>(t)), ...);
      (void)one;  // an empty tuple has no children
    }(std::make_index_sequence<node_traits<N>::arity>{});
    out.push_back(record ? '}' : ')');
  } else {
    out.push_back('[');
    const std::size_t n = node_traits<N>::size(t);
    for (std::size_t i = 0; i < n; ++i) {
      if (i != 0) out.push_back(',');
      describe_structure(node_traits<N>::get(t, i), out, leaves);
    }
    out.push_back(']');
  }
}
}  // namespace detail

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
