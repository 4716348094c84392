#pragma once
/// \file
/// Placing a tree on a device, and bringing it back.
///
///   place(tree, device, stream, resource)   the same structure with leaves on `device`:
///                                           contiguous ranges become device_array<T>, shaped
///                                           leaves shaped_array<T, E, L>, scalars stay values.
///                                           All array leaves share one block from `resource`,
///                                           filled by one staged transfer (place/detail/copy.hpp).
///                                           Queued on `stream`; returns before the copy ends.
///   place(tree, device[, resource])         the same on an internal stream, finished on return
///   place(tree, device, memory_kind[, pool]) leaves of `device` whose bytes live in that kind of
///                                           memory (jaxlib's memory kinds): pinned_host or host
///                                           memory, finished on return
///   place_view(tree)                        the zero-copy form for the host: views of the
///                                           tree's own memory (valid while it lives), no copy
///   to_host(tree)                           host containers again (std::vector<T>, host
///                                           shaped_array, the original Hana struct type)
///   device_of(tree), same_device(trees...)  where a tree lives; device_mismatch when leaves
///                                           or trees disagree
///
/// Sources may be host trees or placed trees (moved between devices: peer copies where the pair
/// allows it, staging otherwise). A placed source must be ready: work that produces it on another
/// stream must have finished (the stream-less overloads finish their copies before returning).
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/detail/copy.hpp>
#include <devicekit/place/detail/nvtx.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/tree/tree.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

/// Trees, leaves or streams on different devices met in one operation. The message names both
/// devices (and the leaves, where leaves disagree); `expected()` and `actual()` carry them as
/// values, for code that handles the error (moves the tree, retries on another stream):
///   leaves or trees that disagree   expected: the first one's device, actual: the other's
///   a stream for another device     expected: the target device, actual: the stream's
///   place_view of device leaves     expected: cpu:0, actual: the leaves' device
/// Either is nullopt where the throw site does not know it (a device that is not among a
/// manager's devices has no single expected one).
class device_mismatch : public error {
 public:
  explicit device_mismatch(const std::string& what, std::optional<device> expected = std::nullopt,
                           std::optional<device> actual = std::nullopt)
      : error(what), expected_(expected), actual_(actual) {}

  /// The device the operation needed (or met first); nullopt when not known.
  [[nodiscard]] const std::optional<device>& expected() const noexcept { return expected_; }
  /// The device that did not match it; nullopt when not known.
  [[nodiscard]] const std::optional<device>& actual() const noexcept { return actual_; }

 private:
  std::optional<device> expected_;
  std::optional<device> actual_;
};

