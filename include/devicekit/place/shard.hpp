#pragma once
/// \file
/// Spreading a tree over devices.
///
///   replicate(tree, devices)                   a full copy on every device: one host transfer
///                                              to the first, device-to-device copies to the rest
///   shard(tree, devices, axis, uneven)         every array leaf split along `axis` (the batch
///                                              axis), one shard per device; all leaves must agree
///                                              on the batch size; scalars are copied to every shard
///   shard(tree, devices, axis, row_counts)     the same with the rows per device given (any split
///                                              summing to the batch, e.g. a custom scheme's plan)
///   shard(tree, mesh, partition_spec, uneven)  the mesh form (seed 001's distribute_batch): a 1-D
///                                              or 2-D device mesh with named axes; dimension d of
///                                              every leaf is split over the mesh axis the spec
///                                              names at d; mesh axes the spec does not name get
///                                              copies
///
/// Uneven batches, by policy (`uneven`):
///   error   refuse, like JAX ("axis 0 of size 19 cannot be split evenly over 4 devices")
///   pad     every shard gets ceil(n / parts) rows, the missing ones zero, like flax; the result
///           says how many rows were added (`pad`) and how many are real in each shard (`valid`)
///   ragged  balanced shards, as numpy.array_split: sizes differ by at most one, the first
///           n % parts shards one row larger (9 over 4: 3, 2, 2, 2); a shard is empty only when
///           there are fewer rows than devices (place/split.hpp)
///
/// Shards' leaves are `device_array<T>` (contiguous leaves) and `shaped_array<T, dextents, L>`
/// (shaped leaves: the split extents become dynamic; layout_left stays, others become
/// layout_right when they must be gathered). Slices that are contiguous in the source are sent
/// as they are; others are gathered on the host first. A tree on a device is brought to the host
/// to be split.
#include <devicekit/core/uneven.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/split.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

/// A 1-D or 2-D arrangement of devices with named axes, row-major (as jax.sharding.Mesh).
class mesh {
 public:
  /// A 1-D mesh of `devices` along one axis called `axis`.
  explicit mesh(std::vector<device> devices, std::string axis = "data")
      : devices_(std::move(devices)), shape_{devices_.size()}, names_{std::move(axis)} {
    validate();
  }
  /// A rows x cols mesh: devices[r * cols + c] sits at (r, c).
  mesh(std::vector<device> devices, std::size_t rows, std::size_t cols, std::string row_axis, std::string col_axis)
      : devices_(std::move(devices)), shape_{rows, cols}, names_{std::move(row_axis), std::move(col_axis)} {
    validate();
  }

  [[nodiscard]] const std::vector<device>& devices() const noexcept { return devices_; }
  [[nodiscard]] std::size_t rank() const noexcept { return shape_.size(); }
  [[nodiscard]] std::size_t size() const noexcept { return devices_.size(); }
  [[nodiscard]] std::size_t axis_size(std::size_t a) const { return shape_.at(a); }
  [[nodiscard]] const std::string& axis_name(std::size_t a) const { return names_.at(a); }
  [[nodiscard]] std::optional<std::size_t> axis_index(std::string_view name) const noexcept {
    for (std::size_t a = 0; a < names_.size(); ++a) {
      if (names_[a] == name) return a;
    }
    return std::nullopt;
  }
  /// Coordinates of the device at flat position `i`.
  [[nodiscard]] std::vector<std::size_t> coords(std::size_t i) const {
    if (rank() == 1) return {i};
    return {i / shape_[1], i % shape_[1]};
  }
  [[nodiscard]] std::string str() const {
    std::string s = "mesh(";
    for (std::size_t a = 0; a < rank(); ++a) {
      s += (a ? ", " : "") + names_[a] + "=" + std::to_string(shape_[a]);
    }
    return s + ")";
  }

