#pragma once
/// \file
/// `block_heap`: the pool's large blocks. It owns the chunks taken from the upstream, the blocks
/// that tile them in address order, and the ready free list; it finds the best fit, splits,
/// coalesces a freed block with its free neighbours, grows by a chunk and releases empty chunks.
/// RMM splits its pool the same way (detail/coalescing_free_list.hpp for free blocks and merging,
/// pool_memory_resource.hpp for growth). Per-stream free lists belong to the stream registry and
/// are passed in: a block freed on a stream merges only with neighbours freed on the same stream.
/// Not locked: device_memory calls it under its own lock.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/detail/pool_upstream.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace devicekit::detail {

class block_heap {
 public:
  using block = pool_block;

  struct chunk {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    block* first = nullptr;
    bool initial = false;
    bool live = false;
  };

  /// Growth steps: at least `min_chunk`, at most `max_chunk` (unless a request is larger),
  /// `growth_factor` as pool_config says.
  void configure(pool_upstream* upstream, std::size_t min_chunk, std::size_t max_chunk, double growth_factor) noexcept;

  [[nodiscard]] free_index& ready() noexcept { return ready_; }
  [[nodiscard]] const free_index& ready() const noexcept { return ready_; }

  /// The best fit for `n` bytes aligned to `alignment` among the ready blocks and `own` (the
  /// requesting stream's own frees, or null), split so that exactly `n` bytes are taken; the
  /// pieces before and after stay free where they were. Null when nothing fits.
  block* take(std::size_t n, std::size_t alignment, free_index* own, block_state as);

  /// Makes `b` (in no free list) free in `idx`, the list of stream slot `sid` (0 and ready_ for
  /// blocks any stream may take), merging it with free neighbours of the same slot.
  void insert_free(block* b, std::uint16_t sid, std::uint64_t seq, free_index& idx);
  void insert_ready(block* b) { insert_free(b, 0, 0, ready_); }

  /// Takes a chunk of at least `need` bytes from the upstream, within `max_size` reserved in all.
  /// Returns false when the budget or the upstream refuses (why: last_upstream_error()).
  bool grow(std::size_t need, std::size_t max_size, device dev);

  /// The size of the pool's initial chunk: `initial_size` rounded to the granule, within `max_size`.
  [[nodiscard]] static std::size_t initial_chunk(std::size_t initial_size, std::size_t max_size) noexcept {
    return round_up_pow2(std::min(initial_size, max_size & ~(pool_granule - 1)), pool_granule);
  }

  /// The pool's initial chunk, `bytes` (initial_chunk) from the upstream at once, kept by trim().
  /// Throws what the upstream throws.
  void preallocate(std::size_t bytes) {
    if (bytes > 0) add_chunk(upstream_->allocate(bytes, pool_granule), bytes, true);
  }

  /// Adopts `bytes` at `p` from the upstream as a chunk (one ready block). `initial`: the
  /// preallocated chunk, which trim() keeps.
  void add_chunk(void* p, std::size_t bytes, bool initial);

  /// Returns chunks that are one ready free block to the upstream. Returns (bytes, chunks).
  std::pair<std::size_t, std::size_t> release_empty_chunks(bool keep_initial);

  /// Returns every chunk to the upstream, live allocations or not (the pool is being destroyed).
  void release_all() noexcept;

  /// Whether `a` lies in one of the chunks.
  [[nodiscard]] bool inside_chunk(std::uintptr_t a) const noexcept;

  [[nodiscard]] const std::string& last_upstream_error() const noexcept { return last_upstream_error_; }
  void clear_upstream_error() noexcept { last_upstream_error_.clear(); }

  [[nodiscard]] std::size_t reserved() const noexcept { return reserved_; }
  [[nodiscard]] std::size_t peak_reserved() const noexcept { return peak_reserved_; }
  void reset_peak() noexcept { peak_reserved_ = reserved_; }
  [[nodiscard]] std::uint64_t upstream_allocations() const noexcept { return upstream_allocations_; }
  [[nodiscard]] std::uint64_t upstream_frees() const noexcept { return upstream_frees_; }
  [[nodiscard]] std::size_t chunk_count() const noexcept { return chunk_order_.size(); }

  // For the invariant checker.
  [[nodiscard]] const std::vector<chunk>& chunks() const noexcept { return chunks_; }
  [[nodiscard]] const std::vector<std::pair<std::uintptr_t, std::uint32_t>>& chunk_order() const noexcept {
    return chunk_order_;
  }

 private:
  pool_upstream* upstream_ = nullptr;
  std::size_t min_chunk_ = 0;
  std::size_t max_chunk_ = 0;
  double growth_factor_ = 1.0;

  block_arena blocks_;
  free_index ready_;
  std::vector<chunk> chunks_;
  std::vector<std::uint32_t> spare_chunk_ids_;
  std::vector<std::pair<std::uintptr_t, std::uint32_t>> chunk_order_;  ///< (base, id) by address
  std::string last_upstream_error_;

  std::size_t reserved_ = 0;
  std::size_t peak_reserved_ = 0;
  std::uint64_t upstream_allocations_ = 0;
  std::uint64_t upstream_frees_ = 0;
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/block_heap.ipp>
#endif
