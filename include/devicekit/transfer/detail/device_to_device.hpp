#pragma once
/// \file
/// Device -> device copies: on one device (one CUB launch, one cudaMemcpyBatchAsync, or one
/// cudaMemcpyAsync per run, as the planner says) and between devices (peer copies where the pair
/// has peer access, else through pinned staging in chunks, the destination stream waiting for
/// each chunk on an event). No locks here: peer access is enabled once per pair under
/// core/device_ops.hpp's lock; the staging pool locks itself.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/device.hpp>
#  include <devicekit/transfer/detail/planner.hpp>
#  include <devicekit/transfer/detail/runs.hpp>

#  include <span>

namespace devicekit::detail {

/// Whether `dst` can read `src`'s memory directly; enables it the first time (per process),
/// through enable_peer_access's implementation (core/device_ops.hpp), which also grants access
/// to devicekit's driver pools on `src`. False when the pair has no peer support or enabling
/// failed: the caller stages through host memory instead of failing the copy.
[[nodiscard]] DEVICEKIT_DECL bool ensure_peer_access(int dst, int src);

/// What a copy of runs on `s` may use (the planner's input).
[[nodiscard]] DEVICEKIT_DECL copy_paths_available paths_available(cudaStream_t s, bool peer_access = true,
                                                                  bool host_pinned = false) noexcept;

/// Runs whose two ends are on the stream's device, on stream `s`: the planner's choice among one
/// CUB launch, one cudaMemcpyBatchAsync and one cudaMemcpyAsync per run.
DEVICEKIT_DECL void copy_same_device(std::span<const copy_run> runs, cudaStream_t s);

/// Runs on another device `from` -> the block on `to`, on stream `s` (of `to`).
DEVICEKIT_DECL void copy_other_device(std::span<const copy_run> runs, device from, device to, cudaStream_t s);

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/device_to_device.ipp>
#endif
