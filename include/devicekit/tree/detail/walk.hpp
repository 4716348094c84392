#pragma once
/// \file
/// The traversal behind for_each_leaf and tree_map (tree/tree.hpp): walk calls f(path, leaf,
/// leaves...) for every leaf in order, map rebuilds the structure from f's results; both check
/// that trees traversed together have the same shape.
#include <devicekit/tree/detail/check.hpp>
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

namespace devicekit {

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
        throw tree_structure_error("trees traversed together differ at '" + path.display() +
                                   "': " + std::to_string(size) + " children in the first tree, " +
                                   std::to_string(other) + " in tree " + std::to_string(which));
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
    }
    (std::make_index_sequence<node_traits<N>::arity>{});
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
    static_assert(!std::is_void_v<R>,
                  "tree_map: the function must return the new leaf (use for_each_leaf to only visit)");
    return R(f(path, std::forward<T>(t), std::forward<Ts>(ts)...));
  } else if constexpr (node_traits<N>::fixed) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      // Braced initialisation evaluates the children left to right: the order every traversal
      // promises (placement relies on it).
      using children_t = std::tuple<decltype(map_child<I>(f, path, std::forward<T>(t), std::forward<Ts>(ts)...))...>;
      children_t children{map_child<I>(f, path, std::forward<T>(t), std::forward<Ts>(ts)...)...};
      return node_traits<N>::rebuild(std::move(children));
    }
    (std::make_index_sequence<node_traits<N>::arity>{});
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
      return [&]<std::size_t... I>(std::index_sequence<I...>) { return Out{child(I)...}; }
      (std::make_index_sequence<node_traits<N>::extent>{});
    }
  }
}

}  // namespace detail

}  // namespace devicekit
