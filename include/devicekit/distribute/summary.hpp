#pragma once
/// \file
/// `summarize_tree(tree)`: what a distribution scheme sees of a tree (tree_summary): its batch
/// size (the leading extent of its array leaves; scalars have none), leaf count and bytes.
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/tree/tree.hpp>

#include <cstddef>
#include <type_traits>

namespace devicekit {

/// The batch is the leading extent of the first array leaf (0 when the tree has none); whether
/// the other leaves agree is for the sharding to check, with the leaves' paths in its message.
template <class T>
[[nodiscard]] tree_summary summarize_tree(const T& tree) {
  tree_summary s;
  bool have_batch = false;
  for_each_leaf(
      [&](const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        ++s.leaf_count;
        s.total_bytes += traits::size(leaf) * sizeof(typename traits::element_type);
        if constexpr (traits::rank > 0) {
          if (!have_batch) {
            s.batch = traits::shape(leaf)[0];
            have_batch = true;
          }
        }
      },
      tree);
  return s;
}

}  // namespace devicekit
