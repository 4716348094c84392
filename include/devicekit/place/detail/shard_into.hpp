#pragma once
/// \file
/// The stream-ordered forms of replicate and shard (place/shard.hpp has the API): a tree written
/// into trees placed before, on one stream per destination device forked from the caller's
/// stream and joined back into it (place/detail/shard_streams.hpp). They write into placed trees
/// rather than place new ones so that they can run inside a CUDA graph capture: memory placed
/// on a capturing stream is the graph's and exists only while a launch runs, so a tree placed
/// inside the step could not be kept after it (docs/cuda-graphs.md); trees placed before the
/// capture are written again at every launch, as dk::copy into a placed tree is. Everything is
/// planned and checked before the first copy is queued: a refusal leaves the stream (and a
/// capture) as it was.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/copy.hpp>
#include <devicekit/place/detail/block.hpp>
#include <devicekit/place/detail/leaves.hpp>
#include <devicekit/place/detail/nvtx.hpp>
#include <devicekit/place/detail/place_impl.hpp>
#include <devicekit/place/detail/shard_impl.hpp>
#include <devicekit/place/detail/shard_leaf.hpp>
#include <devicekit/place/detail/shard_plan.hpp>
#include <devicekit/place/detail/shard_streams.hpp>
#include <devicekit/place/mesh.hpp>
#include <devicekit/place/sharded.hpp>
#include <devicekit/tree/tree.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/capture.hpp>
#  include <devicekit/place/detail/shard_device.hpp>
#  include <devicekit/transfer/detail/streams.hpp>
#endif

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace devicekit::detail {

/// The bytes of the array leaves of `tree` (written by `operation` on `dev`), in traversal order;
/// config_error when one lies elsewhere (another device, or host memory for `dev`).
template <class D>
[[nodiscard]] std::vector<std::byte*> leaf_destinations(const D& tree, device dev, std::size_t index,
                                                        const char* operation) {
  std::vector<std::byte*> out;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf) {
        if constexpr (!is_scalar_leaf_v<std::remove_cvref_t<decltype(leaf)>>) {
          if (memory_device_of(leaf) != dev) {
            throw config_error(std::string(operation) + ": leaf '" + path.display() + "' of tree " +
                               std::to_string(index) + " has its bytes in memory of " + memory_device_of(leaf).str() +
                               ", but the tree is the one for " + dev.str() + "; write into trees placed in " +
                               dev.str() + "'s own memory (replicate or shard without a stream make them)");
          }
          out.push_back(mutable_bytes(leaf));
        }
      },
      tree);
  return out;
}

/// Scalars are values in the placed trees: assigned here, on the host, as dk::copy does (a graph
/// does not assign them again at each launch).
template <class S, class D>
void assign_scalars(const S& src, D& dst) {
  for_each_leaf(
      [](const auto& from, auto& to) {
        if constexpr (is_scalar_leaf_v<std::remove_cvref_t<decltype(from)>>) to = from;
      },
      src, dst);
}

/// Whether `s` is being captured into a CUDA graph.
[[nodiscard]] inline bool capturing(stream_ref s) {
#if DEVICEKIT_HAS_CUDA
  return capture_of(s).active;
#else
  (void)s;
  return false;
#endif
}

/// Waits on the host for `s` when it is a cuda stream (a source it writes is then ready to read
/// from the host or from streams devicekit does not order after it).
inline void wait_for_source(stream_ref s) {
#if DEVICEKIT_HAS_CUDA
  if (s.get_device().is_cuda()) host_wait(s);
#else
  (void)s;
#endif
}

/// config_error, naming `operation`, unless `s` can order work on the cuda devices of `devices`
/// (the cpu device's inline stream cannot).
inline void check_origin_stream(stream_ref s, const std::vector<device>& devices, const char* operation) {
  if (!s.get_device().is_cpu()) return;
  for (const device d : devices) {
    if (d.is_cuda()) {
      throw config_error(std::string(operation) + ": the stream given is " + s.get_device().str() +
                         "'s inline stream, which cannot order the copies to " + d.str() +
                         "; pass a stream of a GPU (the source's, where it is written)");
    }
  }
}