namespace detail {

template <class T>
inline constexpr bool is_shaped_array_v = false;
#if DEVICEKIT_HAS_MDSPAN
template <class T, class E, class L>
inline constexpr bool is_shaped_array_v<shaped_array<T, E, L>> = true;
#endif

template <class T>
inline constexpr bool is_mdspan_view_v = false;
#if DEVICEKIT_HAS_MDSPAN
template <class T, class E, class L>
inline constexpr bool is_mdspan_view_v<md::mdspan<T, E, L, md::default_accessor<T>>> = true;
#endif

template <class L>
inline constexpr bool is_scalar_leaf_v = leaf_traits<std::remove_cvref_t<L>>::kind == leaf_kind::scalar;

/// Identity of the allocation a leaf's memory belongs to (for merging copies); null if unknown.
template <class L>
[[nodiscard]] const void* owner_of(const L& leaf) noexcept {
  if constexpr (self_describing_leaf<L>) {
    return leaf.owner().get();
  } else {
    return nullptr;
  }
}

/// Frees a block of host memory whose leaves belong to a device (memory kinds pinned_host and
/// host): its type marks such blocks, so that the copy engine reads and writes their bytes as the
/// host memory they are (memory_device_of).
struct host_resident_block {
  device_memory* pool;
  std::size_t bytes;
  void operator()(void* p) const noexcept {
    try {
      pool->deallocate(p, bytes, placement_alignment);
    } catch (...) {
      // Only a foreign pointer or a wrong size throws, neither of which place produces.
    }
  }
};

/// Where the bytes of `leaf` are: its device, or cpu:0 for a leaf placed in host memory for a
/// device (place(tree, dev, memory_kind::pinned_host)), whose device stays `dev` as in JAX.
template <class L>
[[nodiscard]] device memory_device_of(const L& leaf) noexcept {
  if constexpr (self_describing_leaf<L>) {
    if (leaf.owner() != nullptr && std::get_deleter<host_resident_block>(leaf.owner()) != nullptr) return device::cpu();
  }
  return leaf_traits<L>::device(leaf);
}

/// The leaf that placing `leaf` gives, at `p` on `dev`, kept alive by `owner`.
template <class L>
[[nodiscard]] auto make_placed_leaf(const L& leaf, std::byte* p, const std::shared_ptr<void>& owner, device dev) {
  using traits = leaf_traits<L>;
  using E = typename traits::element_type;
  if constexpr (traits::kind == leaf_kind::scalar) {
    return leaf;
  } else if constexpr (traits::kind == leaf_kind::contiguous) {
    return device_array<E>(owner, reinterpret_cast<E*>(p), traits::size(leaf), dev);
  } else if constexpr (is_shaped_array_v<L>) {
    return L(owner, reinterpret_cast<E*>(p), leaf.mapping(), dev);
#if DEVICEKIT_HAS_MDSPAN
  } else if constexpr (is_mdspan_view_v<L>) {
    return shaped_array<E, typename L::extents_type, typename L::layout_type>(owner, reinterpret_cast<E*>(p),
                                                                              leaf.mapping(), dev);
#endif
  } else {
    static_assert(sizeof(L) == 0, "place: a shaped leaf type of your own needs a placed form: use shaped_array");
  }
}

/// An empty host leaf of the shape `leaf` has (what to_host fills).
template <class L>
[[nodiscard]] auto make_host_leaf(const L& leaf) {
  using traits = leaf_traits<L>;
  using E = typename traits::element_type;
  if constexpr (traits::kind == leaf_kind::scalar) {
    return leaf;
  } else if constexpr (traits::kind == leaf_kind::contiguous) {
    return std::vector<E>(traits::size(leaf));
  } else if constexpr (is_shaped_array_v<L>) {
    return L(leaf.mapping());
#if DEVICEKIT_HAS_MDSPAN
  } else if constexpr (is_mdspan_view_v<L>) {
    return shaped_array<E, typename L::extents_type, typename L::layout_type>(leaf.mapping());
#endif
  } else {
    static_assert(sizeof(L) == 0, "to_host: a shaped leaf type of your own needs a host form: use shaped_array");
  }
}

template <class L>
[[nodiscard]] std::byte* mutable_bytes(const L& leaf) noexcept {
  using traits = leaf_traits<L>;
  return reinterpret_cast<std::byte*>(const_cast<typename traits::element_type*>(traits::data(leaf)));
}

/// The device of a tree's array leaves that are not on the host, checked to be one: a tree is
/// moved as a whole, in one transfer, from one place. Host leaves may be mixed in.
template <class T>
[[nodiscard]] std::optional<device> source_device(const T& tree, const char* operation) {
  std::optional<device> found;
  std::string found_path;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        if constexpr (traits::kind != leaf_kind::scalar) {
          const device d = traits::device(leaf);
          if (d.is_cpu()) return;
          if (!found) {
            found = d;
            found_path = path.display();
          } else if (*found != d) {
            throw device_mismatch(std::string(operation) + ": the tree's leaves are on different devices: '" +
                                      found_path + "' is on " + found->str() + ", '" + path.display() + "' is on " +
                                      d.str() + "; place them on one device first",
                                  *found, d);
          }
        }
      },
      tree);
  return found;
}

/// Padding before a host leaf of `bytes` at block offset `offset` so that its copy does not
/// suffer 4K aliasing: memcpy slows down severalfold (measured on this project's machines) when
/// the destination sits a little ahead of the source modulo the 4 KiB page, because its stores
/// alias the loads still in flight (Intel 64 and IA-32 Architectures Optimization Reference
/// Manual, "4K aliasing"). Placing the destination at the source's page offset, rounded down to
/// the 256-byte alignment, avoids that. Assumes the block starts on a page (block_alignment asks
/// devicekit pools for page-aligned host blocks; others still get correct data). Only for leaves
/// of a page or more, and only when the padding costs at most a quarter of the leaf.
[[nodiscard]] inline std::size_t page_offset_padding(const void* src, std::size_t offset, std::size_t bytes) noexcept {
  constexpr std::size_t page = 4096;
  if (bytes < page) return 0;
  const std::size_t target = (reinterpret_cast<std::uintptr_t>(src) % page) / placement_alignment * placement_alignment;
  const std::size_t pad = (target + page - offset % page) % page;
  return pad <= bytes / 4 ? pad : 0;
}

