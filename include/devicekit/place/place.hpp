#pragma once
/// \file
/// Placing a tree on a device, and bringing it back.
///
///   place(tree, device, stream, resource)   the same structure with leaves on `device`:
///                                           contiguous ranges become device_array<T>, shaped
///                                           leaves shaped_array<T, E, L>, scalars stay values.
///                                           All array leaves share one block from `resource`,
///                                           filled by one staged transfer (transfer/detail/copy.hpp).
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
#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/detail/leaves.hpp>
#include <devicekit/place/detail/place_impl.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/transfer/detail/copy.hpp>
#include <devicekit/transfer/detail/staging_ring.hpp>
#include <devicekit/transfer/detail/streams.hpp>
#include <devicekit/tree/flat.hpp>
#include <devicekit/tree/tree.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace devicekit {

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
/// is, then waited for; docs/placement.md, "Calls without a stream").
template <class T, placement_resource R>
[[nodiscard]] auto place(const T& tree, device dev, R& resource) {
#if DEVICEKIT_HAS_CUDA
  if (dev.is_cuda()) {
    detail::check_device_exists(dev, "place");  // before the stream of `dev` is made
    // One walk: it finds the tree's device, which chooses the stream, and plans the placement.
    detail::placement_plan plan;
    detail::plan_placement(tree, plan);
    stream_ref s = detail::default_ordered_stream(dev, plan.source);
    // The placement stream is devicekit's own: nothing captures it, so it is not asked. Its
    // staging goes back after the wait below, not in stream order.
    detail::staging_freed_after_wait staging(s.native_handle());
    auto out = detail::place_planned(tree, plan, dev, s, resource, detail::copy_completion::finished, false,
                                     detail::stream_owner::own_stream);
    detail::host_wait_uncaptured(s);
    staging.waited();
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

/// Brings `tree` to host containers: contiguous leaves become std::vector<T>, shaped leaves host
/// shaped_arrays, scalars stay; a Hana struct whose members are host containers again is the
/// original struct type. Returns when the data is there. A call without a stream: its copies
/// start after the work queued before on the legacy default stream of the tree's device (and so
/// on every blocking stream there), as cudaMemcpy's would; work on a non-blocking stream of yours
/// is not waited for: pass that stream (docs/placement.md, "Calls without a stream").
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

namespace detail {
/// The path of the first array leaf of `tree` (device_of's error message).
template <class T>
std::string first_array_leaf_path(const T& tree) {
  std::string first;
  bool seen = false;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf) {
        if constexpr (leaf_traits<std::remove_cvref_t<decltype(leaf)>>::kind != leaf_kind::scalar) {
          if (!seen) first = path.display();
          seen = true;
        }
      },
      tree);
  return first;
}

/// device_of's error, out of line: the walk that checks every leaf stays small, and keeps no
/// paths. Walks `tree` again to name the first leaf that is not on `first`.
template <class T>
[[noreturn, gnu::cold, gnu::noinline]] void throw_leaves_on_two_devices(const T& tree, device first) {
  std::string at;
  device other = first;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        if constexpr (traits::kind != leaf_kind::scalar) {
          if (at.empty() && traits::device(leaf) != first) {
            at = path.display();
            other = traits::device(leaf);
          }
        }
      },
      tree);
  throw device_mismatch("the tree's leaves are on different devices: '" + first_array_leaf_path(tree) + "' is on " +
                            first.str() + ", '" + at + "' is on " + other.str(),
                        first, other);
}
}  // namespace detail

namespace detail {

/// device_of's walk, its answer in `out`, left as it was for a tree without array leaves (then
/// false). The tree algorithms ask it of each argument at every call: a std::optional<device>
/// built up in the walk is stored and reloaded piecewise, which stalls store-to-load forwarding
/// (Intel 64 and IA-32 Architectures Optimization Reference Manual, "Store Forwarding") and cost
/// more than a one-leaf walk.
template <class T>
[[nodiscard]] bool tree_device(const T& tree, device& out) {
  // The walk keeps no paths (building one per leaf cost more than the check): the paths are
  // found by a second walk, only for the error.
  bool found = false;
  bool mixed = false;
  device first;
  for_each_leaf(
      [&](const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        if constexpr (traits::kind != leaf_kind::scalar) {
          const device d = traits::device(leaf);
          if (!found) {
            first = d;
            found = true;
          } else {
            mixed |= first != d;
          }
        }
      },
      tree);
  if (mixed) [[unlikely]]
    throw_leaves_on_two_devices(tree, first);
  if (found) out = first;
  return found;
}

/// Whether `a` and `b` are the same object (of the same type).
template <class A, class B>
[[nodiscard]] constexpr bool same_object(const A& a, const B& b) noexcept {
  if constexpr (std::is_same_v<A, B>) {
    return &a == &b;
  } else {
    return false;
  }
}

/// same_device's work, its answer in `out` as tree_device's.
template <class T, class... Ts>
[[nodiscard]] bool trees_device(device& out, const T& first, const Ts&... rest) {
  device found_device;
  bool found = tree_device(first, found_device);
  std::size_t found_at = 1;
  std::size_t at = 1;
  // A tree passed twice (tree_axpy's y is the output and an input) is walked once: the walks are
  // a cost per leaf that the algorithms pay before any element work. Trees of different types
  // are different trees, known at compile time.
  auto one = [&](const auto& t) {
    ++at;
    bool repeat = same_object(first, t);
    std::size_t k = 1;
    ((repeat |= ++k < at && same_object(rest, t)), ...);
    if (repeat) return;
    device d;
    if (!tree_device(t, d)) return;
    if (!found) {
      found_device = d;
      found = true;
      found_at = at;
    } else if (found_device != d) {
      throw device_mismatch("trees on different devices: tree " + std::to_string(found_at) + " is on " +
                                found_device.str() + ", tree " + std::to_string(at) + " is on " + d.str() +
                                "; move one with place(tree, device) first",
                            found_device, d);
    }
  };
  (one(rest), ...);
  if (found) out = found_device;
  return found;
}

}  // namespace detail

/// The one device all array leaves of `tree` are on (host containers count as cpu:0); nullopt for
/// a tree without array leaves. device_mismatch, naming two leaves, when they disagree.
template <class T>
[[nodiscard]] std::optional<device> device_of(const T& tree) {
  device d;
  if (!detail::tree_device(tree, d)) return std::nullopt;
  return d;
}

/// The device shared by all `trees` (each checked with device_of); device_mismatch naming the
/// two devices (and the trees' positions) otherwise. Trees without array leaves go with any.
template <class T, class... Ts>
[[nodiscard]] std::optional<device> same_device(const T& first, const Ts&... rest) {
  device d;
  if (!detail::trees_device(d, first, rest...)) return std::nullopt;
  return d;
}

}  // namespace devicekit