 private:
  void validate() const {
    if (devices_.empty()) throw config_error("mesh: no devices given; a mesh needs at least one device");
    std::size_t n = 1;
    for (auto s : shape_) n *= s;
    if (n != devices_.size()) {
      throw config_error("mesh: the shape holds " + std::to_string(n) + " devices but " +
                         std::to_string(devices_.size()) + " were given");
    }
    for (std::size_t a = 0; a < names_.size(); ++a) {
      if (names_[a].empty()) throw config_error("mesh: axis " + std::to_string(a) + " has no name");
      for (std::size_t b = 0; b < a; ++b) {
        if (names_[a] == names_[b]) throw config_error("mesh: two axes are called '" + names_[a] + "'");
      }
    }
  }

  std::vector<device> devices_;
  std::vector<std::size_t> shape_;
  std::vector<std::string> names_;
};

/// For each leaf dimension, the mesh axis it is split over, or std::nullopt (not split):
/// `partition_spec{"data", std::nullopt}` splits dimension 0 over "data" (as
/// jax.sharding.PartitionSpec). Dimensions past the spec's length, and spec entries past a leaf's
/// rank, are not split.
class partition_spec {
 public:
  partition_spec() = default;
  partition_spec(std::initializer_list<std::optional<std::string>> dims) : dims_(dims) {}
  explicit partition_spec(std::vector<std::optional<std::string>> dims) : dims_(std::move(dims)) {}
  [[nodiscard]] std::size_t size() const noexcept { return dims_.size(); }
  [[nodiscard]] const std::optional<std::string>& operator[](std::size_t d) const { return dims_.at(d); }
  [[nodiscard]] std::string str() const {
    std::string s = "partition_spec(";
    for (std::size_t d = 0; d < dims_.size(); ++d) s += (d ? ", " : "") + (dims_[d] ? "'" + *dims_[d] + "'" : "None");
    return s + ")";
  }

 private:
  std::vector<std::optional<std::string>> dims_;
};

/// One placed tree per device, in the order of the devices given (or of the mesh).
template <class Tree>
struct per_device {
  std::vector<device> devices;
  std::vector<Tree> trees;

  [[nodiscard]] std::size_t size() const noexcept { return trees.size(); }
  [[nodiscard]] Tree& operator[](std::size_t i) { return trees.at(i); }
  [[nodiscard]] const Tree& operator[](std::size_t i) const { return trees.at(i); }
  [[nodiscard]] auto begin() noexcept { return trees.begin(); }
  [[nodiscard]] auto end() noexcept { return trees.end(); }
  [[nodiscard]] auto begin() const noexcept { return trees.begin(); }
  [[nodiscard]] auto end() const noexcept { return trees.end(); }
};

/// The shards of a tree, with how the batch was split.
template <class Tree>
struct sharded : per_device<Tree> {
  std::vector<std::vector<std::size_t>> mesh_coords;  ///< each shard's position in the mesh
  std::optional<std::size_t> batch_axis;              ///< the first split dimension
  std::size_t batch_size = 0;                         ///< its size in the source
  std::size_t pad = 0;                                ///< rows added along it (uneven::pad)
  std::vector<std::size_t> valid;                     ///< real rows of the batch in each shard
  uneven policy = uneven::error;
};

namespace detail {

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

[[nodiscard]] inline std::string uneven_message(std::string_view what, std::size_t axis, std::size_t n, std::size_t parts,
                                                const std::string& mesh_axis) {
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
  }(std::make_index_sequence<R>{});
}

