#pragma once
/// \file
/// The leaves placement makes and reads: the placed and host forms of a leaf, its writable bytes,
/// and the one device a tree's non-host leaves are on (for the calls that need only that; the
/// others flatten the tree, tree/flat.hpp).
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/tree/array.hpp>
#include <devicekit/tree/flat.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/mdspan.hpp>
#include <devicekit/tree/path.hpp>
#include <devicekit/tree/tree.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace devicekit::detail {

/// The leaf that placing `leaf` gives, at `p` on `dev`, kept alive by `owner`.
template <class L>
[[nodiscard]] auto make_placed_leaf(const L& leaf, std::byte* p, const std::shared_ptr<void>& owner, device dev) {
  using traits = leaf_traits<L>;
  using E = typename traits::element_type;
  if constexpr (traits::kind == leaf_kind::scalar) {
    return leaf;
  } else if constexpr (traits::kind == leaf_kind::contiguous) {
    return device_array<E>(owner, reinterpret_cast<E*>(p), traits::size(leaf), dev);
  } else if constexpr (is_shaped_array_v<L>) {
    return L(owner, reinterpret_cast<E*>(p), leaf.mapping(), dev);
#if DEVICEKIT_HAS_MDSPAN
  } else if constexpr (is_mdspan_view_v<L>) {
    return shaped_array<E, typename L::extents_type, typename L::layout_type>(owner, reinterpret_cast<E*>(p),
                                                                              leaf.mapping(), dev);
#endif
  } else {
    static_assert(sizeof(L) == 0, "place: a shaped leaf type of your own needs a placed form: use shaped_array");
  }
}

/// A host leaf of the shape `leaf` has (what to_host gives): a copy of the elements at
/// `copy_from` (host memory, the leaf's stored elements) made as it is built, or zero-filled
/// for a copy to come (nullptr). Built from the elements, a std::vector is written once, as a
/// hand-written `std::vector<E>(p, p + n)` is, rather than zeroed and then overwritten.
template <class L>
[[nodiscard]] auto make_host_leaf(const L& leaf, const std::byte* copy_from = nullptr) {
  using traits = leaf_traits<L>;
  using E = typename traits::element_type;
  [[maybe_unused]] const auto* from = reinterpret_cast<const E*>(copy_from);
  if constexpr (traits::kind == leaf_kind::scalar) {
    return leaf;
  } else if constexpr (traits::kind == leaf_kind::contiguous) {
    const std::size_t n = traits::size(leaf);
    return from != nullptr ? std::vector<E>(from, from + n) : std::vector<E>(n);
  } else if constexpr (is_shaped_array_v<L>) {
    if (from == nullptr) return L(leaf.mapping());
    return L(std::vector<E>(from, from + traits::size(leaf)), leaf.mapping());
#if DEVICEKIT_HAS_MDSPAN
  } else if constexpr (is_mdspan_view_v<L>) {
    using host_t = shaped_array<E, typename L::extents_type, typename L::layout_type>;
    if (from == nullptr) return host_t(leaf.mapping());
    return host_t(std::vector<E>(from, from + traits::size(leaf)), leaf.mapping());
#endif
  } else {
    static_assert(sizeof(L) == 0, "to_host: a shaped leaf type of your own needs a host form: use shaped_array");
  }
}

/// The first byte of `leaf`'s elements, writable (for the leaves a copy fills).
template <class L>
[[nodiscard]] std::byte* mutable_bytes(const L& leaf) noexcept {
  using traits = leaf_traits<L>;
  return reinterpret_cast<std::byte*>(const_cast<typename traits::element_type*>(traits::data(leaf)));
}

/// The device of a tree's array leaves that are not on the host, checked to be one: a tree is
/// moved as a whole, in one transfer, from one place. Host leaves may be mixed in.
template <class T>
[[nodiscard]] std::optional<device> source_device(const T& tree, const char* operation) {
  // Devices only; the paths are spelled out by a second walk when two disagree (tree/flat.hpp).
  std::optional<device> found;
  bool mixed = false;
  for_each_leaf(
      [&](const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        if constexpr (traits::kind != leaf_kind::scalar) {
          const device d = traits::device(leaf);
          if (d.is_cpu()) return;
          if (!found) {
            found = d;
          } else if (*found != d) {
            mixed = true;
          }
        }
      },
      tree);
  if (mixed) throw_mixed_devices(tree, operation);
  return found;
}

}  // namespace devicekit::detail
