#pragma once
/// \file
/// What a tree node is. `node_traits<N>` says whether `N` is a node and how to reach its
/// children. Two shapes of node:
///
///   fixed        a fixed number of children of possibly different types, each with a key that
///                is its position (`std::tuple`, `std::pair`) or its name (Boost.Hana structs,
///                tree/hana.hpp): `arity`, `get<I>(n)`, `key_name<I>()`, `rebuild<Us...>(tuple)`
///   homogeneous  children of one type, addressed by index (`std::array<Subtree, N>`, and
///                `std::vector<Subtree>` whose length is known at run time): `size(n)`,
///                `get(n, i)`, `rebind<U>`
///
/// An array or vector of arithmetic values is a leaf (tree/leaf.hpp), not a node.
#include <devicekit/tree/leaf.hpp>

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

enum class node_kind : std::uint8_t { tuple, array, list, record };

/// The primary template: not a node.
template <class N>
struct node_traits {
  static constexpr bool is_node = false;
};

/// True when `N` (cv-ref ignored) is a node.
template <class N>
inline constexpr bool is_node_v = node_traits<std::remove_cvref_t<N>>::is_node;

namespace detail {
/// Forwards a member of `n` with the value category of `n` (an rvalue tree gives rvalue leaves).
template <class Self, class M>
constexpr decltype(auto) forward_member(M& m) noexcept {
  if constexpr (std::is_lvalue_reference_v<Self>) {
    return static_cast<M&>(m);
  } else {
    return static_cast<M&&>(m);
  }
}
}  // namespace detail

template <class... Ts>
struct node_traits<std::tuple<Ts...>> {
  static constexpr bool is_node = true;
  static constexpr bool fixed = true;
  static constexpr node_kind kind = node_kind::tuple;
  static constexpr std::size_t arity = sizeof...(Ts);
  template <std::size_t I>
  using child_type = std::tuple_element_t<I, std::tuple<Ts...>>;
  template <std::size_t I, class Self>
  static constexpr decltype(auto) get(Self&& n) noexcept {
    return std::get<I>(std::forward<Self>(n));
  }
  template <std::size_t I>
  static constexpr std::string_view key_name() noexcept {
    return {};
  }
  template <class... Us>
  static std::tuple<Us...> rebuild(std::tuple<Us...>&& children) {
    return std::move(children);
  }
};

template <class A, class B>
struct node_traits<std::pair<A, B>> {
  static constexpr bool is_node = true;
  static constexpr bool fixed = true;
  static constexpr node_kind kind = node_kind::tuple;
  static constexpr std::size_t arity = 2;
  template <std::size_t I>
  using child_type = std::tuple_element_t<I, std::pair<A, B>>;
  template <std::size_t I, class Self>
  static constexpr decltype(auto) get(Self&& n) noexcept {
    return std::get<I>(std::forward<Self>(n));
  }
  template <std::size_t I>
  static constexpr std::string_view key_name() noexcept {
    return {};
  }
  template <class U0, class U1>
  static std::pair<U0, U1> rebuild(std::tuple<U0, U1>&& children) {
    return {std::get<0>(std::move(children)), std::get<1>(std::move(children))};
  }
};

/// `std::array` of subtrees (an array of elements is a contiguous leaf instead).
template <class T, std::size_t N>
requires(!leaf_element<T>) struct node_traits<std::array<T, N>> {
  static constexpr bool is_node = true;
  static constexpr bool fixed = false;
  static constexpr bool dynamic = false;
  static constexpr node_kind kind = node_kind::array;
  static constexpr std::size_t extent = N;
  using child_type = T;
  template <class U>
  using rebind = std::array<U, N>;
  static constexpr std::size_t size(const std::array<T, N>&) noexcept { return N; }
  template <class Self>
  static constexpr decltype(auto) get(Self&& n, std::size_t i) noexcept {
    return detail::forward_member<Self>(n[i]);
  }
};

/// `std::vector` of subtrees: a node whose number of children is known at run time (a vector
/// of elements is a contiguous leaf instead).
template <class T, class Alloc>
requires(!leaf_element<T>) struct node_traits<std::vector<T, Alloc>> {
  static constexpr bool is_node = true;
  static constexpr bool fixed = false;
  static constexpr bool dynamic = true;
  static constexpr node_kind kind = node_kind::list;
  using child_type = T;
  template <class U>
  using rebind = std::vector<U>;
  static std::size_t size(const std::vector<T, Alloc>& v) noexcept { return v.size(); }
  template <class Self>
  static decltype(auto) get(Self&& n, std::size_t i) noexcept {
    return detail::forward_member<Self>(n[i]);
  }
};

}  // namespace devicekit
