#pragma once
/// \file
/// describe_structure: a tree's structure without its leaves, as tree_def (tree/tree.hpp) prints
/// it.
#include <devicekit/tree/detail/check.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/node.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace devicekit {

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
    }
    (std::make_index_sequence<node_traits<N>::arity>{});
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

}  // namespace devicekit