/// replicate_into's body: every tree of `out` written from `tree`, leaf by leaf.
template <class T, class D>
void replicate_into_trees(const T& tree, per_device<D>& out, stream_ref s) {
  static_assert(require_tree<T>(), "replicate_into(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.replicate_into");
  if (out.trees.size() != out.devices.size()) {
    throw config_error("replicate_into: the destination holds " + std::to_string(out.trees.size()) + " tree(s) for " +
                       std::to_string(out.devices.size()) + " device(s)");
  }
  check_origin_stream(s, out.devices, "replicate_into");
  const std::optional<device> from = source_device(tree, "replicate_into");
  std::vector<device_fill> fills;
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < out.trees.size(); ++i) {
    if (!same_structure(tree, out.trees[i])) {
      throw tree_structure_error("replicate_into: the source tree " + structure(tree).str() + " and tree " +
                                 std::to_string(i) + " of the destination " + structure(out.trees[i]).str() +
                                 " differ in structure; write into what replicate(tree, devices) made for a tree "
                                 "like the source");
    }
    for_each_leaf_with_path(
        [&](const tree_path& path, const auto& a, const auto& b) { check_copy_leaf(path, a, b, problems); }, tree,
        out.trees[i]);
    if (!problems.empty()) break;
    const std::vector<std::byte*> dst = leaf_destinations(out.trees[i], out.devices[i], i, "replicate_into");
    device_fill fill{out.devices[i], {}, {}};
    std::size_t k = 0;
    for_each_leaf(
        [&](const auto& leaf) {
          using L = std::remove_cvref_t<decltype(leaf)>;
          if constexpr (!is_scalar_leaf_v<L>) {
            fill.runs.push_back({reinterpret_cast<const std::byte*>(leaf_traits<L>::data(leaf)), memory_device_of(leaf),
                                 dst[k++], leaf_traits<L>::size(leaf) * sizeof(typename leaf_traits<L>::element_type)});
          }
        },
        tree);
    fills.push_back(std::move(fill));
  }
  if (!problems.empty()) {
    std::string msg = "replicate_into: the trees' leaves do not match: ";
    for (std::size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw config_error(msg + " (replicate_into writes into the trees as they are)");
  }
#if DEVICEKIT_HAS_CUDA
  if (capturing(s)) check_capturable("replicate_into", fills);
#endif
  for (auto& t : out.trees) assign_scalars(tree, t);
  // cpu devices first, on the host: after the source's writes queued on `s`.
  bool waited = false;
  for (const auto& f : fills) {
    if (!f.dev.is_cpu()) continue;
    if (!waited && from && from->is_cuda()) wait_for_source(s);
    waited = true;
    copy_runs(f.runs, f.dev, nullptr);
  }
#if DEVICEKIT_HAS_CUDA
  stream_fork fork(s, out.devices);
  for (const auto& f : fills) {
    if (f.dev.is_cuda()) queue_fill(f, fork.on(f.dev));
  }
  fork.join();
#endif
}

/// The leaves of `shard` (the tree for the mesh device at `coords`) checked against what `plan`
/// gives that device of `tree`: problems named by leaf.
template <class T, class D>
void check_shard_leaves(const T& tree, const shard_plan& plan, std::span<const std::size_t> coords, const D& shard,
                        std::size_t index, std::vector<std::string>& problems) {
  std::size_t li = 0;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf, const auto& into) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        const leaf_split split = plan.split(li++, coords);
        if constexpr (!is_scalar_leaf_v<L>) {
          const std::vector<std::size_t> want = describe_leaf(make_shard_leaf(leaf, split, nullptr, nullptr, {})).shape;
          const std::vector<std::size_t> have = describe_leaf(into).shape;
          if (want != have) {
            const auto dims = [](const std::vector<std::size_t>& shape) {
              std::string out;
              for (const auto e : shape) out += (out.empty() ? "" : " x ") + std::to_string(e);
              return out;
            };
            problems.push_back("leaf '" + path.display() + "' of shard " + std::to_string(index) + " is " + dims(have) +
                               ", the source's part is " + dims(want));
          }
        }
      },
      tree, shard);
}

