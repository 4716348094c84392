#pragma once
/// \file
/// One leaf's shard (place/detail/shard_plan.hpp says which part of it a device gets): the form
/// it takes (a device_array, or a shaped_array with dynamic extents: shaped_shard), its host
/// slice for the host path (slice_leaf: a view where contiguous, a gathered copy otherwise), and
/// its placed leaf for the device path (make_shard_leaf). Both paths give the same leaf types.
#include <devicekit/core/device.hpp>
#include <devicekit/place/detail/shard_plan.hpp>
#include <devicekit/tree/array.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/mdspan.hpp>

#include <array>
#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit::detail {

#if DEVICEKIT_HAS_MDSPAN
/// The form of a shaped leaf's shard: a shaped_array of the leaf's element type and rank, its
/// extents dynamic (the split ones change); layout_left stays, other layouts become layout_right.
template <class L>
struct shaped_shard {
  using source_mapping = std::remove_cvref_t<decltype(std::declval<const L&>().mapping())>;
  using source_layout = typename source_mapping::layout_type;
  static constexpr std::size_t rank = source_mapping::extents_type::rank();
  using index_type = typename source_mapping::extents_type::index_type;
  using extents = md::dextents<index_type, rank>;
  using layout = std::conditional_t<std::is_same_v<source_layout, md::layout_left>, md::layout_left, md::layout_right>;
  using array = shaped_array<typename leaf_traits<L>::element_type, extents, layout>;
  using mapping = typename array::mapping_type;

  /// The mapping of `leaf`'s shard for `split` (padding included).
  [[nodiscard]] static mapping mapping_for(const L& leaf, const leaf_split& split) {
    md::array<index_type, rank> size{};
    for (std::size_t d = 0; d < rank; ++d) {
      const auto full = static_cast<std::size_t>(leaf.mapping().extents().extent(d));
      size[d] = static_cast<index_type>(split.dim(d, full).size);
    }
    return mapping{extents(size)};
  }
};
#endif

/// Calls the mapping with the indices held in an array.
template <class Mapping, class Index, std::size_t R>
[[nodiscard]] std::size_t apply_mapping(const Mapping& m, const std::array<Index, R>& idx) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return static_cast<std::size_t>(m(static_cast<typename Mapping::index_type>(idx[I])...));
  }
  (std::make_index_sequence<R>{});
}

#if DEVICEKIT_HAS_MDSPAN
/// Copies the box [begin, begin + count) of `src` to [0, count) of `dst` (both mapped arrays).
/// Rows along the last dimension are one memcpy when both have stride 1 there.
template <class E, class SrcMapping, class DstMapping, std::size_t R>
void gather_box(const E* src, const SrcMapping& sm, E* dst, const DstMapping& dm,
                const std::array<std::size_t, R>& begin, const std::array<std::size_t, R>& count) {
  if constexpr (R == 0) {
    dst[0] = src[0];
  } else {
    for (std::size_t d = 0; d < R; ++d) {
      if (count[d] == 0) return;
    }
    const bool rows = sm.stride(R - 1) == 1 && dm.stride(R - 1) == 1;
    std::array<std::size_t, R> idx{};
    for (;;) {
      std::array<std::size_t, R> at{};
      for (std::size_t d = 0; d < R; ++d) at[d] = begin[d] + idx[d];
      if (rows) {
        std::memcpy(dst + apply_mapping(dm, idx), src + apply_mapping(sm, at), count[R - 1] * sizeof(E));
        idx[R - 1] = count[R - 1];
      } else {
        dst[apply_mapping(dm, idx)] = src[apply_mapping(sm, at)];
        ++idx[R - 1];
      }
      // Advance the multi-index, last dimension fastest.
      std::size_t d = R - 1;
      while (idx[d] >= count[d]) {
        if (d == 0) return;
        idx[d] = 0;
        --d;
        ++idx[d];
      }
    }
  }
}
#endif

template <std::size_t R>
[[nodiscard]] bool valid_all(const std::array<std::size_t, R>& valid) noexcept {
  for (auto v : valid) {
    if (v == 0) return false;
  }
  return true;
}

