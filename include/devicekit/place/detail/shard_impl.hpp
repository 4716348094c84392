#pragma once
/// \file
/// shard's and replicate's machinery (place/shard.hpp has the API): how a dimension is split
/// (part_range, the uneven policies), host slices of leaves (views where contiguous, gathered
/// boxes otherwise), and shard_host_tree in its steps: plan the axes, agree on the batch size,
/// check the split, slice per device, place each slice.
#include <devicekit/core/uneven.hpp>
#include <devicekit/place/mesh.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/sharded.hpp>
#include <devicekit/place/split.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// One part of a dimension of size n split `parts` ways: the source rows [begin, begin + valid)
/// and the part's size (valid, or more with padding).
struct part_range {
  std::size_t begin = 0;
  std::size_t valid = 0;
  std::size_t size = 0;
};

[[nodiscard]] inline part_range split_part(std::size_t n, std::size_t parts, std::size_t index, uneven policy) {
  if (policy == uneven::error || n % parts == 0) {
    const std::size_t per = n / parts;
    return {index * per, per, per};
  }
  if (policy == uneven::ragged) {
    const row_range r = balanced_rows(n, parts, index);
    return {r.begin, r.count, r.count};
  }
  // pad: every part ceil(n / parts) rows, filled in order, so the padding is at the end (flax).
  const std::size_t per = (n + parts - 1) / parts;
  const std::size_t begin = std::min(n, index * per);
  const std::size_t valid = std::min(per, n - begin);
  return {begin, valid, per};
}

/// Part `index` of the batch axis: from `counts` (rows per part, checked by the caller) when
/// given, else by `policy`.
[[nodiscard]] inline part_range batch_part(std::size_t n, std::size_t parts, std::size_t index, uneven policy,
                                           std::span<const std::size_t> counts) {
  if (counts.empty()) return split_part(n, parts, index, policy);
  std::size_t begin = 0;
  for (std::size_t i = 0; i < index; ++i) begin += counts[i];
  return {begin, counts[index], counts[index]};
}

[[nodiscard]] inline std::string uneven_message(std::string_view what, std::size_t axis, std::size_t n,
                                                std::size_t parts, const std::string& mesh_axis) {
  const std::size_t per = (n + parts - 1) / parts;
  return "shard: " + std::string(what) + "axis " + std::to_string(axis) + " of size " + std::to_string(n) +
         " cannot be split evenly over " + std::to_string(parts) + " devices (mesh axis '" + mesh_axis +
         "'): " + std::to_string(n) + " = " + std::to_string(parts) + " x " + std::to_string(n / parts) + " + " +
         std::to_string(n % parts) + "; use uneven::pad (adds " + std::to_string(per * parts - n) +
         " zero row(s), like flax) or uneven::ragged (shard sizes differ by at most one row)";
}

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

/// Everything a shard of one leaf needs: per-dimension parts for one device.
struct leaf_split {
  std::vector<part_range> dims;  ///< one per dimension of the leaf
};

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
    const part_range r = split.dims.empty() ? part_range{0, traits::size(leaf), traits::size(leaf)} : split.dims[0];
    if (r.size == r.valid) return device_array<E>::view(data + r.begin, r.valid);
    auto storage = std::make_shared<std::vector<E>>(r.size, E{});
    if (r.valid != 0) std::memcpy(storage->data(), data + r.begin, r.valid * sizeof(E));
    E* p = storage->data();
    return device_array<E>(std::shared_ptr<void>(std::move(storage), p), p, r.size, device::cpu());
