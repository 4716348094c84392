#pragma once
/// \file
/// Pinned staging for transfers that pass through host memory: the chunk sizes, `staging_ring`
/// (buffers for one transfer, reused once their copies complete) and the arithmetic that maps
/// source and destination ranges onto chunks. No locks: a ring belongs to one transfer on one
/// thread; the staging pool it draws from locks itself.
#include <devicekit/core/config.hpp>
#include <devicekit/transfer/detail/copy_workers.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <span>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/memory/device_memory.hpp>
#  include <devicekit/memory/registry.hpp>

#  include <deque>
#  include <vector>
#endif

namespace devicekit::detail {

/// Transfers above this size are pipelined in `staging_chunk_bytes` chunks, in every direction, so
/// a transfer never pins its whole size at once; at or below it, in staging_pipeline_chunks()
/// pieces (see staging_buffer_bytes).
inline constexpr std::size_t single_stage_limit = std::size_t{16} << 20;
inline constexpr std::size_t staging_chunk_bytes = std::size_t{8} << 20;
/// Transfers of at most this size go through one staging buffer in one copy. Each piece of a
/// pipelined transfer costs a copy, an event and a job for the copy threads, while the overlap
/// saves at most the shorter of packing and copying (76 us for 4 MiB on an H200): 1,024 leaves
/// of 4 KiB (4 MiB) were placed faster in one buffer than in 2, 4 or 8 pieces in each of three
/// runs on an H200 (bench_place, place.small_leaves.pipelined.vs_one_buffer: 274 us against 286,
/// 301 and 370 in one of them), so pieces start above 4 MiB.
inline constexpr std::size_t pipelined_stage_min_bytes = std::size_t{4} << 20;
/// Pieces of a pipelined transfer start on this boundary in the staging space, so that the copy
/// threads' page-aligned slices of one piece never share a page with the next.
inline constexpr std::size_t staging_piece_granule = std::size_t{64} << 10;
inline constexpr unsigned max_staging_pipeline_chunks = 64;
/// Staging one transfer toward a stream may hold while the stream has not yet reached its copies
/// (a stream busy with earlier work): up to this much, the host takes fresh buffers and returns
/// without waiting for the stream; beyond it, it waits for the oldest chunk's copy.
inline constexpr std::size_t max_staging_in_flight = std::size_t{256} << 20;

/// A byte range of a transfer's staging space [0, total) that holds part of one source or
/// destination range: `at` is where the range begins in the staging space.
struct staged_range {
  std::size_t at;
  std::size_t bytes;
};

/// Calls f(range index, offset in range, offset in [lo, hi), length) for each part of `ranges`
/// (sorted by `at`, not overlapping) inside [lo, hi); `cursor` carries the first range that may
/// still overlap from one call to the next (chunks come in increasing order).
template <class F>
void for_each_part(std::span<const staged_range> ranges, std::size_t& cursor, std::size_t lo, std::size_t hi, F&& f) {
  while (cursor < ranges.size() && ranges[cursor].at + ranges[cursor].bytes <= lo) ++cursor;
  for (std::size_t k = cursor; k < ranges.size() && ranges[k].at < hi; ++k) {
    const std::size_t a = std::max(lo, ranges[k].at);
    const std::size_t z = std::min(hi, ranges[k].at + ranges[k].bytes);
    if (a < z) f(k, a - ranges[k].at, a - lo, z - a);
  }
}

/// for_each_part, with [lo, hi) split into slices of at least shared_copy_min_part_bytes that
/// run on the copy threads (copy_workers) at the same time: `f` is called concurrently, for
/// disjoint parts. Returns once every part has been handled; `cursor` is left as for_each_part
/// leaves it.
template <class F>
void for_each_part_shared(std::span<const staged_range> ranges, std::size_t& cursor, std::size_t lo, std::size_t hi,
                          F&& f) {
  const std::size_t len = hi > lo ? hi - lo : 0;
  const std::size_t most = len / shared_copy_min_part_bytes;
  if (most < 2) return for_each_part(ranges, cursor, lo, hi, f);  // too small to share
  // Up to four slices per thread: the calling thread starts at once and takes what the others,
  // still waking, have not, so the slices even out however late a thread comes.
  const std::size_t threads = copy_workers::instance().threads();
  if (threads < 2) return for_each_part(ranges, cursor, lo, hi, f);
  std::size_t parts = std::min(most, 4 * threads);
  while (cursor < ranges.size() && ranges[cursor].at + ranges[cursor].bytes <= lo) ++cursor;
  // Slices of whole pages: in the staging space two threads never share a cache line.
  const std::size_t page = 4096;
  const std::size_t step = ((len + parts - 1) / parts + page - 1) / page * page;
  parts = (len + step - 1) / step;
  const std::size_t first = cursor;
  auto slice = [&](std::size_t j) {
    const std::size_t a = lo + j * step;
    const std::size_t z = std::min(hi, a + step);
    // The first range that ends after `a` (ranges are sorted and do not overlap).
    std::size_t c =
        static_cast<std::size_t>(std::partition_point(ranges.begin() + static_cast<std::ptrdiff_t>(first), ranges.end(),
                                                      [&](const staged_range& r) { return r.at + r.bytes <= a; }) -
                                 ranges.begin());
    for_each_part(ranges, c, a, z, [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
      f(k, from, to + (a - lo), n);
    });
  };
  copy_workers::instance().run(parts, slice);
}

/// How many pieces a transfer of more than pipelined_stage_min_bytes and at most
/// single_stage_limit is staged in (1: one buffer, one copy). In pieces, the copy engine moves
/// piece k while the host packs piece k + 1 (or unpacks piece k - 1), so a transfer takes about
/// the longer of the two halves instead of their sum, less what each piece costs on its own
/// (see pipelined_stage_min_bytes). 4 unless set otherwise (a benchmark compares counts in one
/// run); values above max_staging_pipeline_chunks count as that.
[[nodiscard]] inline std::atomic<unsigned>& staging_pipeline_chunks() noexcept {
  static std::atomic<unsigned> chunks{4};
  return chunks;
}

/// The staging buffer size for a transfer of `total` bytes: all of it up to
/// pipelined_stage_min_bytes, staging_pipeline_chunks() pieces (whole staging_piece_granule
/// multiples) up to single_stage_limit, then staging_chunk_bytes.
[[nodiscard]] inline std::size_t staging_buffer_bytes(std::size_t total) noexcept {
  if (total > single_stage_limit) return staging_chunk_bytes;
  const std::size_t pieces =
      std::min<std::size_t>(staging_pipeline_chunks().load(std::memory_order_relaxed), max_staging_pipeline_chunks);
  if (total <= pipelined_stage_min_bytes || pieces <= 1) return total;
  const std::size_t piece = (total + pieces - 1) / pieces;
  return (piece + staging_piece_granule - 1) / staging_piece_granule * staging_piece_granule;
}

#if DEVICEKIT_HAS_CUDA

/// Pinned staging buffers of one size for one transfer, from the process's staging pool
/// (staging_memory(), memory/registry.hpp). `next()` gives a buffer no queued copy uses any more:
/// an idle one, the oldest one whose copy has completed, or a fresh one from the pool while fewer
/// than `max_in_flight` bytes are out, so the host does not wait for a stream that is still busy
/// with earlier work; past that it waits for the oldest. The pool's synchronous allocate hands
/// out only blocks whose stream-ordered frees have completed, so the host may write a fresh
/// buffer at once. `used(b, ev, s)` hands a buffer back with the event after its last copy (the
/// ring owns the event) and the stream that copy was queued on. The destructor returns every
/// buffer to the pool: those still in use with a stream-ordered free on their stream (RMM's and
/// the CUDA stream-ordered allocator's rule: a free queued after the last use), the others at
/// once; a buffer taken and not handed back goes back at once, so on an error path the caller
/// first waits for the copies it queued.
class staging_ring {
 public:
  staging_ring(std::size_t buffer_bytes, std::size_t max_in_flight)
      : pool_(&staging_memory()),
        bytes_(buffer_bytes),
        max_buffers_(std::max<std::size_t>(2, max_in_flight / std::max<std::size_t>(1, buffer_bytes))) {}
  staging_ring(const staging_ring&) = delete;
  staging_ring& operator=(const staging_ring&) = delete;
  ~staging_ring();

