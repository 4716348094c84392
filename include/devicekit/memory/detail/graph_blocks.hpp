#pragma once
/// \file
/// `graph_blocks`: a pool's record of the memory it made on capturing streams, by capture
/// sequence. No lock of its own: device_memory calls it under the pool's lock.
///
/// On a capturing stream the pool does not hand out its own blocks: a block taken from the cache
/// would be used at every replay of the graph while the cache gives it to eager work as well.
/// It asks its upstream instead (cudaMallocFromPoolAsync, which a capture records as a graph
/// memory node: the graph allocates it at each launch, at the same address, and frees it at the
/// free node; "Graph Memory Nodes", CUDA C++ Programming Guide). CUDA keeps a graph's memory
/// until the graph is destroyed (or cudaDeviceGraphMemTrim), reusing within the graph what the
/// graph freed; so a capture holds at most the most its allocations held at once, its peak, and
/// the pool counts that peak against its budget until the graph goes (graph_memory_ledger).
#include <devicekit/core/config.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace devicekit::detail {

class graph_blocks {
 public:
  struct block {
    std::size_t bytes = 0;
    unsigned long long id = 0;  ///< the capture sequence that made it
    bool orphaned = false;      ///< its capture was released while it was still allocated
  };

  [[nodiscard]] bool empty() const noexcept { return blocks_.empty(); }
  [[nodiscard]] const block* find(const void* p) const noexcept {
    const auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(p));
    return it == blocks_.end() ? nullptr : &it->second;
  }

  /// What the budget would have to hold more if capture `id` allocated `bytes` now.
  [[nodiscard]] DEVICEKIT_DECL std::size_t growth_for(unsigned long long id, std::size_t bytes) const noexcept;
  /// Records `bytes` at `p`, made on a stream capturing sequence `id`.
  DEVICEKIT_DECL void add(const void* p, std::size_t bytes, unsigned long long id);
  /// Forgets the block at `p` (freed inside its capture, or dropped after it).
  DEVICEKIT_DECL void remove(const void* p) noexcept;
  /// Forgets capture `id`: its peak leaves the reserve; blocks still allocated stay as orphans
  /// until they are dropped, so that dropping them later is not a foreign free.
  DEVICEKIT_DECL void release(unsigned long long id) noexcept;

  [[nodiscard]] DEVICEKIT_DECL std::size_t live(unsigned long long id) const noexcept;
  [[nodiscard]] DEVICEKIT_DECL std::size_t peak(unsigned long long id) const noexcept;
  /// The bytes the captured graphs hold: the sum of their captures' peaks.
  [[nodiscard]] std::size_t reserved() const noexcept { return reserved_; }
  /// Blocks made in captures and not yet freed.
  [[nodiscard]] std::size_t count() const noexcept { return blocks_.size(); }

 private:
  struct capture_use {
    unsigned long long id = 0;
    std::size_t live = 0;
    std::size_t peak = 0;
  };
  [[nodiscard]] DEVICEKIT_DECL const capture_use* use_of(unsigned long long id) const noexcept;
  [[nodiscard]] capture_use* use_of(unsigned long long id) noexcept {
    for (capture_use& c : captures_) {
      if (c.id == id) return &c;
    }
    return nullptr;
  }

  std::map<std::uintptr_t, block> blocks_;
  std::vector<capture_use> captures_;  // few at a time: one per graph the pool served
  std::size_t reserved_ = 0;
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/graph_blocks.ipp>
#endif
