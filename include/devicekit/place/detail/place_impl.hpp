#pragma once
/// \file
/// The bodies of place and to_host (place/place.hpp has the API): lay the array leaves out in one
/// block, fill it by one transfer through the copy engine (transfer/copy.hpp), hand back
/// leaves pointing into it; and the reverse, into host containers. shard and replicate place
/// their parts through place_impl too.
#include <devicekit/core/capture.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/device_exists.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/detail/block.hpp>
#include <devicekit/transfer/copy.hpp>
#include <devicekit/place/detail/nvtx.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/tree/detail/leaf_helpers.hpp>
#include <devicekit/tree/flat.hpp>
#include <devicekit/tree/tree.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace devicekit::detail {

/// device_mismatch unless `s` is a stream of `dev` (any host stream for a cpu device).
DEVICEKIT_DECL void check_stream(stream_ref s, device dev, const char* operation);

/// Whether place's copy has finished when it returns (the stream-less overloads wait for it).
enum class copy_completion { queued, finished };

/// Whether place's stream may be capturing: `own_stream` for devicekit's own placement streams
/// (placement_stream), which no caller can capture, so they are not asked (capture_of).
enum class stream_owner { caller, own_stream };

/// The copy items of one call, taken from this thread's spare vector and given back on
/// destruction (as reused_flat_tree, tree/flat.hpp): a tree of many leaves does not allocate them
/// again on every call. A nested call finds the spare taken and starts empty.
class reused_copy_items {
 public:
  reused_copy_items() noexcept : items_(std::move(spare())) { items_.clear(); }
  reused_copy_items(const reused_copy_items&) = delete;
  reused_copy_items& operator=(const reused_copy_items&) = delete;
  ~reused_copy_items() {
    constexpr std::size_t kept_items = std::size_t{1} << 16;
    if (items_.capacity() <= kept_items) spare() = std::move(items_);
  }
  [[nodiscard]] std::vector<copy_item>& operator*() noexcept { return items_; }
  [[nodiscard]] std::vector<copy_item>* operator->() noexcept { return &items_; }

 private:
  [[nodiscard]] static std::vector<copy_item>& spare() noexcept {
    thread_local std::vector<copy_item> v;
    return v;
  }
  std::vector<copy_item> items_;
};

/// place's body for a tree already flattened (`flat`, from flatten_into(tree)): the layout, the
/// allocation and the copy read the flat records; only the placed tree is built from `tree`'s
/// structure (unflatten). Checks the device and the stream; `flat` has checked that the array
/// leaves are on one device. `in_host_memory`: the block is host memory from a devicekit pool
/// (memory kinds pinned_host and host) for leaves of `dev`; the copy then goes to the host and is
/// finished on return.
template <class T, placement_resource R>
[[nodiscard]] auto place_flat(const T& tree, const flat_tree& flat, device dev, stream_ref s, R& resource,
                              [[maybe_unused]] copy_completion completion, bool in_host_memory = false,
                              stream_owner owner_of_stream = stream_owner::caller) {
  scoped_range range("devicekit.place");
  check_device_exists(dev, "place");
  if (!in_host_memory) check_stream(s, dev, "place");

  // The layout: the array leaves in one block, each aligned for any use on the device. Each
  // item's destination holds its offset until the block is there.
  reused_copy_items items;
  items->reserve(flat.array_leaves);
  std::size_t total = 0;
  for (const flat_leaf& leaf : flat.leaves) {
    if (!leaf.is_array()) continue;
    if (leaf.memory.is_cpu()) total += page_offset_padding(leaf.data, total, leaf.bytes);
    items->push_back({leaf.data, leaf.memory, leaf.owner, nullptr, leaf.bytes});
    items->back().dst = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(total));
    total += (leaf.bytes + placement_alignment - 1) / placement_alignment * placement_alignment;
  }

  // On a stream being captured into a CUDA graph the block is the graph's memory, allocated and
  // freed on that stream (placed_block_release); the copy engine takes its capture path.
  // Asked once here and handed to the copy engine.
  const bool captured =
      !in_host_memory && dev.is_cuda() && owner_of_stream == stream_owner::caller && capture_of(s).active;
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
  for (copy_item& it : *items) {
    it.dst = base == nullptr ? nullptr : base + reinterpret_cast<std::uintptr_t>(it.dst);
  }

  // The copy. If it fails, the copy engine has waited for what it had queued
  // (transfer/copy.hpp), so the block can go back at once.
  placed_block_release<R> release{&resource, total};
  if (captured) release.captured_on = s.native_handle();
  try {
    copy_items(*items, in_host_memory ? device::cpu() : dev, s.native_handle(), captured);
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
      owner = std::shared_ptr<void>(base, host_resident_deleter(resource, total));  // frees if it throws
    }
  }
  if (base != nullptr && owner == nullptr) owner = std::shared_ptr<void>(base, release);  // runs `release` if it throws

  // The placed tree: the structure of `tree`, array leaves pointing into the block in the
  // items' order (the flat order).
  std::size_t k = 0;
  return unflatten(tree, flat, [&](const auto& leaf, const flat_leaf&, std::size_t) {
    using L = std::remove_cvref_t<decltype(leaf)>;
    if constexpr (is_scalar_leaf_v<L>) {
      return leaf;
    } else {
      return make_placed_leaf(leaf, (*items)[k++].dst, owner, dev);
    }
  });
}