/// The host slice of `leaf` described by `split`: a view when the slice is contiguous in the
/// source and unpadded, else a gathered (zero-padded) copy.
template <class L>
[[nodiscard]] auto slice_leaf(const L& leaf, const leaf_split& split) {
  using traits = leaf_traits<L>;
  using E = typename traits::element_type;
  if constexpr (traits::kind == leaf_kind::scalar) {
    (void)split;
    return leaf;
  } else if constexpr (traits::kind == leaf_kind::contiguous) {
    E* data = const_cast<E*>(traits::data(leaf));
    const part_range r = split.dim(0, traits::size(leaf));
    if (r.size == r.valid) return device_array<E>::view(data + r.begin, r.valid);
    auto storage = std::make_shared<std::vector<E>>(r.size, E{});
    if (r.valid != 0) std::memcpy(storage->data(), data + r.begin, r.valid * sizeof(E));
    E* p = storage->data();
    return device_array<E>(std::shared_ptr<void>(std::move(storage), p), p, r.size, device::cpu());
#if DEVICEKIT_HAS_MDSPAN
  } else {
    using form = shaped_shard<L>;
    constexpr std::size_t R = form::rank;
    using index_type = typename form::index_type;
    using out_layout = typename form::layout;
    using out_array = typename form::array;
    const auto& sm = leaf.mapping();
    E* data = const_cast<E*>(traits::data(leaf));
    std::array<std::size_t, R> begin{};
    std::array<std::size_t, R> valid{};
    bool restricted_any = false;
    bool padded = false;
    std::size_t restricted_dim = 0;
    std::size_t restricted_count = 0;
    for (std::size_t d = 0; d < R; ++d) {
      const std::size_t full = static_cast<std::size_t>(sm.extents().extent(d));
      const part_range r = split.dim(d, full);
      begin[d] = r.begin;
      valid[d] = r.valid;
      if (r.size != r.valid) padded = true;
      if (r.valid != full || r.begin != 0) {
        restricted_any = true;
        restricted_dim = d;
        ++restricted_count;
      }
    }
    const typename form::mapping om = form::mapping_for(leaf, split);
    // A contiguous slice: layout_right restricted along dimension 0 only (layout_left: the last
    // only), or nothing restricted, and the source laid out as the result.
    if constexpr (std::is_same_v<typename form::source_layout, out_layout>) {
      const bool contiguous =
          !restricted_any ||
          (restricted_count == 1 && restricted_dim == (std::is_same_v<out_layout, md::layout_left> ? R - 1 : 0));
      if (contiguous && !padded) {
        std::array<index_type, R> first{};
        for (std::size_t d = 0; d < R; ++d) first[d] = static_cast<index_type>(begin[d]);
        const std::size_t offset = valid_all(valid) ? apply_mapping(sm, first) : 0;
        return out_array::view(data + offset, om);
      }
    }
    out_array out(om);  // zero-filled: padding stays zero
    gather_box(data, sm, out.data(), om, begin, valid);
    return out;
#else
  } else {
    static_assert(sizeof(L) == 0, "shard: shaped leaves need mdspan");
#endif
  }
}

/// The placed form of a leaf's shard at `p` on `dev`, kept alive by `owner`: the type the host
/// path's placement of slice_leaf's slice gives.
template <class L>
[[nodiscard]] auto make_shard_leaf(const L& leaf, const leaf_split& split, std::byte* p,
                                   const std::shared_ptr<void>& owner, device dev) {
  using traits = leaf_traits<L>;
  using E = typename traits::element_type;
  if constexpr (traits::kind == leaf_kind::scalar) {
    (void)split;
    (void)p;
    (void)owner;
    (void)dev;
    return leaf;
  } else if constexpr (traits::kind == leaf_kind::contiguous) {
    return device_array<E>(owner, reinterpret_cast<E*>(p), split.dim(0, traits::size(leaf)).size, dev);
#if DEVICEKIT_HAS_MDSPAN
  } else {
    using form = shaped_shard<L>;
    return typename form::array(owner, reinterpret_cast<E*>(p), form::mapping_for(leaf, split), dev);
#else
  } else {
    static_assert(sizeof(L) == 0, "shard: shaped leaves need mdspan");
#endif
  }
}

}  // namespace devicekit::detail
