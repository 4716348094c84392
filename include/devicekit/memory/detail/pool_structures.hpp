#pragma once
/// \file
/// The pool's bookkeeping, all on the host (device memory is never read or written by the pool):
///   pool_block    a piece of a chunk, in address order within its chunk
///   block_arena   recycles block nodes so that no operation calls malloc in steady state
///   free_index    segregated free lists (8 bins per power of two, a bitmap of non-empty bins)
///                 with a bounded best-fit search
///   live_map      open-addressing hash map from an allocation's address to its record
///   size classes  for small requests (4 classes per power of two, multiples of 256 bytes)
#include <devicekit/core/stream.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>
#include <vector>

namespace devicekit::detail {

/// Every block is a multiple of this and starts on it (cudaMalloc's alignment).
inline constexpr std::size_t pool_granule = 256;

[[nodiscard]] constexpr std::size_t round_up_pow2(std::size_t n, std::size_t a) noexcept {
  return (n + a - 1) & ~(a - 1);
}

enum class block_state : std::uint8_t { free, used, slab };

struct pool_block {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  pool_block* prev_phys = nullptr;  ///< neighbours in the chunk, by address
  pool_block* next_phys = nullptr;
  pool_block* next_free = nullptr;  ///< the arena's list of spare nodes
  std::uint64_t seq = 0;            ///< free sequence number on its stream (pending blocks)
  std::uint32_t chunk = 0;
  std::uint32_t slot = 0;    ///< position in its free bin
  std::uint16_t stream = 0;  ///< 0: ready for any stream; else the stream slot it was freed on
  std::uint16_t bin = 0;
  block_state state = block_state::free;
};

class block_arena {
 public:
  [[nodiscard]] pool_block* make();
  void recycle(pool_block* b) noexcept {
    b->next_free = free_;
    free_ = b;
  }

 private:
  void grow();
  std::vector<std::unique_ptr<pool_block[]>> storage_;
  pool_block* free_ = nullptr;
};

/// Free blocks by size. Bin k holds sizes in [lower(k), lower(k + 1)): exact for the first 16
/// granules, then 8 bins per power of two (12.5% apart). Each bin is a contiguous array of
/// (size, block) pairs, so a search reads sequential memory instead of chasing list pointers. A
/// search looks at the request's own bin for the smallest block that fits, then at the first
/// non-empty larger bin (where every block fits) for its smallest; each scan is bounded, so the
/// result is the best fit among the blocks looked at and never worse than one bin (12.5%) above
/// the true best fit.
class free_index {
 public:
  static constexpr int bin_count = 512;
  static constexpr std::size_t scan_limit = 32;

  [[nodiscard]] static int bin_of(std::size_t size) noexcept;

  void insert(pool_block* b);

  void erase(pool_block* b) noexcept;

  [[nodiscard]] pool_block* best_fit(std::size_t size) const noexcept;

  /// The largest free block (scans the highest non-empty bin completely).
  [[nodiscard]] pool_block* largest() const noexcept;

  template <class F>
  void for_each(F&& f) const {
    for (std::size_t w = 0; w < bitmap_.size(); ++w) {
      for (std::uint64_t bits = bitmap_[w]; bits != 0; bits &= bits - 1) {
        const std::size_t k = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        for (const entry& e : bins_[k]) f(e.blk);
      }
    }
  }

  /// Whether `b` is where this index says it is (for consistency checks).
  [[nodiscard]] bool holds(const pool_block* b) const noexcept {
    const auto& bin = bins_[b->bin];
    return b->slot < bin.size() && bin[b->slot].blk == b && bin[b->slot].size == b->size;
  }

  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }

 private:
  struct entry {
    std::size_t size;
    pool_block* blk;
  };

  /// The smallest block of at least `size` among the last scan_limit entries (the most recently
  /// freed, whose metadata is most likely cached).
  [[nodiscard]] static pool_block* smallest_fitting(const std::vector<entry>& bin, std::size_t size) noexcept;

  [[nodiscard]] int next_nonempty(int from) const noexcept;

  std::array<std::vector<entry>, bin_count> bins_{};
  std::array<std::uint64_t, bin_count / 64> bitmap_{};
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
};

/// Small requests: classes 256, 512, 768, 1024, then four per power of two (1280, 1536, 1792,
/// 2048, 2560, ...): at most 25% rounding. Each class is served from slabs of at least 16 slots.
struct size_classes {
  static constexpr std::size_t max_small = 1u << 20;

  [[nodiscard]] static constexpr int class_of(std::size_t bytes) noexcept {
    if (bytes <= 1024) return bytes <= 256 ? 0 : static_cast<int>((bytes - 1) / 256);
    const int k = std::bit_width(bytes - 1) - 1;  // 2^k < bytes <= 2^(k+1)
    const std::size_t step = std::size_t{1} << (k - 2);
    // A shift, not a division by `step`: compilers emit a divide for a variable power of two.
    const std::size_t j = (bytes - (std::size_t{1} << k) + step - 1) >> (k - 2);  // 1..4
    return 4 + (k - 10) * 4 + static_cast<int>(j) - 1;
  }
  [[nodiscard]] static constexpr std::size_t slot_size(int cls) noexcept {
    if (cls < 4) return static_cast<std::size_t>(cls + 1) * 256;
    const int k = 10 + (cls - 4) / 4;
    const std::size_t j = static_cast<std::size_t>((cls - 4) % 4 + 1);
    return (std::size_t{1} << k) + j * (std::size_t{1} << (k - 2));
  }
  [[nodiscard]] static constexpr std::size_t slab_bytes(int cls) noexcept {
    const std::size_t slot = slot_size(cls);
    const std::size_t slots = slot >= 4096 ? 16 : (64u << 10) / slot;
    return slot * slots;
  }
  /// The number of classes needed to serve requests up to `limit` bytes.
  [[nodiscard]] static constexpr int count_for(std::size_t limit) noexcept {
    return limit == 0 ? 0 : class_of(limit) + 1;
  }
};