/// place's body (place/place.hpp has the overloads): checks, flattens `tree` once, and places it
/// (place_flat).
template <class T, placement_resource R>
[[nodiscard]] auto place_impl(const T& tree, device dev, stream_ref s, R& resource, copy_completion completion,
                              bool in_host_memory = false) {
  static_assert(require_tree<T>(), "place(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  check_device_exists(dev, "place");
  if (!in_host_memory) check_stream(s, dev, "place");
  reused_flat_tree flat;
  flatten_into(tree, flat.get(), "place");
  return place_flat(tree, flat.get(), dev, s, resource, completion, in_host_memory);
}

/// to_host's work: the host containers, and the copies into them on `*s` (nullptr: a call
/// without a stream). The tree is flattened once; the copies' destinations are read from the
/// host tree built here.
template <class T>
[[nodiscard]] auto to_host_on(const T& tree, [[maybe_unused]] const stream_ref* s) {
  static_assert(require_tree<T>(), "to_host(tree): tree must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.to_host");
  reused_flat_tree flat;
  flatten_into(tree, flat.get(), "to_host");
  [[maybe_unused]] const std::optional<device> from = flat->source;
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
  auto out = unflatten(tree, flat.get(),
                       [](const auto& leaf, const flat_leaf&, std::size_t) { return make_host_leaf(leaf); });
  // The destinations, from the host tree as it now is (its containers have been moved into it).
  reused_copy_items items;
  items->reserve(flat->array_leaves);
  for (const flat_leaf& leaf : flat->leaves) {
    if (leaf.is_array()) items->push_back({leaf.data, leaf.memory, leaf.owner, nullptr, leaf.bytes});
  }
  std::size_t k = 0;
  for_each_leaf(
      [&](auto& dst) {
        using L = std::remove_cvref_t<decltype(dst)>;
        if constexpr (!is_scalar_leaf_v<L>) (*items)[k++].dst = mutable_bytes(dst);
      },
      out);
#if DEVICEKIT_HAS_CUDA
  if (s != nullptr && from && from->is_cuda()) {
    // Host leaves (host containers or memory_kind::host blocks) are copied on the host; the
    // device's, on `s`.
    std::vector<copy_item> host;
    std::vector<copy_item> on_device;
    for (const auto& it : *items) (it.src_device.is_cpu() ? host : on_device).push_back(it);
    copy_host_items(host);
    copy_device_group_to_host(on_device, *from, s, true);  // `*s` is not capturing (asked above)
    return out;
  }
#endif
  copy_items(*items, device::cpu(), nullptr);
  return out;
}

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/detail/place_impl.ipp>
#endif
