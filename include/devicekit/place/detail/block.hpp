#pragma once
/// \file
/// The block a placed tree's leaves share: how its memory goes back (placed_block_release,
/// host_resident_deleter), and how the block is laid
/// out and aligned (page_offset_padding, block_alignment). place and shard allocate such blocks.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/resource.hpp>
#include <devicekit/tree/flat.hpp>
#include <devicekit/tree/leaf.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/transfer/detail/streams.hpp>
#endif

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace devicekit::detail {

/// The deleter of a host-resident block (tree/flat.hpp's host_resident_block, whose type marks
/// such blocks) that gives `bytes` at `p` back to `pool`, a devicekit pool.
DEVICEKIT_DECL void give_back_host_resident(void* pool, void* p, std::size_t bytes) noexcept;
[[nodiscard]] DEVICEKIT_DECL host_resident_block host_resident_deleter(device_memory& pool, std::size_t bytes) noexcept;

/// Gives a placed block back to its resource when the last leaf sharing it goes. A block filled
/// by copies queued on a caller's stream may be dropped before they have run, and a pool's
/// stream-less free means "no work in flight" (RMM's rule too): the memory would be handed out
/// again under those copies. So the block first waits for its own copy, through an event recorded
/// after it; the caller's stream itself is never named again (it may be gone by then). Work of
/// the caller's that reads the tree is the caller's to finish before dropping it, as with any
/// stream-ordered allocator (PyTorch's record_stream, RMM's device_buffer).
///
/// A block made on a stream being captured into a CUDA graph is the graph's memory (a graph
/// memory node, memory/device_memory.hpp): it goes back on that stream, which records the free
/// node while the capture lasts; no event is recorded inside a capture (querying one is refused).
template <class R>
struct placed_block_release {
  R* resource;
  std::size_t bytes;
  void* copied = nullptr;                      ///< cudaEvent_t recorded after the copy; null: the copy had finished
  int copied_on = 0;                           ///< the device of `copied`, whose reused events it goes back to
  native_stream_handle captured_on = nullptr;  ///< the capturing stream that allocated it; null: none

#if DEVICEKIT_HAS_CUDA
  /// Records `copied` on `s`, a stream of GPU `ordinal`, after the work that fills the block: an
  /// event reused across placements (record_reused_event), given back when the block goes.
  void record_copied(native_stream_handle s, int ordinal) {
    copied = record_reused_event(s, ordinal);
    copied_on = ordinal;
  }
#endif

  void operator()(void* p) const noexcept {
    if constexpr (std::derived_from<R, device_memory>) {
      if (captured_on != nullptr) {
        try {
          resource->deallocate_async(p, bytes, placement_alignment, captured_on);
        } catch (...) {
          // Freed inside another capture: the pool keeps its record (capture_error), and says so
          // in its leak report; a destructor cannot report more.
        }
        return;
      }
    }
#if DEVICEKIT_HAS_CUDA
    if (copied != nullptr && cuda_calls_allowed()) {
      auto ev = static_cast<cudaEvent_t>(copied);
      cudaError_t done = cudaEventQuery(ev);
      if (done == cudaErrorNotReady) done = cudaEventSynchronize(ev);  // blocking-sync event
      if (done == cudaSuccess) {
        give_back_reused_event(copied_on, ev);
      } else {
        (void)cudaEventDestroy(ev);  // not reused: a failed event says nothing of a later record
      }
    }
#endif
    resource->deallocate(p, bytes, placement_alignment);
  }
};

/// Padding before a host leaf of `bytes` at block offset `offset` so that its copy does not
/// suffer 4K aliasing: memcpy slows down severalfold (measured on this project's machines) when
/// the destination sits a little ahead of the source modulo the 4 KiB page, because its stores
/// alias the loads still in flight (Intel 64 and IA-32 Architectures Optimization Reference
/// Manual, "4K aliasing"). Placing the destination at the source's page offset, rounded down to
/// the 256-byte alignment, avoids that. Assumes the block starts on a page (block_alignment asks
/// devicekit pools for page-aligned host blocks; others still get correct data). Only for leaves
/// of a page or more, and only when the padding costs at most a quarter of the leaf.
[[nodiscard]] DEVICEKIT_DECL std::size_t page_offset_padding(const void* src, std::size_t offset,
                                                             std::size_t bytes) noexcept;

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

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/detail/block.ipp>
#endif