static_assert(size_classes::class_of(1) == 0 && size_classes::class_of(256) == 0 && size_classes::class_of(257) == 1);
static_assert(size_classes::class_of(1024) == 3 && size_classes::slot_size(4) == 1280);
static_assert(size_classes::class_of(2048) == 7 && size_classes::class_of(2049) == 8 &&
              size_classes::slot_size(8) == 2560);
static_assert(size_classes::slot_size(size_classes::class_of(16384)) == 16384);

struct pool_slab {
  pool_block* blk = nullptr;
  std::uintptr_t base = 0;
  std::uint32_t slot_size = 0;
  std::uint32_t capacity = 0;
  std::uint32_t used = 0;  ///< slots handed out or waiting on a stream
  std::uint32_t bump = 0;  ///< slots [bump, capacity) have never been handed out
  std::uint16_t cls = 0;
  bool in_partial = false;
  std::vector<std::uint32_t> free_slots;  ///< ready slots, handed out last-in first-out
  pool_slab* prev = nullptr;              ///< in its class's list of slabs with a ready slot
  pool_slab* next = nullptr;

  [[nodiscard]] bool has_ready_slot() const noexcept { return !free_slots.empty() || bump < capacity; }
};

struct class_state {
  pool_slab* partial = nullptr;  ///< slabs with at least one ready slot
  pool_slab* empty = nullptr;    ///< one fully free slab kept per class, against churn
};

struct pending_slot {
  std::uintptr_t addr = 0;
  pool_slab* slab = nullptr;
  std::uint64_t seq = 0;
};

/// A stream that freed memory: its frees are reusable on it at once, and on other streams once
/// an event recorded on it after them has completed, or after a fence (pool_stream_registry.hpp).
struct stream_state {
  native_stream_handle handle{};
  free_index large;
  std::vector<std::vector<pending_slot>> small;  ///< per size class
  std::size_t small_pending = 0;
  std::uint64_t next_seq = 1;      ///< given to the next free on this stream
  std::uint64_t recorded_seq = 0;  ///< frees up to this one are covered by `event`
  std::uint64_t trace_cover = 0;   ///< in a memory trace, what `event` covers (trace_ready_body::upto)
  void* event = nullptr;
  bool event_in_flight = false;  ///< `event` was recorded and not yet seen complete
  bool retired = false;          ///< the slot is free for another stream (release_stream)
  bool fenced = false;           ///< the upstream's fence covers this stream: no event per free
  bool event_wanted = false;     ///< another stream needs these frees: record at the next use
  bool orphaned = false;         ///< released with frees no event covers: only a fence frees them

  [[nodiscard]] std::size_t pending() const noexcept { return large.count() + small_pending; }
  /// Whether some pending free was made after the last recorded event.
  [[nodiscard]] bool has_unrecorded_frees() const noexcept { return pending() != 0 && next_seq - 1 > recorded_seq; }
};

enum class live_kind : std::uint8_t { large, small };

/// 24 bytes, so that the table stays dense: the source location and alignment of a tracked
/// allocation live in a side table.
struct live_record {
  std::uintptr_t key = 0;  ///< the address; 0 marks an empty slot
  std::size_t requested = 0;
  std::uintptr_t owner_kind = 0;  ///< pool_block* (large) or pool_slab* (small), kind in bit 0

  live_record() = default;
  live_record(std::uintptr_t k, std::size_t bytes, void* owner, live_kind kind) noexcept
      : key(k),
        requested(bytes),
        owner_kind(reinterpret_cast<std::uintptr_t>(owner) | static_cast<std::uintptr_t>(kind)) {}
  [[nodiscard]] void* owner() const noexcept { return reinterpret_cast<void*>(owner_kind & ~std::uintptr_t{1}); }
  [[nodiscard]] live_kind kind() const noexcept { return static_cast<live_kind>(owner_kind & 1u); }
};

/// Where a tracked allocation came from.
struct allocation_site {
  std::source_location where{};
  std::size_t alignment = 0;
};

/// Linear probing, power-of-two capacity, load at most 1/2, backward-shift deletion (no
/// tombstones, so lookups stay short after long alloc/free sequences).
class live_map {
 public:
  live_map() { rehash(1024); }

  [[nodiscard]] live_record* find(std::uintptr_t key) noexcept;
  [[nodiscard]] const live_record* find(std::uintptr_t key) const noexcept {
    return const_cast<live_map*>(this)->find(key);
  }

  /// Makes sure the next insert does not allocate.
  void reserve_one() {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
  }
  void insert(const live_record& rec) {
    reserve_one();
    place(rec);
    ++size_;
  }

  void erase(live_record* r) noexcept;

  template <class F>
  void for_each(F&& f) const {
    for (const auto& r : slots_) {
      if (r.key != 0) f(r);
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  [[nodiscard]] std::size_t home(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>(((static_cast<std::uint64_t>(key) >> 8) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void place(const live_record& rec) noexcept {
    std::size_t i = home(rec.key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = rec;
  }
  void rehash(std::size_t capacity);

  std::vector<live_record> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/pool_structures.ipp>
#endif