/// The alignment place asks of `R` for a block of `total` bytes: a page for host blocks of a
/// page or more from a devicekit pool (page_offset_padding relies on it; pools serve any power
/// of two), else placement_alignment (what any resource gives).
template <class R>
[[nodiscard]] std::size_t block_alignment(bool host_block, std::size_t total) noexcept {
  constexpr std::size_t page = 4096;
  if constexpr (std::derived_from<R, device_memory>) {
    if (host_block && total >= page) return page;
  }
  return placement_alignment;
}

inline void check_stream(stream_ref s, device dev, const char* operation) {
  const device sd = s.get_device();
  if (sd == dev || (sd.is_cpu() && dev.is_cpu())) return;
  throw device_mismatch(std::string(operation) + ": the stream is on " + sd.str() + " but the target device is " +
                            dev.str() + "; pass a stream of " + dev.str() + " (or none)",
                        dev, sd);
}

}  // namespace detail

namespace detail {

/// Gives a placed block back to its resource when the last leaf sharing it goes. A block filled
/// by copies queued on a caller's stream may be dropped before they have run, and a pool's
/// stream-less free means "no work in flight" (RMM's rule too): the memory would be handed out
/// again under those copies. So the block first waits for its own copy, through an event recorded
/// after it; the caller's stream itself is never named again (it may be gone by then). Work of
/// the caller's that reads the tree is the caller's to finish before dropping it, as with any
/// stream-ordered allocator (PyTorch's record_stream, RMM's device_buffer).
template <class R>
struct placed_block_release {
  R* resource;
  std::size_t bytes;
  void* copied = nullptr;  ///< cudaEvent_t recorded after the copy; null: the copy had finished

