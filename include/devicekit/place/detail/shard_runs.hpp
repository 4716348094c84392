#pragma once
/// \file
/// The device path's plan for one leaf's shard (place/detail/shard_device.hpp runs it): the runs
/// of bytes that copy the shard from the source leaf, laid out as slice_leaf lays the host slice
/// out, and whether it has padding to zero. No CUDA here: plain arithmetic on strides.
#include <devicekit/place/detail/shard_plan.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/mdspan.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

namespace devicekit::detail {

/// One copy of a leaf's shard, in bytes from the leaf's data and from the shard leaf's start.
struct shard_byte_run {
  std::size_t src = 0;
  std::size_t dst = 0;
  std::size_t bytes = 0;
};

/// Shard runs beyond this many for one leaf (a split that leaves only tiny pieces) go through
/// the host path instead: their submissions would cost more than the host gather.
inline constexpr std::size_t max_device_shard_runs = std::size_t{1} << 16;

/// The runs that copy the box [begin, begin + count) of a strided source (element strides
/// `src_stride`) into a dense destination of strides `dst_stride`, both in elements of `esize`
/// bytes. Dimensions are walked fastest first; the innermost ones are merged into one run while
/// both sides stay contiguous (a layout_right leaf split along dimension 0 is one run). False when
/// the fastest dimension is not contiguous on both sides, or when there would be too many runs.
[[nodiscard]] DEVICEKIT_DECL bool box_runs(std::span<const std::size_t> src_stride,
                                           std::span<const std::size_t> dst_stride, std::span<const std::size_t> begin,
                                           std::span<const std::size_t> count, std::size_t esize,
                                           std::vector<shard_byte_run>& out);

/// The shard of one array leaf as laid out on the device: its element count, the runs that fill
/// it from the leaf's data, and whether it has padding (zeroed on the device).
struct device_leaf_shard {
  std::size_t elements = 0;
  std::size_t element_bytes = 0;
  std::vector<shard_byte_run> runs;
  bool padded = false;
};

/// Plans the shard of `leaf` for `split`, laid out as slice_leaf lays the host slice out
/// (contiguous: 1-D; shaped: layout_left stays, others become layout_right). False when its
/// layout asks for a copy per element (the host path gathers those).
template <class L>
[[nodiscard]] bool plan_device_leaf_shard(const L& leaf, const leaf_split& split, device_leaf_shard& out) {
  using traits = leaf_traits<L>;
  using E = typename traits::element_type;
  out.element_bytes = sizeof(E);
  if constexpr (traits::kind == leaf_kind::contiguous) {
    const part_range r = split.dim(0, traits::size(leaf));
    out.elements = r.size;
    out.padded = r.size != r.valid;
    const std::size_t one = 1;
    return box_runs(std::span(&one, 1), std::span(&one, 1), std::span(&r.begin, 1), std::span(&r.valid, 1), sizeof(E),
                    out.runs);
#if DEVICEKIT_HAS_MDSPAN
  } else if constexpr (traits::kind == leaf_kind::shaped) {
    const auto& sm = leaf.mapping();
    using src_layout = typename std::remove_cvref_t<decltype(sm)>::layout_type;
    constexpr std::size_t R = std::remove_cvref_t<decltype(sm)>::extents_type::rank();
    std::vector<std::size_t> src_stride(R), dst_stride(R), begin(R), valid(R), size(R);
    for (std::size_t d = 0; d < R; ++d) {
      const auto full = static_cast<std::size_t>(sm.extents().extent(d));
      const part_range r = split.dim(d, full);
      begin[d] = r.begin;
      valid[d] = r.valid;
      size[d] = r.size;
      if (r.size != r.valid) out.padded = true;
      src_stride[d] = static_cast<std::size_t>(sm.stride(d));
    }
    out.elements = 1;
    for (std::size_t d = 0; d < R; ++d) out.elements *= size[d];
    std::size_t step = 1;
    for (std::size_t k = 0; k < R; ++k) {  // the shard's dense strides
      const std::size_t d = std::is_same_v<src_layout, md::layout_left> ? k : R - 1 - k;
      dst_stride[d] = step;
      step *= size[d];
    }
    return box_runs(src_stride, dst_stride, begin, valid, sizeof(E), out.runs);
#endif
  } else {
    (void)leaf;
    (void)split;
    return false;
  }
}

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/detail/shard_runs.ipp>
#endif