#if DEVICEKIT_HAS_MDSPAN
/// Copies the box [begin, begin + count) of `src` to [0, count) of `dst` (both mapped arrays).
/// Rows along the last dimension are one memcpy when both have stride 1 there.
template <class E, class SrcMapping, class DstMapping, std::size_t R>
void gather_box(const E* src, const SrcMapping& sm, E* dst, const DstMapping& dm, const std::array<std::size_t, R>& begin,
                const std::array<std::size_t, R>& count) {
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
    using out_layout = std::conditional_t<std::is_same_v<src_layout, md::layout_left>, md::layout_left, md::layout_right>;
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
concept resource_selector = std::invocable<F&, device> && placement_resource<std::remove_reference_t<std::invoke_result_t<F&, device>>>;

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

/// place on `dev`'s placement stream (cuda, not waited for) or inline (cpu).
template <class T, class R>
[[nodiscard]] auto place_queued(const T& tree, device dev, R& resource) {
#if DEVICEKIT_HAS_CUDA
  if (dev.is_cuda()) return place(tree, dev, placement_stream(dev), resource);
#endif
  const stream inline_stream;
  return place(tree, dev, inline_stream, resource);
}

template <class T, class F>
[[nodiscard]] auto shard_host_tree(const T& tree, const mesh& m, const partition_spec& spec, uneven policy,
                                   std::optional<std::size_t> strict_axis, F& resource_for,
                                   std::span<const std::size_t> batch_counts = {}) {
  // Which mesh axis each leaf dimension is split over.
  std::vector<std::optional<std::size_t>> dim_axis(spec.size());
  std::optional<std::size_t> batch_dim;
  for (std::size_t d = 0; d < spec.size(); ++d) {
    if (!spec[d]) continue;
    const auto a = m.axis_index(*spec[d]);
    if (!a) {
      throw config_error("shard: " + spec.str() + " names mesh axis '" + *spec[d] + "', which " + m.str() +
                         " does not have");
    }
    for (std::size_t e = 0; e < d; ++e) {
      if (dim_axis[e] == a) {
        throw config_error("shard: " + spec.str() + " splits two dimensions over mesh axis '" + *spec[d] + "'");
      }
    }
    dim_axis[d] = a;
    if (!batch_dim) batch_dim = d;
  }

  const auto info = leaves(tree);
  std::size_t batch_size = 0;
  if (batch_dim) {
    // Every array leaf that has the batch dimension must agree on its size.
    std::map<std::size_t, std::vector<std::string>> by_size;
    for (const auto& l : info) {
      if (l.kind == leaf_kind::scalar) continue;
      if (l.shape.size() <= *batch_dim) {
        if (strict_axis) {
          throw config_error("shard: leaf '" + (l.path.empty() ? std::string("(root)") : l.path) + "' has rank " +
                             std::to_string(l.shape.size()) + ", so it has no axis " + std::to_string(*batch_dim) +
                             " to split; shard along an axis every array leaf has");
        }
        continue;
      }
      by_size[l.shape[*batch_dim]].push_back(l.path.empty() ? std::string("(root)") : l.path);
    }
    if (by_size.size() > 1) {
      std::string msg = "shard: the leaves disagree on the batch size along axis " + std::to_string(*batch_dim) + ": ";
      bool first = true;
      for (const auto& [size, paths] : by_size) {
        if (!first) msg += "; ";
        first = false;
        for (std::size_t i = 0; i < paths.size(); ++i) msg += (i ? ", '" : "'") + paths[i] + "'";
        msg += (paths.size() == 1 ? " has " : " have ") + std::to_string(size);
      }
      throw config_error(msg + " (every leaf split along the batch axis must have the same size there)");
    }
    if (!by_size.empty()) batch_size = by_size.begin()->first;
  }

  if (!batch_counts.empty()) {
    if (!batch_dim) throw config_error("shard: row counts were given, but " + spec.str() + " splits no dimension");
    check_row_counts(batch_counts, m.axis_size(*dim_axis[*batch_dim]), batch_size, "shard");
  }
  if (policy == uneven::error) {
    if (batch_dim && batch_counts.empty()) {
      const std::size_t parts = m.axis_size(*dim_axis[*batch_dim]);
      if (batch_size % parts != 0) {
        throw config_error(uneven_message("", *batch_dim, batch_size, parts, m.axis_name(*dim_axis[*batch_dim])));
      }
    }
    for (const auto& l : info) {
      for (std::size_t d = 0; d < l.shape.size() && d < dim_axis.size(); ++d) {
        if (!dim_axis[d] || d == batch_dim || l.kind == leaf_kind::scalar) continue;
        const std::size_t parts = m.axis_size(*dim_axis[d]);
        if (l.shape[d] % parts != 0) {
          throw config_error(uneven_message("leaf '" + l.path + "': ", d, l.shape[d], parts, m.axis_name(*dim_axis[d])));
        }
      }
    }
  }

  using slice_t = decltype(tree_map([](const auto& leaf) { return slice_leaf(leaf, leaf_split{}); }, tree));
  using placed_t = decltype(place(std::declval<const slice_t&>(), device{}, std::declval<const stream&>(),
                                  resource_for(device{})));
  sharded<placed_t> out;
  out.policy = policy;
  out.batch_axis = batch_dim;
  out.batch_size = batch_size;
  for (std::size_t f = 0; f < m.size(); ++f) {
    const device dev = m.devices()[f];
    const auto coords = m.coords(f);
    std::size_t li = 0;
    auto slice = tree_map(
        [&](const auto& leaf) {
          const auto& l = info[li++];
          leaf_split split;
          if (l.kind != leaf_kind::scalar) {
            for (std::size_t d = 0; d < l.shape.size(); ++d) {
              if (d < dim_axis.size() && dim_axis[d]) {
                split.dims.push_back(d == batch_dim ? batch_part(l.shape[d], m.axis_size(*dim_axis[d]),
                                                                 coords[*dim_axis[d]], policy, batch_counts)
                                                    : split_part(l.shape[d], m.axis_size(*dim_axis[d]),
                                                                 coords[*dim_axis[d]], policy));
              } else {
                split.dims.push_back({0, l.shape[d], l.shape[d]});
              }
            }
          }
          return slice_leaf(leaf, split);
        },
        tree);
    out.trees.push_back(place_queued(slice, dev, resource_for(dev)));
    out.devices.push_back(dev);
    out.mesh_coords.push_back(coords);
    if (batch_dim) {
      const auto part =
          batch_part(batch_size, m.axis_size(*dim_axis[*batch_dim]), coords[*dim_axis[*batch_dim]], policy, batch_counts);
      out.valid.push_back(part.valid);
    } else {
      out.valid.push_back(0);
    }
  }
  if (batch_dim && batch_counts.empty() && policy == uneven::pad && batch_size % m.axis_size(*dim_axis[*batch_dim]) != 0) {
    const std::size_t parts = m.axis_size(*dim_axis[*batch_dim]);
    out.pad = (batch_size + parts - 1) / parts * parts - batch_size;
  }
  finish_on(out.devices);
  return out;
}

template <class T, class F>
[[nodiscard]] auto shard_tree(const T& tree, const mesh& m, const partition_spec& spec, uneven policy,
                              std::optional<std::size_t> strict_axis, F& resource_for,
                              std::span<const std::size_t> batch_counts = {}) {
  static_assert(require_tree<T>(), "shard(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.shard");
  const auto src = source_device(tree, "shard");
  if (src) {
    // Split on the host: bring the tree down first.
    auto out = shard_host_tree(to_host(tree), m, spec, policy, strict_axis, resource_for, batch_counts);
    using direct = decltype(shard_host_tree(tree, m, spec, policy, strict_axis, resource_for));
    static_assert(std::is_same_v<direct, decltype(out)>, "shard: a device tree and its host copy shard differently");
    return out;
  }
  return shard_host_tree(tree, m, spec, policy, strict_axis, resource_for, batch_counts);
}

}  // namespace detail

