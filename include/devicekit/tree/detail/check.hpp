#pragma once
/// \file
/// Compile-time checks of a tree's type: every part a leaf or a node (check_tree_type, which names
/// the first offending type through neither_leaf_nor_node<T>; soft_tree_type, which only answers),
/// and the same shape of trees traversed together (trees_differ_in_structure<First, Other>).
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/node.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

namespace devicekit {

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

}  // namespace devicekit
