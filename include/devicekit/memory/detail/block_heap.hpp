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
#include <exception>
#include <limits>
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
  void configure(pool_upstream* upstream, std::size_t min_chunk, std::size_t max_chunk, double growth_factor) noexcept {
    upstream_ = upstream;
    min_chunk_ = min_chunk;
    max_chunk_ = max_chunk;
    growth_factor_ = growth_factor;
  }

  [[nodiscard]] free_index& ready() noexcept { return ready_; }
  [[nodiscard]] const free_index& ready() const noexcept { return ready_; }

  /// The best fit for `n` bytes aligned to `alignment` among the ready blocks and `own` (the
  /// requesting stream's own frees, or null), split so that exactly `n` bytes are taken; the
  /// pieces before and after stay free where they were. Null when nothing fits.
  block* take(std::size_t n, std::size_t alignment, free_index* own, block_state as) {
    const std::size_t need = alignment > pool_granule ? n + alignment - pool_granule : n;
    block* b = own != nullptr ? own->best_fit(need) : nullptr;
    free_index* from = own;
    if (block* r = ready_.best_fit(need); r != nullptr && (b == nullptr || r->size < b->size)) {
      b = r;
      from = &ready_;
    }
    if (b == nullptr) return nullptr;
    free_index& idx = *from;
    idx.erase(b);
    const std::uintptr_t start = (b->addr + alignment - 1) & ~static_cast<std::uintptr_t>(alignment - 1);
    if (start != b->addr) {  // the front piece stays free, on the same stream
      block* f = blocks_.make();
      f->addr = b->addr;
      f->size = start - b->addr;
      f->chunk = b->chunk;
      f->stream = b->stream;
      f->seq = b->seq;
      f->prev_phys = b->prev_phys;
      f->next_phys = b;
      if (b->prev_phys != nullptr) {
        b->prev_phys->next_phys = f;
      } else {
        chunks_[b->chunk].first = f;
      }
      b->prev_phys = f;
      b->addr = start;
      b->size -= f->size;
      idx.insert(f);
    }
    if (b->size > n) {  // so does the tail
      block* t = blocks_.make();
      t->addr = b->addr + n;
      t->size = b->size - n;
      t->chunk = b->chunk;
      t->stream = b->stream;
      t->seq = b->seq;
      t->prev_phys = b;
      t->next_phys = b->next_phys;
      if (b->next_phys != nullptr) b->next_phys->prev_phys = t;
      b->next_phys = t;
      b->size = n;
      idx.insert(t);
    }
    b->state = as;
    b->stream = 0;
    b->seq = 0;
    return b;
  }

  /// Makes `b` (in no free list) free in `idx`, the list of stream slot `sid` (0 and ready_ for
  /// blocks any stream may take), merging it with free neighbours of the same slot.
  void insert_free(block* b, std::uint16_t sid, std::uint64_t seq, free_index& idx) {
    b->state = block_state::free;
    b->stream = sid;
    b->seq = seq;
    if (block* p = b->prev_phys; p != nullptr && p->state == block_state::free && p->stream == sid) {
      idx.erase(p);
      p->size += b->size;
      p->next_phys = b->next_phys;
      if (b->next_phys != nullptr) b->next_phys->prev_phys = p;
      p->seq = std::max(p->seq, b->seq);
      blocks_.recycle(b);
      b = p;
    }
    if (block* n = b->next_phys; n != nullptr && n->state == block_state::free && n->stream == sid) {
      idx.erase(n);
      b->size += n->size;
      b->next_phys = n->next_phys;
      if (n->next_phys != nullptr) n->next_phys->prev_phys = b;
      b->seq = std::max(b->seq, n->seq);
      blocks_.recycle(n);
    }
    idx.insert(b);
  }
  void insert_ready(block* b) { insert_free(b, 0, 0, ready_); }

  /// Takes a chunk of at least `need` bytes from the upstream, within `max_size` reserved in all.
  /// Returns false when the budget or the upstream refuses (why: last_upstream_error()).
  bool grow(std::size_t need, std::size_t max_size, device dev) {
    const std::size_t room = max_size > reserved_ ? (max_size - reserved_) & ~(pool_granule - 1) : 0;
    if (need > room) return false;
    std::size_t step = 0;
    if (growth_factor_ > 1.0) {
      const double g = static_cast<double>(reserved_) * (growth_factor_ - 1.0);
      step = g >= static_cast<double>(max_chunk_) ? max_chunk_ : static_cast<std::size_t>(g);
    }
    // At least the request and min_chunk_size, in whole multiples of min_chunk_size (what is
    // left over serves the next requests), at most max_chunk_size (unless the request is
    // larger) and the room left in the budget.
    std::size_t want = std::max({need, step, min_chunk_});
    want = (want + min_chunk_ - 1) / min_chunk_ * min_chunk_;
    want = std::min(want, std::max(max_chunk_, need));
    want = std::max(std::min(want, room), need);
    for (;;) {
      void* p = nullptr;
      try {
        p = upstream_->allocate(want, pool_granule);
      } catch (const std::exception& e) {
        last_upstream_error_ = e.what();
      }
      if (p != nullptr) {
        if ((reinterpret_cast<std::uintptr_t>(p) & (pool_granule - 1)) != 0) {
          upstream_->deallocate(p, want, pool_granule);
          throw config_error(
              "the pool's upstream on " + dev.str() +
              " returned memory not aligned to 256 bytes; an upstream must honour the alignment it is asked for");
        }
        last_upstream_error_.clear();
        add_chunk(p, want, false);
        return true;
      }
      if (want == need) return false;
      want = need;  // a smaller chunk may still be there
    }
  }

  /// Adopts `bytes` at `p` from the upstream as a chunk (one ready block). `initial`: the
  /// preallocated chunk, which trim() keeps.
  /// The pool's initial chunk: `initial_size` bytes (within `max_size`) from the upstream at once,
  /// kept by trim(). Throws what the upstream throws.
  void preallocate(std::size_t initial_size, std::size_t max_size) {
    const std::size_t n = round_up_pow2(std::min(initial_size, max_size & ~(pool_granule - 1)), pool_granule);
    if (n > 0) add_chunk(upstream_->allocate(n, pool_granule), n, true);
  }

  void add_chunk(void* p, std::size_t bytes, bool initial) {
    std::uint32_t id = 0;
    if (!spare_chunk_ids_.empty()) {
      id = spare_chunk_ids_.back();
      spare_chunk_ids_.pop_back();
    } else {
      id = static_cast<std::uint32_t>(chunks_.size());
      chunks_.emplace_back();
    }
    block* b = blocks_.make();
    b->addr = reinterpret_cast<std::uintptr_t>(p);
    b->size = bytes;
    b->chunk = id;
    chunks_[id] = chunk{b->addr, bytes, b, initial, true};
    const auto pos =
        std::lower_bound(chunk_order_.begin(), chunk_order_.end(), std::make_pair(b->addr, std::uint32_t{0}));
    chunk_order_.insert(pos, {b->addr, id});
    reserved_ += bytes;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
    ++upstream_allocations_;
    insert_ready(b);
  }

  /// Returns chunks that are one ready free block to the upstream. Returns (bytes, chunks).
  std::pair<std::size_t, std::size_t> release_empty_chunks(bool keep_initial) {
    std::size_t bytes = 0;
    std::size_t count = 0;
    for (std::uint32_t id = 0; id < chunks_.size(); ++id) {
      chunk& c = chunks_[id];
      if (!c.live || (keep_initial && c.initial)) continue;
      block* b = c.first;
      if (b->state != block_state::free || b->stream != 0 || b->size != c.size) continue;
      ready_.erase(b);
      blocks_.recycle(b);
      upstream_->deallocate(reinterpret_cast<void*>(c.base), c.size, pool_granule);
      reserved_ -= c.size;
      ++upstream_frees_;
      bytes += c.size;
      ++count;
      const auto pos =
          std::lower_bound(chunk_order_.begin(), chunk_order_.end(), std::make_pair(c.base, std::uint32_t{0}));
      chunk_order_.erase(pos);
      c = chunk{};
      spare_chunk_ids_.push_back(id);
    }
    return {bytes, count};
  }

  /// Returns every chunk to the upstream, live allocations or not (the pool is being destroyed).
  void release_all() noexcept {
    for (auto& c : chunks_) {
      if (!c.live) continue;
      upstream_->deallocate(reinterpret_cast<void*>(c.base), c.size, pool_granule);
      c.live = false;
    }
    chunks_.clear();
    chunk_order_.clear();
    reserved_ = 0;
  }

  /// Whether `a` lies in one of the chunks.
  [[nodiscard]] bool inside_chunk(std::uintptr_t a) const noexcept {
    auto it = std::upper_bound(chunk_order_.begin(), chunk_order_.end(),
                               std::make_pair(a, std::numeric_limits<std::uint32_t>::max()));
    if (it == chunk_order_.begin()) return false;
    --it;
    const chunk& c = chunks_[it->second];
    return a >= c.base && a < c.base + c.size;
  }

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
