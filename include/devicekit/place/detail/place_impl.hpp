#pragma once
/// \file
/// The bodies of place and to_host (place/place.hpp has the API): lay the array leaves out in one
/// block, fill it by one transfer through the copy engine (transfer/detail/copy.hpp), hand back
/// leaves pointing into it; and the reverse, into host containers. shard and replicate place
/// their parts through place_impl too.
#include <devicekit/core/capture.hpp>
#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/detail/block.hpp>
#include <devicekit/place/detail/nvtx.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/transfer/detail/copy.hpp>
#include <devicekit/tree/detail/leaf_helpers.hpp>
#include <devicekit/tree/tree.hpp>

#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace devicekit::detail {

/// device_mismatch unless `s` is a stream of `dev` (any host stream for a cpu device).
DEVICEKIT_DECL void check_stream(stream_ref s, device dev, const char* operation);

/// Whether place's copy has finished when it returns (the stream-less overloads wait for it).
enum class copy_completion { queued, finished };

/// place's body (place/place.hpp has the overloads). `in_host_memory`: the block is host memory
/// from a devicekit pool (memory kinds pinned_host and host) for leaves of `dev`; the copy then
/// goes to the host and is finished on return.
template <class T, placement_resource R>
[[nodiscard]] auto place_impl(const T& tree, device dev, stream_ref s, R& resource,
                              [[maybe_unused]] copy_completion completion, bool in_host_memory = false) {
  static_assert(require_tree<T>(), "place(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.place");
  check_device_exists(dev, "place");
  if (!in_host_memory) check_stream(s, dev, "place");
  (void)source_device(tree, "place");

  // Pass 1: lay the array leaves out in one block, each aligned for any use on the device.
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for_each_leaf(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        if constexpr (!is_scalar_leaf_v<L>) {
          using traits = leaf_traits<L>;
          const std::size_t bytes = traits::size(leaf) * sizeof(typename traits::element_type);
          if (memory_device_of(leaf).is_cpu()) total += page_offset_padding(traits::data(leaf), total, bytes);
          offsets.push_back(total);
          total += (bytes + placement_alignment - 1) / placement_alignment * placement_alignment;
        }
      },
      tree);

  // On a stream being captured into a CUDA graph the block is the graph's memory, allocated and
  // freed on that stream (placed_block_release); the copy engine takes its capture path.
  const bool captured = !in_host_memory && dev.is_cuda() && capture_of(s).active;
  if (captured) {
    if constexpr (!std::derived_from<R, device_memory>) {
      refuse_in_capture("place", "the resource is not a devicekit pool, so its memory cannot belong to the graph",
                        "place with a devicekit pool (the default placement resource is one)");
    }
  }
  std::byte* base = nullptr;
  if (total != 0) {
    if constexpr (std::derived_from<R, device_memory>) {
      if (captured) base = static_cast<std::byte*>(resource.allocate(total, s));
    }
    if (!captured) {
      base =
          static_cast<std::byte*>(resource.allocate(total, block_alignment<R>(dev.is_cpu() || in_host_memory, total)));
    }
  }

  // Pass 2: what to copy where, then the copy. If it fails, the copy engine has waited for what
  // it had queued (transfer/detail/copy.hpp), so the block can go back at once.
  std::vector<copy_item> items;
  items.reserve(offsets.size());
  std::size_t k = 0;
  for_each_leaf(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        if constexpr (!is_scalar_leaf_v<L>) {
          using traits = leaf_traits<L>;
          items.push_back({reinterpret_cast<const std::byte*>(traits::data(leaf)), memory_device_of(leaf),
                           owner_of(leaf), base + offsets[k++],
                           traits::size(leaf) * sizeof(typename traits::element_type)});
        }
      },
      tree);
  placed_block_release<R> release{&resource, total};
  if (captured) release.captured_on = s.native_handle();
  try {
    copy_items(items, in_host_memory ? device::cpu() : dev, s.native_handle());
#if DEVICEKIT_HAS_CUDA
    if (base != nullptr && dev.is_cuda() && !in_host_memory && !captured && completion == copy_completion::queued) {
      scoped_device on(dev.ordinal());
      release.copied = record_event(s.native_handle());
    }
#endif
  } catch (...) {
    if (base != nullptr) release(base);  // on the capturing stream when captured
    throw;
  }
  std::shared_ptr<void> owner;
  if constexpr (std::derived_from<R, device_memory>) {
    if (base != nullptr && in_host_memory) {
      owner = std::shared_ptr<void>(base, host_resident_block{&resource, total});  // frees if it throws
    }
  }
  if (base != nullptr && owner == nullptr) owner = std::shared_ptr<void>(base, release);  // runs `release` if it throws

  // Pass 3: the placed tree, leaves pointing into the block (same traversal order).
  k = 0;
  return tree_map(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        if constexpr (is_scalar_leaf_v<L>) {
          return leaf;
        } else {
          return make_placed_leaf(leaf, base == nullptr ? nullptr : base + offsets[k++], owner, dev);
        }
      },
      tree);
}

/// to_host's work: the host containers, and the copies into them on `*s` (nullptr: a call
/// without a stream).
template <class T>
[[nodiscard]] auto to_host_on(const T& tree, [[maybe_unused]] const stream_ref* s) {
  static_assert(require_tree<T>(), "to_host(tree): tree must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.to_host");
  [[maybe_unused]] const auto from = source_device(tree, "to_host");
  if (s != nullptr && capture_of(*s).active) {
    refuse_in_capture("to_host",
                      "it returns once the data is on the host, so the host would wait for work that has only "
                      "been recorded",
                      "copy into a tree placed in pinned host memory (copy(tree, pinned, s), memory_kind::pinned_host) "
                      "inside the capture, and read it after the graph's launch has completed");
  }
  if (s != nullptr && from && s->get_device() != *from) {
    check_device_exists(s->get_device(), "to_host");
    throw device_mismatch("to_host: the tree is on " + from->str() + " but the stream is on " + s->get_device().str() +
                              "; pass a stream of " + from->str(),
                          *from, s->get_device());
  }
  auto out = tree_map([](const auto& leaf) { return make_host_leaf(leaf); }, tree);
  std::vector<copy_item> items;
  for_each_leaf(
      [&](const auto& src, auto& dst) {
        using L = std::remove_cvref_t<decltype(src)>;
        if constexpr (!is_scalar_leaf_v<L>) {
          using traits = leaf_traits<L>;
          items.push_back({reinterpret_cast<const std::byte*>(traits::data(src)), memory_device_of(src), owner_of(src),
                           mutable_bytes(dst), traits::size(src) * sizeof(typename traits::element_type)});
        }
      },
      tree, out);
#if DEVICEKIT_HAS_CUDA
  if (s != nullptr && from && from->is_cuda()) {
    // Host leaves (host containers or memory_kind::host blocks) are copied on the host; the
    // device's, on `s`.
    std::vector<copy_item> host;
    std::vector<copy_item> on_device;
    for (const auto& it : items) (it.src_device.is_cpu() ? host : on_device).push_back(it);
    copy_host_items(host);
    copy_device_group_to_host(on_device, *from, s);
    return out;
  }
#endif
  copy_items(items, device::cpu(), nullptr);
  return out;
}

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/detail/place_impl.ipp>
#endif
