#pragma once
/// \file
/// What the copy engine moves: `copy_item` (a leaf's bytes and where they go), `copy_run`
/// (consecutive bytes, one or more items merged by `coalesce`), and the engine's counters
/// (`stats()`). No locks: the counters are relaxed atomics, the rest are values.
#include <devicekit/core/device.hpp>

#include <atomic>
#include <cstddef>
#include <span>
#include <vector>

namespace devicekit::detail {

struct copy_item {
  const std::byte* src = nullptr;
  device src_device;
  const void* src_owner = nullptr;  ///< identity of the allocation holding src; null: unknown
  std::byte* dst = nullptr;         ///< on the destination device
  std::size_t bytes = 0;
};

/// A copy of consecutive bytes: one or more items merged.
struct copy_run {
  const std::byte* src = nullptr;
  device src_device;
  std::byte* dst = nullptr;
  std::size_t bytes = 0;
};

/// Merges consecutive items that come from one allocation and keep their relative positions
/// (a placed tree copied elsewhere is one run). Gaps between them are copied along: they lie in
/// the same source allocation and, because the positions match, in the destination's.
[[nodiscard]] DEVICEKIT_DECL std::vector<copy_run> coalesce(std::span<const copy_item> items);

/// Counts what the engine did, per path, so that tests can check which paths a copy took.
struct copy_stats {
  std::atomic<std::size_t> host_copies{0};
  std::atomic<std::size_t> host_to_device_transfers{0};
  std::atomic<std::size_t> device_to_device_copies{0};
  std::atomic<std::size_t> batched_launches{0};
  std::atomic<std::size_t> peer_copies{0};
  std::atomic<std::size_t> staged_device_copies{0};
  std::atomic<std::size_t> device_to_host_transfers{0};
  std::atomic<std::size_t> batch_api_calls{0};   ///< cudaMemcpyBatchAsync calls (any direction)
  std::atomic<std::size_t> batch_api_copies{0};  ///< the copies those calls carried
  std::atomic<std::size_t> device_memsets{0};    ///< cudaMemsetAsync of padding (shard with uneven::pad)
};
inline copy_stats& stats() {
  static copy_stats s;
  return s;
}

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/runs.ipp>
#endif
