#pragma once
/// \file
/// What shard decides before it allocates or copies anything (place/detail/shard_impl.hpp runs
/// it): `shard_plan`, made once from the mesh, the partition spec, the uneven policy and the
/// tree's leaves, and asked afterwards which part of each leaf every device gets. Both ways of
/// filling the shards (host slices, device-side copies) read the same plan.
#include <devicekit/core/error.hpp>
#include <devicekit/core/uneven.hpp>
#include <devicekit/place/mesh.hpp>
#include <devicekit/place/split.hpp>
#include <devicekit/tree/tree.hpp>

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devicekit::detail {

/// One part of a dimension of size n split `parts` ways: the source rows [begin, begin + valid)
/// and the part's size (valid, or more with padding).
struct part_range {
  std::size_t begin = 0;
  std::size_t valid = 0;
  std::size_t size = 0;
};

/// The part of one leaf that one device gets: a part_range per dimension.
struct leaf_split {
  std::vector<part_range> dims;  ///< one per dimension of the leaf (none for a scalar)

  /// Dimension `d` of a leaf whose full extent there is `full`: the whole of it when the split
  /// does not cover `d`.
  [[nodiscard]] part_range dim(std::size_t d, std::size_t full) const {
    return d < dims.size() ? dims[d] : part_range{0, full, full};
  }
};

/// How a partition_spec maps onto a mesh: the mesh axis each leaf dimension is split over (none:
/// not split), and the batch dimension (the first split one).
struct axis_plan {
  std::vector<std::optional<std::size_t>> dim_axis;
  std::optional<std::size_t> batch_dim;
};

/// Part `index` of a dimension of size n split `parts` ways under `policy`.
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

/// The JAX-style message for a dimension that uneven::error cannot split.
[[nodiscard]] inline std::string uneven_message(std::string_view what, std::size_t axis, std::size_t n,
                                                std::size_t parts, const std::string& mesh_axis) {
  const std::size_t per = (n + parts - 1) / parts;
  return "shard: " + std::string(what) + "axis " + std::to_string(axis) + " of size " + std::to_string(n) +
         " cannot be split evenly over " + std::to_string(parts) + " devices (mesh axis '" + mesh_axis +
         "'): " + std::to_string(n) + " = " + std::to_string(parts) + " x " + std::to_string(n / parts) + " + " +
         std::to_string(n % parts) + "; use uneven::pad (adds " + std::to_string(per * parts - n) +
         " zero row(s), like flax) or uneven::ragged (shard sizes differ by at most one row)";
}

/// Everything the steps of shard pass along: the mesh, how the spec maps onto it, the tree's
/// leaves, the uneven policy and the batch (its size, and the rows per device when given).
/// `make` checks the request (steps 1-3); `split` then gives each device's part of each leaf
/// (step 4), `valid_rows` and `pad_rows` the result's batch bookkeeping.
struct shard_plan {
  const mesh* m = nullptr;  ///< the devices, on named axes (outlives the plan)
  axis_plan axes;
  std::vector<leaf_info> info;  ///< the tree's leaves, in traversal order
  uneven policy = uneven::error;
  std::size_t batch_size = 0;                 ///< the batch dimension's size in the source
  std::span<const std::size_t> batch_counts;  ///< rows per device when given, else empty

  /// The plan for `tree`: resolves the spec on the mesh, agrees on the batch size and checks
  /// the split can be made. config_error otherwise. With `strict_axis` (the axis form), a leaf
  /// without the batch axis is an error too.
  template <class T>
  [[nodiscard]] static shard_plan make(const T& tree, const mesh& m, const partition_spec& spec, uneven policy,
                                       std::optional<std::size_t> strict_axis,
                                       std::span<const std::size_t> batch_counts) {
    shard_plan plan;
    plan.m = &m;
    plan.policy = policy;
    plan.batch_counts = batch_counts;
    plan.axes = plan_axes(m, spec);
    plan.info = devicekit::leaves(tree);
    plan.batch_size = plan.agreed_batch_size(strict_axis);
    plan.check_split(spec);
    return plan;
  }

  /// Step 4: the part of leaf number `leaf` that the device at mesh coordinates `coords` gets.
  [[nodiscard]] leaf_split split(std::size_t leaf, std::span<const std::size_t> coords) const {
    const leaf_info& l = info[leaf];
    leaf_split out;
    if (l.kind == leaf_kind::scalar) return out;
    for (std::size_t d = 0; d < l.shape.size(); ++d) {
      if (d < axes.dim_axis.size() && axes.dim_axis[d]) {
        const std::size_t axis = *axes.dim_axis[d];
        out.dims.push_back(d == axes.batch_dim
                               ? batch_part(l.shape[d], m->axis_size(axis), coords[axis], policy, batch_counts)
                               : split_part(l.shape[d], m->axis_size(axis), coords[axis], policy));
      } else {
        out.dims.push_back({0, l.shape[d], l.shape[d]});
      }
    }
    return out;
  }

  /// The real (not padding) batch rows of the shard at `coords`, as sharded::valid records them
  /// (0 when no dimension is the batch's).
  [[nodiscard]] std::size_t valid_rows(std::span<const std::size_t> coords) const {
    if (!axes.batch_dim) return 0;
    const std::size_t axis = *axes.dim_axis[*axes.batch_dim];
    return batch_part(batch_size, m->axis_size(axis), coords[axis], policy, batch_counts).valid;
  }

  /// The rows uneven::pad adds to the batch, as sharded::pad records them.
  [[nodiscard]] std::size_t pad_rows() const {
    if (!axes.batch_dim || !batch_counts.empty() || policy != uneven::pad) return 0;
    const std::size_t parts = m->axis_size(*axes.dim_axis[*axes.batch_dim]);
    return (batch_size + parts - 1) / parts * parts - batch_size;
  }

  /// Step 1: resolves the spec's axis names on the mesh (config_error for an unknown axis, or
  /// for one axis named at two dimensions, which jax.sharding.PartitionSpec refuses too).
  [[nodiscard]] static axis_plan plan_axes(const mesh& m, const partition_spec& spec) {
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
  /// (config_error naming the leaves of each size). 0 when nothing is split.
  [[nodiscard]] std::size_t agreed_batch_size(std::optional<std::size_t> strict_axis) const {
    if (!axes.batch_dim) return 0;
    const std::size_t batch_dim = *axes.batch_dim;
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

  /// Step 3: checks the split can be made: row counts that fit the batch, and under
  /// uneven::error every split dimension a multiple of its mesh axis (config_error with the
  /// JAX-style message).
  void check_split(const partition_spec& spec) const {
    const axis_plan& p = axes;
    if (!batch_counts.empty()) {
      if (!p.batch_dim) throw config_error("shard: row counts were given, but " + spec.str() + " splits no dimension");
      check_row_counts(batch_counts, m->axis_size(*p.dim_axis[*p.batch_dim]), batch_size, "shard");
    }
    if (policy != uneven::error) return;
    if (p.batch_dim && batch_counts.empty()) {
      const std::size_t parts = m->axis_size(*p.dim_axis[*p.batch_dim]);
      if (batch_size % parts != 0) {
        throw config_error(
            uneven_message("", *p.batch_dim, batch_size, parts, m->axis_name(*p.dim_axis[*p.batch_dim])));
      }
    }
    for (const auto& l : info) {
      for (std::size_t d = 0; d < l.shape.size() && d < p.dim_axis.size(); ++d) {
        if (!p.dim_axis[d] || d == p.batch_dim || l.kind == leaf_kind::scalar) continue;
        const std::size_t parts = m->axis_size(*p.dim_axis[d]);
        if (l.shape[d] % parts != 0) {
          throw config_error(
              uneven_message("leaf '" + l.path + "': ", d, l.shape[d], parts, m->axis_name(*p.dim_axis[d])));
        }
      }
    }
  }
};

}  // namespace devicekit::detail