/// shard_into's body: `plan` (made for `tree` and out's split) checked against out's shards,
/// then each device's shard written: by copies from the source (the device path), or eagerly from
/// host slices where the device path cannot go (a cpu device, a layout that needs a gather).
template <class T, class D>
void shard_into_trees(const T& tree, const shard_plan& plan, sharded<D>& out, stream_ref s) {
  using slice_t = decltype(tree_map([](const auto& leaf) { return slice_leaf(leaf, leaf_split{}); }, tree));
  using shard_t = decltype(place_queued(std::declval<const slice_t&>(), device{}, std::declval<device_memory&>()));
  static_assert(std::is_same_v<shard_t, D>,
                "shard_into(tree, shards, ...): shards must be what shard gives for a tree like `tree` (the same "
                "structure, element types and layouts)");
  if (out.trees.size() != out.devices.size() || out.devices != plan.m->devices()) {
    throw config_error("shard_into: the shards are for " + std::to_string(out.trees.size()) +
                       " tree(s) on other devices than the mesh's " + plan.m->str() +
                       "; pass the mesh the shards were made for");
  }
  if (plan.batch_size != out.batch_size || plan.axes.batch_dim != out.batch_axis) {
    throw config_error("shard_into: the source's batch has " + std::to_string(plan.batch_size) +
                       " row(s), the shards were made for a batch of " + std::to_string(out.batch_size) +
                       " along the same axis; shard a new tree (shard(tree, ...)) for another batch");
  }
  check_origin_stream(s, out.devices, "shard_into");
  std::vector<std::string> problems;
  for (std::size_t f = 0; f < out.trees.size(); ++f) {
    check_shard_leaves(tree, plan, plan.m->coords(f), out.trees[f], f, problems);
  }
  if (!problems.empty()) {
    std::string msg = "shard_into: the shards do not fit the source: ";
    for (std::size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw config_error(msg + " (shard_into writes into the shards as they are)");
  }
  const std::optional<device> from = source_device(tree, "shard_into");
#if DEVICEKIT_HAS_CUDA
  if (const auto blocks = plan_device_shards(tree, plan)) {
    std::vector<device_fill> fills;
    for (std::size_t f = 0; f < out.trees.size(); ++f) {
      const device dev = out.devices[f];
      fills.push_back(shard_fill(tree, (*blocks)[f], dev, leaf_destinations(out.trees[f], dev, f, "shard_into")));
    }
    if (capturing(s)) check_capturable("shard_into", fills);
    for (auto& t : out.trees) assign_scalars(tree, t);
    stream_fork fork(s, out.devices);
    for (const auto& fill : fills) queue_fill(fill, fork.on(fill.dev));
    fork.join();
    return;
  }
  if (capturing(s)) {
    for (const device d : out.devices) {
      if (d.is_cpu()) {
        refuse_in_capture("shard_into", "a shard is on " + d.str() + ", whose copy the host makes at call time",
                          "leave cpu devices out of the mesh the graph writes, or make this call outside the capture");
      }
    }
    refuse_in_capture("shard_into",
                      "a leaf's layout puts its shard's elements apart in the source (a layout_stride leaf without "
                      "a unit stride, or a split into too many pieces), which only the host can gather",
                      "shard a contiguous (layout_right or layout_left) copy of the tree, or make this call outside "
                      "the capture");
  }
#endif
  // The host path (eager only): the source on the host, each device's slice of it written into
  // that device's shard. A source on a GPU is read once `s` has passed its writes (a host wait).
  const auto write_slices = [&](const auto& host) {
#if DEVICEKIT_HAS_CUDA
    stream_fork fork(s, out.devices);
#endif
    for (std::size_t f = 0; f < out.trees.size(); ++f) {
      const auto coords = plan.m->coords(f);
      std::size_t li = 0;
      const auto slice = tree_map([&](const auto& leaf) { return slice_leaf(leaf, plan.split(li++, coords)); }, host);
#if DEVICEKIT_HAS_CUDA
      if (const device dev = out.devices[f]; dev.is_cuda()) {
        copy_into(slice, out.trees[f], stream_ref(dev, fork.on(dev)));
        continue;
      }
#endif
      const stream inline_stream;
      copy_into(slice, out.trees[f], inline_stream);
    }
#if DEVICEKIT_HAS_CUDA
    fork.join();
#endif
  };
  if (from && !from->is_cpu()) {
    wait_for_source(s);
    write_slices(to_host_on(tree, nullptr));
  } else {
    write_slices(tree);
  }
}

/// The mesh and spec of shards made over a 1-D mesh (the axis forms of shard, or a 1-D mesh),
/// rebuilt from what `out` records; config_error for a 2-D mesh's shards.
struct rebuilt_split {
  mesh m;
  partition_spec spec;
};

template <class D>
[[nodiscard]] rebuilt_split rebuild_split(const sharded<D>& out) {
  for (const auto& c : out.mesh_coords) {
    if (c.size() != 1) {
      throw config_error(
          "shard_into: the shards were made over a " + std::to_string(c.size()) +
          "-D mesh, whose split they do not record; pass the mesh and the partition spec: shard_into(tree, mesh, "
          "spec, shards, stream)");
    }
  }
  std::vector<std::optional<std::string>> dims;
  if (out.batch_axis) {
    dims.resize(*out.batch_axis + 1);
    dims[*out.batch_axis] = "batch";
  }
  return {mesh(out.devices, "batch"), partition_spec(std::move(dims))};
}

}  // namespace devicekit::detail
