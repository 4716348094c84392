#pragma once
/// \file
/// shard's device path (place/detail/shard_impl.hpp chooses it): a tree on a GPU is sharded
/// without a host detour, as jax.device_put of a committed array onto a NamedSharding moves it
/// between devices. Each device's block is filled by copies from the source device (same device:
/// device-to-device; other devices: peer copies, batched by the copy planner), and padding is
/// zeroed on the device with cudaMemsetAsync. Only a pair without peer access passes through
/// host memory, as every copy between such devices must (cudaDeviceCanAccessPeer; the copy
/// engine's staged path, transfer/detail/copy.hpp).
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/place/detail/block.hpp>
#  include <devicekit/place/detail/leaves.hpp>
#  include <devicekit/place/detail/shard_leaf.hpp>
#  include <devicekit/place/detail/shard_plan.hpp>
#  include <devicekit/place/detail/shard_runs.hpp>
#  include <devicekit/place/detail/shard_streams.hpp>
#  include <devicekit/place/resource.hpp>
#  include <devicekit/transfer/detail/copy.hpp>
#  include <devicekit/tree/tree.hpp>

#  include <cstddef>
#  include <memory>
#  include <new>
#  include <optional>
#  include <span>
#  include <type_traits>
#  include <utility>
#  include <vector>

namespace devicekit::detail {

/// One device's shard of a tree on a GPU, planned before anything is allocated or queued: the
/// split of every leaf, and for the array leaves their runs and offsets in the device's block.
struct device_shard_plan {
  std::vector<leaf_split> splits;
  std::vector<device_leaf_shard> leaves;
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
};

/// Every mesh device's shard of `tree` planned; nullopt, having done nothing, when a mesh device
/// is a cpu or a leaf's layout would need a copy per element (the host path takes those).
template <class T>
[[nodiscard]] std::optional<std::vector<device_shard_plan>> plan_device_shards(const T& tree, const shard_plan& plan) {
  for (const device d : plan.m->devices()) {
    if (!d.is_cuda()) return std::nullopt;
  }
  std::vector<device_shard_plan> plans(plan.m->size());
  for (std::size_t f = 0; f < plan.m->size(); ++f) {
    const auto coords = plan.m->coords(f);
    device_shard_plan& dp = plans[f];
    std::size_t li = 0;
    bool ok = true;
    for_each_leaf(
        [&](const auto& leaf) {
          const leaf_split split = plan.split(li++, coords);
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
  return plans;
}

/// What fills the shard `dp` of `tree` (whose array leaves are read where their bytes are) on
/// `dev`, array leaf k's shard starting at dst[k]: its runs from the source, and its padding,
/// zeroed first (flax's rule, as the host path's zero-filled gather): the tail when the valid
/// part is one run at the start, else the whole leaf before its runs.
template <class T>
[[nodiscard]] device_fill shard_fill(const T& tree, const device_shard_plan& dp, device dev,
                                     std::span<std::byte* const> dst) {
  device_fill fill{dev, {}, {}};
  std::size_t k = 0;
  for_each_leaf(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        if constexpr (!is_scalar_leaf_v<L>) {
          const device_leaf_shard& ls = dp.leaves[k];
          std::byte* to = dst[k++];
          const std::size_t leaf_bytes = ls.elements * ls.element_bytes;
          if (ls.padded && leaf_bytes != 0) {
            const bool tail = ls.runs.size() == 1 && ls.runs[0].dst == 0;
            const std::size_t start = tail ? ls.runs[0].bytes : 0;
            if (start < leaf_bytes) fill.zero.emplace_back(to + start, leaf_bytes - start);
          }
          const auto* src = reinterpret_cast<const std::byte*>(leaf_traits<L>::data(leaf));
          for (const auto& r : ls.runs) fill.runs.push_back({src + r.src, memory_device_of(leaf), to + r.dst, r.bytes});
        }
      },
      tree);
  return fill;
}

/// Places the shard `dp` of `tree` (whose leaves are on `from`) on `dev`: one block from
/// `resource`, its padding zeroed and its runs copied from the source on the placement stream of
/// `dev` (queue_fill: the copy planner's paths), not waited for. The shard's leaves are those the
/// host path's placement gives (make_shard_leaf).
template <class T, class R>
[[nodiscard]] auto place_device_shard(const T& tree, device from, const device_shard_plan& dp, device dev,
                                      R& resource) {
  const stream& s = default_ordered_stream(dev, from);
  std::byte* base = dp.total != 0 ? static_cast<std::byte*>(resource.allocate(dp.total, placement_alignment)) : nullptr;
  placed_block_release<R> release{&resource, dp.total};
  try {
    std::vector<std::byte*> dst;
    for (const std::size_t offset : dp.offsets) dst.push_back(base + offset);
    queue_fill(shard_fill(tree, dp, dev, dst), s.native_handle());
    if (base != nullptr) release.record_copied(s.native_handle(), dev.ordinal());
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
  return tree_map(
      [&](const auto& leaf) {
        const leaf_split& split = dp.splits[li++];
        if constexpr (is_scalar_leaf_v<std::remove_cvref_t<decltype(leaf)>>) {
          return make_shard_leaf(leaf, split, nullptr, owner, dev);
        } else {
          return make_shard_leaf(leaf, split, base == nullptr ? nullptr : base + dp.offsets[k++], owner, dev);
        }
      },
      tree);
}

}  // namespace devicekit::detail
#endif