#if DEVICEKIT_HAS_MDSPAN
  } else {
    using src_extents = typename std::remove_cvref_t<decltype(leaf.mapping())>::extents_type;
    using src_layout = typename std::remove_cvref_t<decltype(leaf.mapping())>::layout_type;
    constexpr std::size_t R = src_extents::rank();
    using index_type = typename src_extents::index_type;
    using out_extents = md::dextents<index_type, R>;
    using out_layout =
        std::conditional_t<std::is_same_v<src_layout, md::layout_left>, md::layout_left, md::layout_right>;
    using out_array = shaped_array<E, out_extents, out_layout>;
    using out_mapping = typename out_array::mapping_type;
    const auto& sm = leaf.mapping();
    E* data = const_cast<E*>(traits::data(leaf));
    std::array<std::size_t, R> begin{};
    std::array<std::size_t, R> valid{};
    md::array<index_type, R> size{};
    bool restricted_any = false;
    bool padded = false;
    std::size_t restricted_dim = 0;
    std::size_t restricted_count = 0;
    for (std::size_t d = 0; d < R; ++d) {
      const std::size_t full = static_cast<std::size_t>(sm.extents().extent(d));
      const part_range r = d < split.dims.size() ? split.dims[d] : part_range{0, full, full};
      begin[d] = r.begin;
      valid[d] = r.valid;
      size[d] = static_cast<index_type>(r.size);
      if (r.size != r.valid) padded = true;
      if (r.valid != full || r.begin != 0) {
        restricted_any = true;
        restricted_dim = d;
        ++restricted_count;
      }
    }
    const out_mapping om{out_extents(size)};
    // A contiguous slice: layout_right restricted along dimension 0 only (layout_left: the last
    // only), or nothing restricted, and the source laid out as the result.
    if constexpr (std::is_same_v<src_layout, out_layout>) {
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

/// A callable giving the resource to allocate from on a device.
template <class F>
concept resource_selector =
    std::invocable<F&, device> && placement_resource<std::remove_reference_t<std::invoke_result_t<F&, device>>>;

struct default_resource_selector {
  device_memory& operator()(device d) const { return default_placement_resource(d); }
};

/// Waits for the placement streams of the cuda devices in `devices`.
inline void finish_on(const std::vector<device>& devices) {
#if DEVICEKIT_HAS_CUDA
  std::vector<device> done;
  for (const device d : devices) {
    if (d.is_cuda() && std::find(done.begin(), done.end(), d) == done.end()) {
      host_wait(placement_stream(d));
      done.push_back(d);
    }
  }
#else
  (void)devices;
#endif
}

/// place on `dev`'s placement stream (cuda, not waited for: finish_on does) or inline (cpu). For
/// shard and replicate, which take no stream: ordered as such calls are (default_ordered_stream).
template <class T, class R>
[[nodiscard]] auto place_queued(const T& tree, device dev, R& resource) {
#if DEVICEKIT_HAS_CUDA
  if (dev.is_cuda()) return place(tree, dev, default_ordered_stream(dev, source_device(tree, "place")), resource);
#endif
  const stream inline_stream;
  return place(tree, dev, inline_stream, resource);
}

/// How a partition_spec maps onto a mesh: the mesh axis each leaf dimension is split over (none:
/// not split), and the batch dimension (the first split one).
struct axis_plan {
  std::vector<std::optional<std::size_t>> dim_axis;
  std::optional<std::size_t> batch_dim;
};

/// Step 1: resolves the spec's axis names on the mesh (config_error for an unknown axis, or for
/// one axis named at two dimensions, which jax.sharding.PartitionSpec refuses too).
[[nodiscard]] inline axis_plan plan_axes(const mesh& m, const partition_spec& spec) {
  axis_plan p;
  p.dim_axis.resize(spec.size());
  for (std::size_t d = 0; d < spec.size(); ++d) {
    if (!spec[d]) continue;
    const auto a = m.axis_index(*spec[d]);
    if (!a) {
      throw config_error("shard: " + spec.str() + " names mesh axis '" + *spec[d] + "', which " + m.str() +
                         " does not have");
    }
    for (std::size_t e = 0; e < d; ++e) {
      if (p.dim_axis[e] == a) {
        throw config_error("shard: " + spec.str() + " splits two dimensions over mesh axis '" + *spec[d] + "'");
      }
    }
    p.dim_axis[d] = a;
    if (!p.batch_dim) p.batch_dim = d;
  }
  return p;
}

/// Step 2: the batch size, on which every array leaf that has the batch dimension must agree
/// (config_error naming the leaves of each size). With `strict_axis` (the axis form), a leaf
/// without that axis is an error too. 0 when nothing is split.
[[nodiscard]] inline std::size_t agreed_batch_size(std::span<const leaf_info> info, const axis_plan& p,
                                                   std::optional<std::size_t> strict_axis) {
  if (!p.batch_dim) return 0;
  const std::size_t batch_dim = *p.batch_dim;
  std::map<std::size_t, std::vector<std::string>> by_size;
  for (const auto& l : info) {
    if (l.kind == leaf_kind::scalar) continue;
    if (l.shape.size() <= batch_dim) {
      if (strict_axis) {
        throw config_error("shard: leaf '" + (l.path.empty() ? std::string("(root)") : l.path) + "' has rank " +
                           std::to_string(l.shape.size()) + ", so it has no axis " + std::to_string(batch_dim) +
                           " to split; shard along an axis every array leaf has");
      }
      continue;
    }
    by_size[l.shape[batch_dim]].push_back(l.path.empty() ? std::string("(root)") : l.path);
  }
  if (by_size.size() > 1) {
    std::string msg = "shard: the leaves disagree on the batch size along axis " + std::to_string(batch_dim) + ": ";
    bool first = true;
    for (const auto& [size, paths] : by_size) {
      if (!first) msg += "; ";
      first = false;
      for (std::size_t i = 0; i < paths.size(); ++i) msg += (i ? ", '" : "'") + paths[i] + "'";
      msg += (paths.size() == 1 ? " has " : " have ") + std::to_string(size);
    }
    throw config_error(msg + " (every leaf split along the batch axis must have the same size there)");
  }
  return by_size.empty() ? 0 : by_size.begin()->first;
}

/// Step 3: checks the split can be made: row counts that fit the batch, and under uneven::error
/// every split dimension a multiple of its mesh axis (config_error with the JAX-style message).
inline void check_split(std::span<const leaf_info> info, const axis_plan& p, const mesh& m, uneven policy,
                        std::size_t batch_size, std::span<const std::size_t> batch_counts, const partition_spec& spec) {
  if (!batch_counts.empty()) {
    if (!p.batch_dim) throw config_error("shard: row counts were given, but " + spec.str() + " splits no dimension");
    check_row_counts(batch_counts, m.axis_size(*p.dim_axis[*p.batch_dim]), batch_size, "shard");
  }
  if (policy != uneven::error) return;
  if (p.batch_dim && batch_counts.empty()) {
    const std::size_t parts = m.axis_size(*p.dim_axis[*p.batch_dim]);
    if (batch_size % parts != 0) {
      throw config_error(uneven_message("", *p.batch_dim, batch_size, parts, m.axis_name(*p.dim_axis[*p.batch_dim])));
    }
  }
  for (const auto& l : info) {
    for (std::size_t d = 0; d < l.shape.size() && d < p.dim_axis.size(); ++d) {
      if (!p.dim_axis[d] || d == p.batch_dim || l.kind == leaf_kind::scalar) continue;
      const std::size_t parts = m.axis_size(*p.dim_axis[d]);
      if (l.shape[d] % parts != 0) {
        throw config_error(
            uneven_message("leaf '" + l.path + "': ", d, l.shape[d], parts, m.axis_name(*p.dim_axis[d])));
      }
    }
  }
}

/// Step 4: the part of leaf `l` that the device at mesh coordinates `coords` gets.
[[nodiscard]] inline leaf_split split_for(const leaf_info& l, const axis_plan& p, const mesh& m,
                                          std::span<const std::size_t> coords, uneven policy,
                                          std::span<const std::size_t> batch_counts) {
  leaf_split split;
  if (l.kind == leaf_kind::scalar) return split;
  for (std::size_t d = 0; d < l.shape.size(); ++d) {
    if (d < p.dim_axis.size() && p.dim_axis[d]) {
      const std::size_t axis = *p.dim_axis[d];
      split.dims.push_back(d == p.batch_dim
                               ? batch_part(l.shape[d], m.axis_size(axis), coords[axis], policy, batch_counts)
                               : split_part(l.shape[d], m.axis_size(axis), coords[axis], policy));
    } else {
      split.dims.push_back({0, l.shape[d], l.shape[d]});
    }
  }
  return split;
}

/// The real (not padding) batch rows of the shard at `coords`, as sharded::valid records them
/// (0 when no dimension is the batch's).
[[nodiscard]] inline std::size_t valid_rows(const axis_plan& p, const mesh& m, std::span<const std::size_t> coords,
                                            std::size_t batch_size, uneven policy,
                                            std::span<const std::size_t> batch_counts) {
  if (!p.batch_dim) return 0;
  const std::size_t axis = *p.dim_axis[*p.batch_dim];
  return batch_part(batch_size, m.axis_size(axis), coords[axis], policy, batch_counts).valid;
}

/// The rows uneven::pad adds to the batch, as sharded::pad records them.
[[nodiscard]] inline std::size_t pad_rows(const axis_plan& p, const mesh& m, std::size_t batch_size, uneven policy,
                                          std::span<const std::size_t> batch_counts) {
  if (!p.batch_dim || !batch_counts.empty() || policy != uneven::pad) return 0;
  const std::size_t parts = m.axis_size(*p.dim_axis[*p.batch_dim]);
  return (batch_size + parts - 1) / parts * parts - batch_size;
}

/// Step 5: the host slice of `tree` for the device at `coords` (views where contiguous).
template <class T>
[[nodiscard]] auto slice_for(const T& tree, std::span<const leaf_info> info, const axis_plan& p, const mesh& m,
                             std::span<const std::size_t> coords, uneven policy,
                             std::span<const std::size_t> batch_counts) {
  std::size_t li = 0;
  return tree_map(
      [&](const auto& leaf) { return slice_leaf(leaf, split_for(info[li++], p, m, coords, policy, batch_counts)); },
      tree);
}

/// shard's body for a host tree: the steps above, then each device's slice placed (queued on
/// its placement stream), the result's batch bookkeeping, and one wait for all copies.
template <class T, class F>
[[nodiscard]] auto shard_host_tree(const T& tree, const mesh& m, const partition_spec& spec, uneven policy,
                                   std::optional<std::size_t> strict_axis, F& resource_for,
                                   std::span<const std::size_t> batch_counts = {}) {
  const axis_plan p = plan_axes(m, spec);
  const auto info = leaves(tree);
  const std::size_t batch_size = agreed_batch_size(info, p, strict_axis);
  check_split(info, p, m, policy, batch_size, batch_counts, spec);

  using slice_t = decltype(tree_map([](const auto& leaf) { return slice_leaf(leaf, leaf_split{}); }, tree));
  using placed_t =
      decltype(place(std::declval<const slice_t&>(), device{}, std::declval<const stream&>(), resource_for(device{})));
  sharded<placed_t> out;
  out.policy = policy;
  out.batch_axis = p.batch_dim;
  out.batch_size = batch_size;
  for (std::size_t f = 0; f < m.size(); ++f) {
    const device dev = m.devices()[f];
    const auto coords = m.coords(f);
    out.trees.push_back(
        place_queued(slice_for(tree, info, p, m, coords, policy, batch_counts), dev, resource_for(dev)));
    out.devices.push_back(dev);
    out.mesh_coords.push_back(coords);
    out.valid.push_back(valid_rows(p, m, coords, batch_size, policy, batch_counts));
  }
  out.pad = pad_rows(p, m, batch_size, policy, batch_counts);
  finish_on(out.devices);
  return out;
}

// --- shards of a tree that is already on a device ----------------------------------------------
//
// A tree on a GPU is sharded without a host detour (jax.device_put of a committed array onto a
// NamedSharding moves it between devices likewise): each device's block is filled by copies from
// the source device (same device: device-to-device; other devices: peer copies, batched by the
// copy planner), and padding is zeroed on the device with cudaMemsetAsync. Only a pair without
// peer access passes through host memory, as every copy between such devices must
// (cudaDeviceCanAccessPeer; the copy engine's staged path, place/detail/copy.hpp).

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
[[nodiscard]] inline bool box_runs(std::span<const std::size_t> src_stride, std::span<const std::size_t> dst_stride,
                                   std::span<const std::size_t> begin, std::span<const std::size_t> count,
                                   std::size_t esize, std::vector<shard_byte_run>& out) {
  const std::size_t rank = count.size();
  for (const auto c : count) {
    if (c == 0) return true;
  }
  if (rank == 0) {
    out.push_back({0, 0, esize});
    return true;
  }
  std::vector<std::size_t> order(rank);
  for (std::size_t d = 0; d < rank; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return src_stride[a] < src_stride[b]; });
  const std::size_t f = order[0];
  if ((src_stride[f] != 1 || dst_stride[f] != 1) && count[f] != 1) return false;
  std::size_t run = count[f];
  std::size_t merged = 1;
  while (merged < rank && src_stride[order[merged]] == run && dst_stride[order[merged]] == run) {
    run *= count[order[merged]];
    ++merged;
  }
  std::size_t runs = 1;
  for (std::size_t k = merged; k < rank; ++k) runs *= count[order[k]];
  if (runs > max_device_shard_runs) return false;
  std::size_t base = 0;
  for (std::size_t d = 0; d < rank; ++d) base += begin[d] * src_stride[d];
  std::vector<std::size_t> idx(rank, 0);
  for (;;) {
    std::size_t s = base;
    std::size_t t = 0;
    for (std::size_t k = merged; k < rank; ++k) {
      s += idx[order[k]] * src_stride[order[k]];
      t += idx[order[k]] * dst_stride[order[k]];
    }
    out.push_back({s * esize, t * esize, run * esize});
    std::size_t k = merged;
    while (k < rank && ++idx[order[k]] == count[order[k]]) {
      idx[order[k]] = 0;
      ++k;
    }
    if (k == rank) return true;
  }
}

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
    const std::size_t n = traits::size(leaf);
    const part_range r = split.dims.empty() ? part_range{0, n, n} : split.dims[0];
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
      const part_range r = d < split.dims.size() ? split.dims[d] : part_range{0, full, full};
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

/// The placed form of a leaf's shard at `p` on `dev` (the type shard_host_tree's placement gives).
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
    const std::size_t n = traits::size(leaf);
    const part_range r = split.dims.empty() ? part_range{0, n, n} : split.dims[0];
    return device_array<E>(owner, reinterpret_cast<E*>(p), r.size, dev);
#if DEVICEKIT_HAS_MDSPAN
  } else {
    using src_extents = typename std::remove_cvref_t<decltype(leaf.mapping())>::extents_type;
    using src_layout = typename std::remove_cvref_t<decltype(leaf.mapping())>::layout_type;
    constexpr std::size_t R = src_extents::rank();
    using index_type = typename src_extents::index_type;
    using out_extents = md::dextents<index_type, R>;
    using out_layout =
        std::conditional_t<std::is_same_v<src_layout, md::layout_left>, md::layout_left, md::layout_right>;
    using out_array = shaped_array<E, out_extents, out_layout>;
    md::array<index_type, R> size{};
    for (std::size_t d = 0; d < R; ++d) {
      const auto full = static_cast<std::size_t>(leaf.mapping().extents().extent(d));
      size[d] = static_cast<index_type>(d < split.dims.size() ? split.dims[d].size : full);
    }
    return out_array(owner, reinterpret_cast<E*>(p), typename out_array::mapping_type{out_extents(size)}, dev);
#else
  } else {
    static_assert(sizeof(L) == 0, "shard: shaped leaves need mdspan");
#endif
  }
}

