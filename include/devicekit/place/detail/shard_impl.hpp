#pragma once
/// \file
/// shard's and replicate's machinery (place/shard.hpp has the API). shard_tree is the algorithm,
/// once: plan the split (place/detail/shard_plan.hpp), fill each mesh device's shard, record the
/// batch bookkeeping, wait once for all copies (collect_shards). A shard is filled one of two
/// ways: from host slices placed on the device (shard_from_host; place/detail/shard_leaf.hpp), or,
/// for a tree already on a GPU, by copies from the source device
/// (place/detail/shard_device.hpp). Both give the same result type.
#include <devicekit/core/config.hpp>
#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/uneven.hpp>
#include <devicekit/place/detail/leaves.hpp>
#include <devicekit/place/detail/nvtx.hpp>
#include <devicekit/place/detail/place_impl.hpp>
#include <devicekit/place/detail/shard_device.hpp>
#include <devicekit/place/detail/shard_leaf.hpp>
#include <devicekit/place/detail/shard_plan.hpp>
#include <devicekit/place/mesh.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/place/sharded.hpp>
#include <devicekit/transfer/detail/copy.hpp>
#include <devicekit/tree/tree.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// A callable giving the resource to allocate from on a device.
template <class F>
concept resource_selector =
    std::invocable<F&, device> && placement_resource<std::remove_reference_t<std::invoke_result_t<F&, device>>>;

struct default_resource_selector {
  device_memory& operator()(device d) const { return default_placement_resource(d); }
};

/// Waits for the placement streams of the cuda devices in `devices`.
DEVICEKIT_DECL void finish_on(const std::vector<device>& devices);

/// place on `dev`'s placement stream (cuda, not waited for: finish_on does) or inline (cpu). For
/// shard and replicate, which take no stream: ordered as such calls are (default_ordered_stream).
template <class T, class R>
[[nodiscard]] auto place_queued(const T& tree, device dev, R& resource) {
#if DEVICEKIT_HAS_CUDA
  if (dev.is_cuda()) {
    check_device_exists(dev, "place");  // before the stream of `dev` is made
    placement_plan plan;
    plan_placement(tree, plan);
    return place_planned(tree, plan, dev, default_ordered_stream(dev, plan.source), resource, copy_completion::queued);
  }
#endif
  const stream inline_stream;
  return place_impl(tree, dev, inline_stream, resource, copy_completion::queued);
}

/// The shards `plan` describes, in mesh order: `place_one(f, dev, coords)` fills the shard of
/// the mesh device at flat position `f` (queued, not waited for); then the batch bookkeeping and
/// one wait for all copies.
template <class Shards, class PlaceOne>
[[nodiscard]] Shards collect_shards(const shard_plan& plan, PlaceOne&& place_one) {
  Shards out;
  out.policy = plan.policy;
  out.batch_axis = plan.axes.batch_dim;
  out.batch_size = plan.batch_size;
  for (std::size_t f = 0; f < plan.m->size(); ++f) {
    const device dev = plan.m->devices()[f];
    const auto coords = plan.m->coords(f);
    out.trees.push_back(place_one(f, dev, std::span<const std::size_t>(coords)));
    out.devices.push_back(dev);
    out.mesh_coords.push_back(coords);
    out.valid.push_back(plan.valid_rows(coords));
  }
  out.pad = plan.pad_rows();
  finish_on(out.devices);
  return out;
}

/// The host path: each device's host slice of `tree` (views where contiguous) placed on it.
template <class T, class F>
[[nodiscard]] auto shard_from_host(const T& tree, const shard_plan& plan, F& resource_for) {
  using slice_t = decltype(tree_map([](const auto& leaf) { return slice_leaf(leaf, leaf_split{}); }, tree));
  using placed_t = decltype(place_queued(std::declval<const slice_t&>(), device{}, resource_for(device{})));
  return collect_shards<sharded<placed_t>>(plan, [&](std::size_t, device dev, std::span<const std::size_t> coords) {
    std::size_t li = 0;
    return place_queued(tree_map([&](const auto& leaf) { return slice_leaf(leaf, plan.split(li++, coords)); }, tree),
                        dev, resource_for(dev));
  });
}

/// shard's body: the plan, then the device path for a tree on a GPU when every mesh device is a
/// GPU and every leaf's layout allows it, else the host path (on a host copy of a device tree).
/// `strict_axis` is set by the axis forms, which make `m` from the device list they were given:
/// messages then name no mesh axis.
template <class T, class F>
[[nodiscard]] auto shard_tree(const T& tree, const mesh& m, const partition_spec& spec, uneven policy,
                              std::optional<std::size_t> strict_axis, F& resource_for,
                              std::span<const std::size_t> batch_counts = {}) {
  static_assert(require_tree<T>(), "shard(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.shard");
  check_devices_exist(m.devices(), "shard");
  const bool mesh_given = !strict_axis.has_value();
  const auto src = source_device(tree, "shard");
  if (!src) {
    return shard_from_host(tree, shard_plan::make(tree, m, spec, policy, strict_axis, batch_counts, mesh_given),
                           resource_for);
  }
#if DEVICEKIT_HAS_CUDA
  if (src->is_cuda()) {
    const shard_plan plan = shard_plan::make(tree, m, spec, policy, strict_axis, batch_counts, mesh_given);
    if (const auto blocks = plan_device_shards(tree, plan)) {
      using shards_t = decltype(shard_from_host(tree, plan, resource_for));
      return collect_shards<shards_t>(plan, [&](std::size_t f, device dev, std::span<const std::size_t>) {
        return place_device_shard(tree, *src, (*blocks)[f], dev, resource_for(dev));
      });
    }
  }
#endif
  // Split on the host (a cpu device in the mesh, or a layout needing a copy per element): bring
  // the tree down first.
  const auto host = to_host_on(tree, nullptr);
  auto out = shard_from_host(host, shard_plan::make(host, m, spec, policy, strict_axis, batch_counts, mesh_given),
                             resource_for);
  using direct = decltype(shard_from_host(tree, std::declval<const shard_plan&>(), resource_for));
  static_assert(std::is_same_v<direct, decltype(out)>, "shard: a device tree and its host copy shard differently");
  return out;
}

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/detail/shard_impl.ipp>
#endif
