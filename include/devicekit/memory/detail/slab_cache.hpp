#pragma once
/// \file
/// `slab_cache`: the pool's small requests, served from size classes (4 per power of two,
/// detail::size_classes) carved from slabs, as PyTorch's caching allocator keeps a separate pool
/// for small blocks: small frees then never fragment the large blocks. A slab is one block of
/// the block_heap; it goes back there when all its slots are free, except one empty slab per class
/// kept against churn. Slots freed on a stream wait in the stream registry until their event
/// completes, then come back here. Not locked: device_memory calls it under its own lock.
#include <devicekit/memory/detail/block_heap.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace devicekit::detail {

class slab_cache {
 public:
  using slab = pool_slab;

  /// A slot handed out: its address and the slab it belongs to.
  struct slot {
    std::uintptr_t addr = 0;
    slab* owner = nullptr;
  };

  /// Requests up to `small_limit` bytes use `class_count` classes (0: none).
  void configure(int class_count, std::size_t small_limit) {
    class_count_ = class_count;
    small_limit_ = small_limit;
    classes_.assign(static_cast<std::size_t>(class_count), class_state{});
  }

  [[nodiscard]] int class_count() const noexcept { return class_count_; }

  /// Whether this request is served by a size class.
  [[nodiscard]] bool serves(std::size_t bytes, std::size_t alignment) const noexcept {
    return alignment <= pool_granule && bytes <= small_limit_ && class_count_ > 0;
  }

  /// A ready slot of class `cls`, from a slab with one, or from a new slab cut from the heap's
  /// ready blocks (a slab's slots go to any stream). addr 0 when the heap has no room.
  slot take(int cls, block_heap& heap);

  /// A slot becomes ready again (freed synchronously, or its stream's event completed).
  void release_slot(slab* s, std::uintptr_t addr, block_heap& heap);

  /// Gives the empty slab kept per class back to the heap.
  void release_empty(block_heap& heap) {
    for (auto& c : classes_) {
      if (c.empty != nullptr) destroy_slab(c.empty, heap);
    }
  }

  /// The largest slot a request could get without a new slab (for pool_stats).
  [[nodiscard]] std::size_t largest_ready_slot() const noexcept;

  // For the invariant checker.
  [[nodiscard]] const std::vector<std::unique_ptr<slab>>& slabs() const noexcept { return slab_store_; }
  [[nodiscard]] const std::vector<class_state>& classes() const noexcept { return classes_; }
  [[nodiscard]] std::size_t slab_count() const noexcept { return slab_count_; }

 private:
  slab* make_slab(int cls, block_heap& heap);

  void destroy_slab(slab* s, block_heap& heap);

  void partial_push(slab* s) noexcept;

  void partial_remove(slab* s) noexcept;

  int class_count_ = 0;
  std::size_t small_limit_ = 0;
  std::vector<class_state> classes_;
  std::vector<std::unique_ptr<slab>> slab_store_;
  std::vector<slab*> spare_slabs_;
  std::size_t slab_count_ = 0;
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/slab_cache.ipp>
#endif
