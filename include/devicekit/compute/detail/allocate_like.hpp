#pragma once
/// \file
/// A new placed tree shaped like another, zeroed, in one block of a device's pool: what
/// zeros_like returns and what tree_cast<E> converts into.
///
/// One block for the whole tree, as place() takes, so a thousand leaves cost one allocation;
/// zeroing is one cudaMemsetAsync on the call's stream, so the element loops (and Thrust) are not
/// needed here.
#include <devicekit/compute/detail/dispatch.hpp>
#include <devicekit/core/capture.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/tree/array.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/mdspan.hpp>
#include <devicekit/tree/tree.hpp>

#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

namespace devicekit::detail {

/// A new leaf of element type T shaped like `leaf`, at `p` on `dev` (scalars: T{}).
template <class T, class L>
[[nodiscard]] auto make_leaf_like(const L& leaf, std::byte* p, const std::shared_ptr<void>& owner, device dev) {
  using traits = leaf_traits<L>;
  if constexpr (traits::kind == leaf_kind::scalar) {
    return T{};
  } else if constexpr (traits::kind == leaf_kind::contiguous) {
    return device_array<T>(owner, reinterpret_cast<T*>(p), traits::size(leaf), dev);
#if DEVICEKIT_HAS_MDSPAN
  } else if constexpr (is_shaped_array_v<L> || is_mdspan_view_v<L>) {
    return shaped_array<T, typename L::extents_type, typename L::layout_type>(owner, reinterpret_cast<T*>(p),
                                                                              leaf.mapping(), dev);
#endif
  } else {
    static_assert(sizeof(L) == 0,
                  "zeros_like/tree_cast: a shaped leaf type of your own needs a placed form: use shaped_array");
  }
}

/// The same structure on `dev`, leaves of element type T (or each leaf's own with T = void), in
/// one block of `dev`'s pool, zeroed (all-zero bits are 0 in every element type here): on `*s`
/// (a stream of `dev`; the block goes back to the pool only once the zeroing has run), or, for
/// nullptr, as a call without a stream, zeroed on return.
template <class T, class Tree>
[[nodiscard]] auto allocate_like(const Tree& tree, device dev, [[maybe_unused]] const stream_ref* s = nullptr) {
  static_assert(require_tree<Tree>(), "zeros_like/tree_cast: tree must be a tree (see devicekit/tree/tree.hpp)");
  check_device_exists(dev, "zeros_like");
  if (s != nullptr) check_stream(*s, dev, "zeros_like");
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for_each_leaf(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        using E = std::conditional_t<std::is_void_v<T>, element_of_t<L>, T>;
        offsets.push_back(total);
        if constexpr (leaf_traits<L>::kind != leaf_kind::scalar) {
          const std::size_t bytes = leaf_traits<L>::size(leaf) * sizeof(E);
          total += (bytes + placement_alignment - 1) / placement_alignment * placement_alignment;
        }
      },
      tree);
  device_memory& pool = default_placement_resource(dev);
  // On a stream being captured into a CUDA graph the block is the graph's memory, allocated and
  // freed on that stream, and the zeroing a memset node (placed_block_release).
  const bool captured = s != nullptr && dev.is_cuda() && capture_of(*s).active;
  std::byte* base = nullptr;
  if (total != 0) {
    base = static_cast<std::byte*>(captured ? pool.allocate(total, *s) : pool.allocate(total, placement_alignment));
  }
  std::shared_ptr<void> owner;
  if (base != nullptr) {
    placed_block_release<device_memory> release{&pool, total};
    if (captured) release.captured_on = s->native_handle();
    try {
#if DEVICEKIT_HAS_CUDA
      if (dev.is_cuda()) {
        // Not cudaMemset: it is asynchronous for device memory and runs on the legacy default
        // stream (CUDA runtime API, "API synchronization behavior"), whatever stream the call
        // was given. Queued on the caller's stream, or on the stream of a call without a stream
        // (ordered after the legacy default stream, then waited for: zeroed on return).
        scoped_device on(dev.ordinal());
        const stream_ref st = s != nullptr ? *s : stream_ref(default_ordered_stream(dev));
        DEVICEKIT_CUDA_CHECK(cudaMemsetAsync(base, 0, total, st.native_handle()));
        if (s == nullptr) {
          host_wait(st);
        } else if (!captured) {
          release.record_copied(st.native_handle(), dev.ordinal());
        }
      } else {
        std::memset(base, 0, total);
      }
#else
      std::memset(base, 0, total);
#endif
    } catch (...) {
#if DEVICEKIT_HAS_CUDA
      // A zeroing already queued still writes the block: it goes back once that is done (in a
      // capture, by its free node after it).
      if (s != nullptr && dev.is_cuda() && !captured) s->synchronize();
#endif
      release(base);
      throw;
    }
    owner = std::shared_ptr<void>(base, release);
  }
  std::size_t k = 0;
  return tree_map(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        using E = std::conditional_t<std::is_void_v<T>, element_of_t<L>, T>;
        return make_leaf_like<E>(leaf, base == nullptr ? nullptr : base + offsets[k++], owner, dev);
      },
      tree);
}

}  // namespace devicekit::detail