/// A full copy of `tree` on each of `devices`: one transfer from the host to the first, then
/// device-to-device copies (peer where possible) to the others. Finished on return.
template <class T, class F>
  requires detail::resource_selector<F>
[[nodiscard]] auto replicate(const T& tree, const std::vector<device>& devices, F&& resource_for) {
  static_assert(require_tree<T>(), "replicate(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  detail::scoped_range range("devicekit.replicate");
  if (devices.empty()) throw config_error("replicate: no devices given");
  using placed = decltype(place(tree, devices[0], resource_for(devices[0])));
  per_device<placed> out;
  out.trees.push_back(place(tree, devices[0], resource_for(devices[0])));
  out.devices.push_back(devices[0]);
  for (std::size_t i = 1; i < devices.size(); ++i) {
    out.trees.push_back(detail::place_queued(out.trees.front(), devices[i], resource_for(devices[i])));
    out.devices.push_back(devices[i]);
  }
  detail::finish_on(out.devices);
  return out;
}

template <class T>
[[nodiscard]] auto replicate(const T& tree, const std::vector<device>& devices) {
  return replicate(tree, devices, detail::default_resource_selector{});
}

/// Splits every array leaf of `tree` along `axis` over `devices` (one shard each, in order);
/// scalars go to every shard. All array leaves must have that axis and agree on its size
/// (config_error naming the disagreeing leaves and their sizes). Finished on return.
template <class T, class F>
  requires detail::resource_selector<F>
[[nodiscard]] auto shard(const T& tree, const std::vector<device>& devices, std::size_t axis, uneven policy,
                         F&& resource_for) {
  std::vector<std::optional<std::string>> dims(axis + 1);
  dims[axis] = "batch";
  return detail::shard_tree(tree, mesh(devices, "batch"), partition_spec(std::move(dims)), policy, axis, resource_for);
}

template <class T>
[[nodiscard]] auto shard(const T& tree, const std::vector<device>& devices, std::size_t axis = 0,
                         uneven policy = uneven::error) {
  return shard(tree, devices, axis, policy, detail::default_resource_selector{});
}

/// Splits along `axis` with the rows per device given: device i gets the next `row_counts[i]`
/// rows (any split, e.g. 1, 5, 3 for a batch of 9; empty shards allowed). config_error unless
/// there is one count per device and they sum to the batch. The result's `valid` holds the
/// counts and its policy is uneven::ragged (no padding). Finished on return.
template <class T, class F>
  requires detail::resource_selector<F>
[[nodiscard]] auto shard(const T& tree, const std::vector<device>& devices, std::size_t axis,
                         const std::vector<std::size_t>& row_counts, F&& resource_for) {
  if (row_counts.empty() && !devices.empty()) {
    throw config_error("shard: no row counts given for " + std::to_string(devices.size()) +
                       " device(s); give one count per device");
  }
  std::vector<std::optional<std::string>> dims(axis + 1);
  dims[axis] = "batch";
  return detail::shard_tree(tree, mesh(devices, "batch"), partition_spec(std::move(dims)), uneven::ragged, axis,
                            resource_for, std::span<const std::size_t>(row_counts));
}

template <class T>
[[nodiscard]] auto shard(const T& tree, const std::vector<device>& devices, std::size_t axis,
                         const std::vector<std::size_t>& row_counts) {
  return shard(tree, devices, axis, row_counts, detail::default_resource_selector{});
}

/// The mesh form: dimension d of every array leaf is split over the mesh axis `spec` names at d
/// (leaves of lower rank are not split there); mesh axes the spec does not name hold copies. The
/// first split dimension is the batch: leaves that have it must agree on its size. One shard per
/// mesh device, in mesh order. Finished on return.
template <class T, class F>
  requires detail::resource_selector<F>
[[nodiscard]] auto shard(const T& tree, const mesh& m, const partition_spec& spec, uneven policy, F&& resource_for) {
  return detail::shard_tree(tree, m, spec, policy, std::nullopt, resource_for);
}

template <class T>
[[nodiscard]] auto shard(const T& tree, const mesh& m, const partition_spec& spec, uneven policy = uneven::error) {
  detail::default_resource_selector rf;
  return detail::shard_tree(tree, m, spec, policy, std::nullopt, rf);
}

}  // namespace devicekit