  [[nodiscard]] std::byte* next();

  void used(std::byte* p, cudaEvent_t done, cudaStream_t s) {
    std::erase(taken_, p);
    busy_.push_back({p, done, s});
  }

  /// Buffers taken and not handed back become idle (their copies were not queued, or the caller
  /// has waited for them).
  void abandon_taken() noexcept {
    idle_.insert(idle_.end(), taken_.begin(), taken_.end());
    taken_.clear();
  }

 private:
  struct busy_buffer {
    std::byte* p;
    cudaEvent_t done;
    cudaStream_t stream;
  };

  void free_now(std::byte* p) noexcept;

  device_memory* pool_;
  std::size_t bytes_;
  std::size_t max_buffers_;
  std::deque<busy_buffer> busy_;
  std::vector<std::byte*> idle_;
  std::vector<std::byte*> taken_;
};

/// The staging blocks of a call that waits on the host for its stream before it returns (a call
/// without a stream): while one is alive on this thread for stream `s`, a staged copy toward `s`
/// that fits in one buffer hands its block here instead of freeing it in stream order, and the
/// block goes back to the staging pool synchronously once the caller has waited (waited()). A
/// stream-ordered free records an event after the copy; the caller's own wait already orders the
/// free after it, as a hand-written program reuses its staging buffer after cudaStreamSynchronize.
/// Destroyed without waited() (an error on the way), it first waits for the stream, as the
/// staging ring does on its error path. Nested ones: the innermost for its stream wins.
class staging_freed_after_wait {
 public:
  explicit staging_freed_after_wait(cudaStream_t s) noexcept : stream_(s), outer_(current()) { current() = this; }
  staging_freed_after_wait(const staging_freed_after_wait&) = delete;
  staging_freed_after_wait& operator=(const staging_freed_after_wait&) = delete;
  ~staging_freed_after_wait();
  /// The caller has waited on the host for every copy queued on the stream so far.
  void waited() noexcept { waited_ = true; }
  /// This thread's innermost one for stream `s`, or nullptr.
  [[nodiscard]] static staging_freed_after_wait* of(cudaStream_t s) noexcept {
    staging_freed_after_wait* c = current();
    return c != nullptr && c->stream_ == s ? c : nullptr;
  }
  /// Takes `p` (`bytes` from staging_memory()), read by a copy queued on the stream; may throw
  /// std::bad_alloc, and then has not taken it.
  void keep(std::byte* p, std::size_t bytes) { blocks_.push_back({p, bytes}); }

 private:
  struct block {
    std::byte* p;
    std::size_t bytes;
  };
  [[nodiscard]] static staging_freed_after_wait*& current() noexcept {
    thread_local staging_freed_after_wait* c = nullptr;
    return c;
  }
  cudaStream_t stream_;
  staging_freed_after_wait* outer_;
  bool waited_ = false;
  std::vector<block> blocks_;
};

#endif  // DEVICEKIT_HAS_CUDA

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/staging_ring.ipp>
#endif
