#pragma once
/// \file
/// What shard decides before it allocates or copies anything (place/detail/shard_impl.hpp runs
/// it): `shard_plan`, made once from the mesh, the partition spec, the uneven policy and the
/// tree's leaves, and asked afterwards which part of each leaf every device gets. Both ways of
/// filling the shards (host slices, device-side copies) read the same plan.
#include <devicekit/core/error.hpp>
#include <devicekit/place/uneven.hpp>
#include <devicekit/place/mesh.hpp>
#include <devicekit/place/split.hpp>
#include <devicekit/tree/tree.hpp>

#include <cstddef>
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
[[nodiscard]] DEVICEKIT_DECL part_range split_part(std::size_t n, std::size_t parts, std::size_t index, uneven policy);

/// Part `index` of the batch axis: from `counts` (rows per part, checked by the caller) when
/// given, else by `policy`.
[[nodiscard]] DEVICEKIT_DECL part_range batch_part(std::size_t n, std::size_t parts, std::size_t index, uneven policy,
                                                   std::span<const std::size_t> counts);

/// The JAX-style message for a dimension that uneven::error cannot split. `mesh_axis` names the
/// axis of the caller's mesh it is split over; none when the caller gave a device list, whose mesh
/// is devicekit's own.
[[nodiscard]] DEVICEKIT_DECL std::string uneven_message(std::string_view what, std::size_t axis, std::size_t n,
                                                        std::size_t parts, const std::optional<std::string>& mesh_axis);

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
  /// Whether the caller gave the mesh (the mesh forms); false for a device list (the axis forms,
  /// and shard_into of their shards), whose one-axis mesh a message must not name.
  bool mesh_given = true;

  /// The plan for `tree`: resolves the spec on the mesh, agrees on the batch size and checks
  /// the split can be made. config_error otherwise. With `strict_axis` (the axis form), a leaf
  /// without the batch axis is an error too. `mesh_given`: see the member.
  template <class T>
  [[nodiscard]] static shard_plan make(const T& tree, const mesh& m, const partition_spec& spec, uneven policy,
                                       std::optional<std::size_t> strict_axis,
                                       std::span<const std::size_t> batch_counts, bool mesh_given = true) {
    shard_plan plan;
    plan.m = &m;
    plan.policy = policy;
    plan.batch_counts = batch_counts;
    plan.mesh_given = mesh_given;
    plan.axes = plan_axes(m, spec);
    plan.info = devicekit::leaves(tree);
    plan.batch_size = plan.agreed_batch_size(strict_axis);
    plan.check_split(spec);
    return plan;
  }

  /// Step 4: the part of leaf number `leaf` that the device at mesh coordinates `coords` gets.
  [[nodiscard]] leaf_split split(std::size_t leaf, std::span<const std::size_t> coords) const;

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
  [[nodiscard]] static axis_plan plan_axes(const mesh& m, const partition_spec& spec);

  /// Step 2: the batch size, on which every array leaf that has the batch dimension must agree
  /// (config_error naming the leaves of each size). 0 when nothing is split.
  [[nodiscard]] std::size_t agreed_batch_size(std::optional<std::size_t> strict_axis) const;

  /// Step 3: checks the split can be made: row counts that fit the batch, and under
  /// uneven::error every split dimension a multiple of its mesh axis (config_error with the
  /// JAX-style message).
  void check_split(const partition_spec& spec) const;
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/detail/shard_plan.ipp>
#endif
