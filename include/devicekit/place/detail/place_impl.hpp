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
#include <devicekit/place/detail/leaves.hpp>
#include <devicekit/place/detail/nvtx.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/transfer/detail/copy.hpp>
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

/// A vector for one call, taken from this thread's spare one and given back on destruction (as
/// reused_flat_tree, tree/flat.hpp): a tree of many leaves does not allocate it again on every
/// call. A nested call finds the spare taken and starts empty.
template <class T>
class reused_vector {
 public:
  reused_vector() noexcept : v_(std::move(spare())) { v_.clear(); }
  reused_vector(const reused_vector&) = delete;
  reused_vector& operator=(const reused_vector&) = delete;
  ~reused_vector() {
    // Only a modest one is kept: a huge tree's scratch is not held for the thread's life.
    constexpr std::size_t kept = std::size_t{1} << 16;
    if (v_.capacity() <= kept) spare() = std::move(v_);
  }
  [[nodiscard]] std::vector<T>& operator*() noexcept { return v_; }
  [[nodiscard]] std::vector<T>* operator->() noexcept { return &v_; }

 private:
  [[nodiscard]] static std::vector<T>& spare() noexcept {
    thread_local std::vector<T> v;
    return v;
  }
  std::vector<T> v_;
};

/// The copies of one call, and the destinations of one placement.
using reused_copy_items = reused_vector<copy_item>;
using reused_destinations = reused_vector<std::byte*>;

/// A placed leaf's bytes rounded up to placement_alignment, where the next one starts.
[[nodiscard]] constexpr std::size_t aligned_size(std::size_t bytes) noexcept {
  return (bytes + placement_alignment - 1) / placement_alignment * placement_alignment;
}

/// Where `leaf` goes in a block whose leaves so far end at `offset`: after the padding that keeps
/// a host source's page offset (page_offset_padding).
[[nodiscard]] inline std::size_t next_offset(const flat_leaf& leaf, std::size_t offset) noexcept {
  return leaf.memory().is_cpu() ? offset + page_offset_padding(leaf.data, offset, leaf.bytes) : offset;
}

/// A tree's placement, worked out in one walk of it (for_each_flat_leaf): its copies, whose
/// destinations are offsets into the block until the block exists, the block's size, and the
/// tree's device.
struct placement_plan {
  reused_copy_items items;
  std::optional<device> source;
  std::size_t total = 0;
};

/// Walks `tree` once into `plan`: device_mismatch when its array leaves are on two devices.
template <class T>
void plan_placement(const T& tree, placement_plan& plan) {
  plan.source = for_each_flat_leaf(
      tree,
      [&plan](const flat_leaf& leaf) {
        if (!leaf.is_array()) return;
        const std::size_t at = next_offset(leaf, plan.total);
        plan.items->push_back({leaf.data, leaf.memory(), leaf.owner,
                               reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(at)), leaf.bytes});
        plan.total = at + aligned_size(leaf.bytes);
      },
      "place");
}