#if DEVICEKIT_HAS_CUDA
/// shard's body for a tree on a GPU: the same steps as shard_host_tree, then per device one block
/// from its resource, its padding zeroed and its runs copied from the source on the device's
/// placement stream (copy_runs: the planner's paths), and one wait for all. Returns nullopt,
/// having done nothing, when a mesh device is a cpu or a leaf's layout would need a copy per
/// element: the caller takes the host path then.
template <class T, class F>
[[nodiscard]] auto shard_device_tree(const T& tree, const mesh& m, const partition_spec& spec, uneven policy,
                                     std::optional<std::size_t> strict_axis, F& resource_for,
                                     std::span<const std::size_t> batch_counts)
    -> std::optional<decltype(shard_host_tree(tree, m, spec, policy, strict_axis, resource_for))> {
  const axis_plan p = plan_axes(m, spec);
  const auto info = leaves(tree);
  const std::size_t batch_size = agreed_batch_size(info, p, strict_axis);
  check_split(info, p, m, policy, batch_size, batch_counts, spec);
  for (const device d : m.devices()) {
    if (!d.is_cuda()) return std::nullopt;
  }

  // Plan every device's shards before anything is allocated or queued.
  struct device_plan {
    std::vector<leaf_split> splits;
    std::vector<device_leaf_shard> leaves;
    std::vector<std::size_t> offsets;
    std::size_t total = 0;
  };
  std::vector<device_plan> plans(m.size());
  for (std::size_t f = 0; f < m.size(); ++f) {
    const auto coords = m.coords(f);
    device_plan& dp = plans[f];
    std::size_t li = 0;
    bool ok = true;
    for_each_leaf(
        [&](const auto& leaf) {
          const leaf_split split = split_for(info[li++], p, m, coords, policy, batch_counts);
          if constexpr (!is_scalar_leaf_v<std::remove_cvref_t<decltype(leaf)>>) {
            device_leaf_shard ls;
            ok = ok && plan_device_leaf_shard(leaf, split, ls);
            dp.offsets.push_back(dp.total);
            dp.total +=
                (ls.elements * ls.element_bytes + placement_alignment - 1) / placement_alignment * placement_alignment;
            dp.leaves.push_back(std::move(ls));
          }
          dp.splits.push_back(split);
        },
        tree);
    if (!ok) return std::nullopt;
  }

  using result_t = decltype(shard_host_tree(tree, m, spec, policy, strict_axis, resource_for));
  result_t out;
  out.policy = policy;
  out.batch_axis = p.batch_dim;
  out.batch_size = batch_size;
  for (std::size_t f = 0; f < m.size(); ++f) {
    const device dev = m.devices()[f];
    const auto coords = m.coords(f);
    device_plan& dp = plans[f];
    auto& resource = resource_for(dev);
    using R = std::remove_reference_t<decltype(resource)>;
    const stream& s = default_ordered_stream(dev, source_device(tree, "shard"));
    std::byte* base =
        dp.total != 0 ? static_cast<std::byte*>(resource.allocate(dp.total, placement_alignment)) : nullptr;
    placed_block_release<R> release{&resource, dp.total};
    try {
      scoped_device on(dev.ordinal());
      std::vector<copy_run> runs;
      std::size_t k = 0;
      for_each_leaf(
          [&](const auto& leaf) {
            using L = std::remove_cvref_t<decltype(leaf)>;
            if constexpr (!is_scalar_leaf_v<L>) {
              const device_leaf_shard& ls = dp.leaves[k];
              std::byte* dst = base + dp.offsets[k++];
              const std::size_t leaf_bytes = ls.elements * ls.element_bytes;
              if (ls.padded && leaf_bytes != 0) {
                // Padding is zero (flax's rule, as the host path's zero-filled gather): the tail
                // when the valid part is one run at the start, else the whole leaf before its runs.
                const bool tail = ls.runs.size() == 1 && ls.runs[0].dst == 0;
                const std::size_t from = tail ? ls.runs[0].bytes : 0;
                if (from < leaf_bytes) {
                  DEVICEKIT_CUDA_CHECK(cudaMemsetAsync(dst + from, 0, leaf_bytes - from, s.native_handle()));
                  stats().device_memsets.fetch_add(1, std::memory_order_relaxed);
                }
              }
              const auto* src = reinterpret_cast<const std::byte*>(leaf_traits<L>::data(leaf));
              for (const auto& r : ls.runs) runs.push_back({src + r.src, memory_device_of(leaf), dst + r.dst, r.bytes});
            }
          },
          tree);
      copy_runs(runs, dev, s.native_handle());
      if (base != nullptr) release.copied = record_event(s.native_handle());
    } catch (...) {
      if (base != nullptr) {
        {
          scoped_device on(dev.ordinal(), std::nothrow);
          (void)cudaStreamSynchronize(s.native_handle());  // queued copies still write the block
        }
        resource.deallocate(base, dp.total, placement_alignment);
      }
      throw;
    }
    std::shared_ptr<void> owner;
    if (base != nullptr) owner = std::shared_ptr<void>(base, release);
    std::size_t li = 0;
    std::size_t k = 0;
    out.trees.push_back(tree_map(
        [&](const auto& leaf) {
          const leaf_split& split = dp.splits[li++];
          if constexpr (is_scalar_leaf_v<std::remove_cvref_t<decltype(leaf)>>) {
            return make_shard_leaf(leaf, split, nullptr, owner, dev);
          } else {
            return make_shard_leaf(leaf, split, base == nullptr ? nullptr : base + dp.offsets[k++], owner, dev);
          }
        },
        tree));
    out.devices.push_back(dev);
    out.mesh_coords.push_back(coords);
    out.valid.push_back(valid_rows(p, m, coords, batch_size, policy, batch_counts));
  }
  out.pad = pad_rows(p, m, batch_size, policy, batch_counts);
  finish_on(out.devices);
  return out;
}
#endif

template <class T, class F>
[[nodiscard]] auto shard_tree(const T& tree, const mesh& m, const partition_spec& spec, uneven policy,
                              std::optional<std::size_t> strict_axis, F& resource_for,
                              std::span<const std::size_t> batch_counts = {}) {
  static_assert(require_tree<T>(), "shard(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.shard");
  const auto src = source_device(tree, "shard");
  if (src) {
#if DEVICEKIT_HAS_CUDA
    if (src->is_cuda()) {
      if (auto on_devices = shard_device_tree(tree, m, spec, policy, strict_axis, resource_for, batch_counts)) {
        return std::move(*on_devices);
      }
    }
#endif
    // Split on the host (a cpu device in the mesh, or a layout needing a copy per element): bring
    // the tree down first.
    auto out = shard_host_tree(to_host(tree), m, spec, policy, strict_axis, resource_for, batch_counts);
    using direct = decltype(shard_host_tree(tree, m, spec, policy, strict_axis, resource_for));
    static_assert(std::is_same_v<direct, decltype(out)>, "shard: a device tree and its host copy shard differently");
    return out;
  }
  return shard_host_tree(tree, m, spec, policy, strict_axis, resource_for, batch_counts);
}

}  // namespace devicekit::detail
