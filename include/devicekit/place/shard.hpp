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
///   shard(tree, mesh, partition_spec, uneven)  the mesh form (jax.sharding.NamedSharding): a 1-D
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
/// as they are; others are gathered on the host first. A tree already on a GPU stays on the GPUs:
/// each shard is copied from the source device (device-to-device, or peer copies batched by the
/// copy planner) and padding is zeroed there (cudaMemsetAsync); only devices without peer access
/// to the source receive their shard through pinned host memory, which such a pair cannot avoid.
/// A cpu device in the mesh, or a leaf whose layout would need a copy per element
/// (layout_stride with a non-unit fastest stride), takes the host path.
///
/// Into trees placed before, on a stream (the forms a CUDA graph can capture):
///
///   replicate_into(tree, copies, s)            writes `tree` into every tree of `copies` (what
///                                              replicate made)
///   shard_into(tree, shards, s)                writes `tree`'s shards into `shards` (what shard
///                                              made), split as they record it
///   shard_into(tree, mesh, spec, shards, s)    the same for shards made over a 2-D mesh
///
/// Both queue their copies on one stream per destination device, forked from `s` with an event
/// and joined back into `s` with events before they return: work queued on `s` before them (what
/// writes the source) comes first, work queued on `s` after them sees every copy. No tree is
/// placed (the destinations are written where they are), and copies between GPUs wait for
/// nothing on the host (the host paths of cpu devices and gathered layouts do). On a stream
/// being captured (core/graph.hpp) the copies become nodes of the graph, and each launch writes
/// the trees again.
///
/// The mesh vocabulary is in place/mesh.hpp, the results in place/sharded.hpp, the machinery in
/// place/detail/shard_impl.hpp (which reads downward: the plan, a leaf's shard, the device path).
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/place/uneven.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/detail/shard_impl.hpp>
#include <devicekit/place/detail/shard_into.hpp>
#include <devicekit/place/mesh.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/sharded.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

/// A full copy of `tree` on each of `devices`: one transfer from the host to the first, then
/// device-to-device copies (peer where possible) to the others. Finished on return.
template <class T, class F>
requires detail::resource_selector<F>
[[nodiscard]] auto replicate(const T& tree, const std::vector<device>& devices, F&& resource_for) {
  static_assert(require_tree<T>(), "replicate(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  detail::scoped_range range("devicekit.replicate");
  if (devices.empty()) throw config_error("replicate: no devices given");
  detail::check_devices_exist(devices, "replicate");
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

/// Writes `tree` (a host tree, or a placed tree on any device) into every tree of `copies`, trees
/// placed before with the structure, element types and counts of `tree` (what replicate(tree,
/// devices) gives), each in the own memory of its device. Queued on one stream per device,
/// forked from `s` (a stream of a GPU, where the source is written) and joined back into it:
/// returns without waiting; synchronize `s`, or order later work after it, before reading the
/// copies, and keep the source unchanged until then (pageable host leaves excepted: staged before
/// this returns). Scalar leaves are assigned on the host, at the call. Copies to a cpu device are
/// made on the host before this returns (after a host wait for `s` when the source is on a GPU).
///
/// On a capturing `s` every copy is one memcpy node of the graph (device-to-device, peer, or from
/// pinned host memory): each launch writes the copies again from the source as it is then.
/// Refused with capture_error, before anything is queued: a source in pageable host memory, a
/// cpu device among the copies, and a device without peer access to the source (its copy would
/// pass through host staging). Errors: tree_structure_error, and config_error naming the leaves
/// that differ or lie in other memory.
template <class T, class D>
void replicate_into(const T& tree, per_device<D>& copies, stream_ref s) {
  detail::replicate_into_trees(tree, copies, s);
}

/// Writes the shards of `tree` into `shards`, what shard(tree', devices, axis, ...) or a 1-D
/// mesh's shard gave for a tree' like `tree` (the same structure, element types, layouts and
/// shapes): split as `shards` records it (its axis, policy and rows per device), padding zeroed.
/// Queued on one stream per device forked from `s` and joined back into it, as replicate_into
/// (copies from a source on a GPU: device-to-device, or peer; from host memory: as dk::copy
/// copies host leaves). Eagerly, a cpu device among the shards, or a leaf whose layout needs
/// a per-element gather, takes the host path: the source is brought to the host (after a host
/// wait for `s` when it is on a GPU) and each device's slice is copied from there.
///
/// On a capturing `s` each run of a shard is one memcpy node and its padding one memset node;
/// each launch shards the source as it is then. Refused with capture_error, before anything is
/// queued: a source in pageable host memory, a cpu device among the shards, a layout that needs
/// a gather on the host, a device without peer access to the source. Errors: config_error when
/// the source's batch or shapes do not fit the shards, or the shards come from a 2-D mesh (use
/// the mesh form).
template <class T, class D>
void shard_into(const T& tree, sharded<D>& shards, stream_ref s) {
  static_assert(require_tree<T>(), "shard_into(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  detail::scoped_range range("devicekit.shard_into");
  const detail::rebuilt_split split = detail::rebuild_split(shards);
  detail::shard_plan plan = detail::shard_plan::make(tree, split.m, split.spec, shards.policy, std::nullopt, {},
                                                     /*mesh_given=*/false);
  // The rows per device are the shards' own (ragged: balanced, or the counts given to shard);
  // the batch itself is checked against theirs first.
  if (shards.policy == uneven::ragged && plan.batch_size == shards.batch_size && plan.axes.batch_dim) {
    plan.batch_counts = std::span<const std::size_t>(shards.valid);
  }
  detail::shard_into_trees(tree, plan, shards, s);
}

/// shard_into for shards made over `m` with `spec` (shard(tree', m, spec, policy)), the form for a
/// 2-D mesh; the policy is the shards' own.
template <class T, class D>
void shard_into(const T& tree, const mesh& m, const partition_spec& spec, sharded<D>& shards, stream_ref s) {
  static_assert(require_tree<T>(), "shard_into(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  detail::scoped_range range("devicekit.shard_into");
  const detail::shard_plan plan = detail::shard_plan::make(tree, m, spec, shards.policy, std::nullopt, {});
  detail::shard_into_trees(tree, plan, shards, s);
}

}  // namespace devicekit