/// place's body for a planned tree (plan_placement): allocation, the placed tree, the copy.
/// Checks the device and the stream. `in_host_memory`: the block is host memory from a devicekit
/// pool (memory kinds pinned_host and host) for leaves of `dev`; the copy then goes to the host
/// and is finished on return.
template <class T, placement_resource R>
[[nodiscard]] auto place_planned(const T& tree, placement_plan& plan, device dev, stream_ref s, R& resource,
                                 [[maybe_unused]] copy_completion completion, bool in_host_memory = false,
                                 stream_owner owner_of_stream = stream_owner::caller) {
  scoped_range range("devicekit.place");
  check_device_exists(dev, "place");
  if (!in_host_memory) check_stream(s, dev, "place");
  std::vector<copy_item>& items = *plan.items;
  const std::size_t total = plan.total;
  reused_destinations dsts;  // room taken before the block, so that nothing throws before its owner exists
  dsts->reserve(items.size());

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
  // The destinations, also in a dense list of their own: the placed tree below reads one word
  // per leaf from it rather than one from each 40-byte item.
  for (copy_item& it : items) {
    it.dst = base == nullptr ? nullptr : base + reinterpret_cast<std::uintptr_t>(it.dst);
    dsts->push_back(it.dst);
  }

  // The block's owner, then the placed tree: the structure of `tree`, array leaves pointing into
  // the block in traversal order. Built before the copy, while the destinations are still in the
  // cache. If anything below throws, the leaves and the owner go, and the owner's deleter gives
  // the block back (for a failed copy, the copy engine has waited for what it had queued, so it
  // can go at once; on a capturing stream, on that stream).
  std::shared_ptr<void> owner;
  if (base != nullptr) {
    if constexpr (std::derived_from<R, device_memory>) {
      // The shared_ptr frees the block if it throws.
      if (in_host_memory) owner = std::shared_ptr<void>(base, host_resident_deleter(resource, total));
    }
    if (owner == nullptr) {
      placed_block_release<R> release{&resource, total};
      if (captured) release.captured_on = s.native_handle();
      owner = std::shared_ptr<void>(base, release);  // runs `release` if it throws
    }
  }
  std::size_t k = 0;
  auto placed = tree_map(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        if constexpr (is_scalar_leaf_v<L>) {
          return leaf;
        } else {
          return make_placed_leaf(leaf, (*dsts)[k++], owner, dev);
        }
      },
      tree);

  copy_items(items, in_host_memory ? device::cpu() : dev, s.native_handle(), captured);
#if DEVICEKIT_HAS_CUDA
  if (base != nullptr && dev.is_cuda() && !in_host_memory && !captured && completion == copy_completion::queued) {
    // The block waits for its copy before it goes back (placed_block_release). Without that
    // event the block would go back, when the tree is dropped, while the copy may still write it:
    // if it cannot be made or recorded, the copy is waited for here instead, and the tree is
    // returned with its copy done. Only when that wait fails too is the record's error thrown.
    try {
      std::get_deleter<placed_block_release<R>>(owner)->record_copied(s.native_handle(), dev.ordinal());
    } catch (const cuda_error&) {
      if (cudaStreamSynchronize(s.native_handle()) != cudaSuccess) throw;
    }
  }
#endif
  return placed;
}

/// place's body (place/place.hpp has the overloads): checks, walks `tree` once (plan_placement),
/// and places it (place_planned).
template <class T, placement_resource R>
[[nodiscard]] auto place_impl(const T& tree, device dev, stream_ref s, R& resource, copy_completion completion,
                              bool in_host_memory = false) {
  static_assert(require_tree<T>(), "place(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  check_device_exists(dev, "place");
  if (!in_host_memory) check_stream(s, dev, "place");
  placement_plan plan;
  plan_placement(tree, plan);
  return place_planned(tree, plan, dev, s, resource, completion, in_host_memory);
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
  // Leaves whose bytes are host memory are copied as their host containers are built; the
  // others' containers are made empty, and filled by the copy engine below.
  auto out = unflatten(tree, flat.get(), [](const auto& leaf, const flat_leaf& r, std::size_t) {
    return make_host_leaf(leaf, r.is_array() && r.memory().is_cpu() ? r.data : nullptr);
  });
  // Every array leaf on the cpu device: all were copied above, and no walk for the copy engine.
  if (!from) return out;
  // The destinations, from the host tree as it now is (its containers have been moved into it).
  reused_copy_items items;
  std::size_t i = 0;
  for_each_leaf(
      [&](auto& dst) {
        const flat_leaf& r = flat->leaves[i++];
        if constexpr (!is_scalar_leaf_v<std::remove_cvref_t<decltype(dst)>>) {
          if (!r.memory().is_cpu()) items->push_back({r.data, r.memory(), r.owner, mutable_bytes(dst), r.bytes});
        }
      },
      out);
  if (items->empty()) return out;
#if DEVICEKIT_HAS_CUDA
  if (s != nullptr && from && from->is_cuda()) {
    // The host's leaves have been copied above; the device's go on `s`.
    copy_device_group_to_host(*items, *from, s, true);  // `*s` is not capturing (asked above)
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