  void operator()(void* p) const noexcept {
#if DEVICEKIT_HAS_CUDA
    if (copied != nullptr && cuda_calls_allowed()) {
      auto ev = static_cast<cudaEvent_t>(copied);
      if (cudaEventQuery(ev) == cudaErrorNotReady) (void)cudaEventSynchronize(ev);  // blocking-sync event
      (void)cudaEventDestroy(ev);
    }
#endif
    resource->deallocate(p, bytes, placement_alignment);
  }
};

/// Whether place's copy has finished when it returns (the stream-less overloads wait for it).
enum class copy_completion { queued, finished };

/// place's body: see the public overloads below. `in_host_memory`: the block is host memory from
/// a devicekit pool (memory kinds pinned_host and host) for leaves of `dev`; the copy then goes
/// to the host and is finished on return.
template <class T, placement_resource R>
[[nodiscard]] auto place_impl(const T& tree, device dev, stream_ref s, R& resource,
                              [[maybe_unused]] copy_completion completion, bool in_host_memory = false) {
  static_assert(require_tree<T>(), "place(tree, ...): tree must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.place");
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

  std::byte* base =
      total != 0
          ? static_cast<std::byte*>(resource.allocate(total, block_alignment<R>(dev.is_cpu() || in_host_memory, total)))
          : nullptr;

  // Pass 2: what to copy where, then the copy. If it fails, the copy engine has waited for what
  // it had queued (place/detail/copy.hpp), so the block can go back at once.
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
  try {
    copy_items(items, in_host_memory ? device::cpu() : dev, s.native_handle());
#if DEVICEKIT_HAS_CUDA
    if (base != nullptr && dev.is_cuda() && !in_host_memory && completion == copy_completion::queued) {
      scoped_device on(dev.ordinal());
      release.copied = record_event(s.native_handle());
    }
#endif
  } catch (...) {
    if (base != nullptr) resource.deallocate(base, total, placement_alignment);
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

}  // namespace detail

/// Places `tree` on `dev`: the same structure, array leaves in one block of `resource` on `dev`,
/// filled by one staged transfer queued on `s` (a stream of `dev`; the copy may still run when
/// this returns: synchronize `s`, or make later work on other streams wait for it). The source
/// may be freed or changed as soon as this returns (host data has been staged by then), except
/// host leaves of 1 MiB or more in pinned memory, which the copy engine reads in place: keep
/// those until `s` has passed the copy. Dropping the placed tree before its copy has run is safe
/// (the memory goes back once the copy is done); work of yours that uses the tree must be
/// finished, or synchronized, before you drop it.
template <class T, placement_resource R>
[[nodiscard]] auto place(const T& tree, device dev, stream_ref s, R& resource) {
  return detail::place_impl(tree, dev, s, resource, detail::copy_completion::queued);
}

/// place on `s` with the default resource of `dev`.
template <class T>
[[nodiscard]] auto place(const T& tree, device dev, stream_ref s) {
  return place(tree, dev, s, default_placement_resource(dev));
}

/// place with `resource`, finished on return: a call without a stream (an internal stream of
/// `dev`, ordered after the legacy default streams of `dev` and of the tree's device as cudaMemcpy
/// is, then waited for; README, "Calls without a stream").
template <class T, placement_resource R>
[[nodiscard]] auto place(const T& tree, device dev, R& resource) {
#if DEVICEKIT_HAS_CUDA
  if (dev.is_cuda()) {
    const auto from = detail::source_device(tree, "place");
    stream_ref s = detail::default_ordered_stream(dev, from);
    auto out = detail::place_impl(tree, dev, s, resource, detail::copy_completion::finished);
    detail::host_wait(s);
    return out;
  }
#endif
  const stream inline_stream;
  return place(tree, dev, inline_stream, resource);
}

/// place with the default resource of `dev`, finished on return.
template <class T>
[[nodiscard]] auto place(const T& tree, device dev) {
  return place(tree, dev, default_placement_resource(dev));
}

/// Places `tree` for `dev` in memory of `kind` (jaxlib's memory kinds, core/memory_kind.hpp),
/// from `memory` (a pool of that kind: dm.memory(dev, kind), or default_memory(dev, kind)).
/// `device` is place(tree, dev, memory). `pinned_host` and `host`: the leaves belong to `dev`
/// (device_of gives `dev`, as a JAX array in the pinned_host memory space stays on its device)
/// and their bytes lie in host memory, page-locked for pinned_host, so that a later place(t, dev)
/// reads them directly at full speed and kernels on `dev` may read them through unified
/// addressing; placing or bringing such a tree elsewhere copies from host memory. Finished on
/// return. config_error for a kind `dev` cannot have in this build (see default_memory).
template <class T>
[[nodiscard]] auto place(const T& tree, device dev, memory_kind kind, device_memory& memory) {
  if (kind == memory_kind::device) return place(tree, dev, memory);
  const stream host_stream;  // unused by a copy to host memory
  return detail::place_impl(tree, dev, host_stream, memory, detail::copy_completion::finished, true);
}

/// place in memory of `kind` from the process's pool of that kind (default_memory(dev, kind)).
template <class T>
[[nodiscard]] auto place(const T& tree, device dev, memory_kind kind) {
  return place(tree, dev, kind, default_placement_resource(dev, kind));
}

/// The type `place` gives for a tree of type T.
template <class T>
using placed_t = decltype(place(std::declval<const T&>(), device{}));

/// The zero-copy form on the host: the placed structure (device_array / shaped_array leaves on
/// cpu:0) viewing `tree`'s own memory. Nothing is copied or allocated; the views are valid while
/// `tree` lives and is not resized, and writing through them writes `tree`.
template <class T>
[[nodiscard]] auto place_view(T& tree) {
  static_assert(require_tree<T>(), "place_view(tree): tree must be a tree (see devicekit/tree/tree.hpp)");
  if (const auto d = detail::source_device(tree, "place_view")) {
    throw device_mismatch("place_view: views are of host memory, but the tree has leaves on " + d->str() +
                              "; use to_host(tree) or place(tree, device::cpu())",
                          device::cpu(), *d);
  }
  return tree_map(
      [](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        if constexpr (detail::is_scalar_leaf_v<L>) {
          return leaf;
        } else {
          return detail::make_placed_leaf(leaf, detail::mutable_bytes(leaf), nullptr, device::cpu());
        }
      },
      tree);
}

namespace detail {
/// to_host's work: the host containers, and the copies into them on `*s` (nullptr: a call
/// without a stream).
template <class T>
[[nodiscard]] auto to_host_on(const T& tree, [[maybe_unused]] const stream_ref* s) {
  static_assert(require_tree<T>(), "to_host(tree): tree must be a tree (see devicekit/tree/tree.hpp)");
  detail::scoped_range range("devicekit.to_host");
  [[maybe_unused]] const auto from = detail::source_device(tree, "to_host");
  if (s != nullptr && from && s->get_device() != *from) {
    throw device_mismatch("to_host: the tree is on " + from->str() + " but the stream is on " + s->get_device().str() +
                              "; pass a stream of " + from->str(),
                          *from, s->get_device());
  }
  auto out = tree_map([](const auto& leaf) { return detail::make_host_leaf(leaf); }, tree);
  std::vector<detail::copy_item> items;
  for_each_leaf(
      [&](const auto& src, auto& dst) {
        using L = std::remove_cvref_t<decltype(src)>;
        if constexpr (!detail::is_scalar_leaf_v<L>) {
          using traits = leaf_traits<L>;
          items.push_back({reinterpret_cast<const std::byte*>(traits::data(src)), detail::memory_device_of(src),
                           detail::owner_of(src), detail::mutable_bytes(dst),
                           traits::size(src) * sizeof(typename traits::element_type)});
        }
      },
      tree, out);
#if DEVICEKIT_HAS_CUDA
  if (s != nullptr && from && from->is_cuda()) {
    // Host leaves (host containers or memory_kind::host blocks) are copied on the host; the
    // device's, on `s`.
    std::vector<detail::copy_item> host;
    std::vector<detail::copy_item> on_device;
    for (const auto& it : items) (it.src_device.is_cpu() ? host : on_device).push_back(it);
    detail::copy_host_items(host);
    detail::copy_device_group_to_host(on_device, *from, s);
    return out;
  }
#endif
  detail::copy_items(items, device::cpu(), nullptr);
  return out;
}
}  // namespace detail

/// Brings `tree` to host containers: contiguous leaves become std::vector<T>, shaped leaves host
/// shaped_arrays, scalars stay; a Hana struct whose members are host containers again is the
/// original struct type. Returns when the data is there. A call without a stream: its copies
/// start after the work queued before on the legacy default stream of the tree's device (and so
/// on every blocking stream there), as cudaMemcpy's would; work on a non-blocking stream of yours
/// is not waited for: pass that stream (README, "Calls without a stream").
template <class T>
[[nodiscard]] auto to_host(const T& tree) {
  return detail::to_host_on(tree, nullptr);
}

/// to_host with the copies queued on `s`, a stream of the tree's device, after the work queued
/// there before (a kernel writing the tree, or prefetch's wait for its copy); returns when the
/// data is there. device_mismatch for a stream of another device.
template <class T>
[[nodiscard]] auto to_host(const T& tree, stream_ref s) {
  return detail::to_host_on(tree, &s);
}

/// The type `to_host` gives for a tree of type T.
template <class T>
using host_t = decltype(to_host(std::declval<const T&>()));

/// The one device all array leaves of `tree` are on (host containers count as cpu:0); nullopt for
/// a tree without array leaves. device_mismatch, naming two leaves, when they disagree.
template <class T>
[[nodiscard]] std::optional<device> device_of(const T& tree) {
  std::optional<device> found;
  std::string found_path;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        if constexpr (traits::kind != leaf_kind::scalar) {
          const device d = traits::device(leaf);
          if (!found) {
            found = d;
            found_path = path.display();
          } else if (*found != d) {
            throw device_mismatch("the tree's leaves are on different devices: '" + found_path + "' is on " +
                                      found->str() + ", '" + path.display() + "' is on " + d.str(),
                                  *found, d);
          }
        }
      },
      tree);
  return found;
}

/// The device shared by all `trees` (each checked with device_of); device_mismatch naming the
/// two devices (and the trees' positions) otherwise. Trees without array leaves go with any.
template <class T, class... Ts>
[[nodiscard]] std::optional<device> same_device(const T& first, const Ts&... rest) {
  std::optional<device> found = device_of(first);
  std::size_t found_at = 1;
  std::size_t at = 1;
  auto one = [&](const auto& t) {
    ++at;
    const auto d = device_of(t);
    if (!d) return;
    if (!found) {
      found = d;
      found_at = at;
    } else if (*found != *d) {
      throw device_mismatch("trees on different devices: tree " + std::to_string(found_at) + " is on " + found->str() +
                                ", tree " + std::to_string(at) + " is on " + d->str() +
                                "; move one with place(tree, device) first",
                            *found, *d);
    }
  };
  (one(rest), ...);
  return found;
}

}  // namespace devicekit
