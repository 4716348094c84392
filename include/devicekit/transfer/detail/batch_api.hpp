#pragma once
/// \file
/// The cudaMemcpyBatchAsync wrapper: whether the call may be used on a stream, one call for a
/// list of runs, and the fallback to one cudaMemcpyAsync per run. No locks: "refused once" is a
/// relaxed atomic flag, the driver check a function-local static.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/transfer/detail/runs.hpp>

#  include <atomic>
#  include <span>

namespace devicekit::detail {

/// Whether cudaMemcpyBatchAsync may be used on `s`. It exists from CUDA runtime 12.8 on (the
/// headers this is compiled with); the driver must be as new (a newer runtime on an older driver
/// fails the call, "CUDA Compatibility"); the legacy NULL stream is refused by the call itself
/// ("Must not be legacy NULL stream"). Once a call is refused as not supported, no more are made.
inline std::atomic<bool> batch_api_refused{false};

[[nodiscard]] DEVICEKIT_DECL bool batch_api_available(cudaStream_t s) noexcept;

/// Queues `runs` on `s` as one cudaMemcpyBatchAsync. The sources are device memory or pinned
/// staging written in stream order before, so they are read in stream order
/// (cudaMemcpySrcAccessOrderStream); one attribute entry covers every copy (attrsIdxs {0}).
/// Returns false, having queued nothing, when the runtime or driver does not support the call
/// (remembered: later calls go straight to single copies); throws cuda_error for other failures,
/// naming the copy that failed where the runtime says (failIdx, CUDA 12.8 and 12.9).
[[nodiscard]] DEVICEKIT_DECL bool copy_runs_batch_api(std::span<const copy_run> runs, cudaStream_t s);

/// `runs` on `s` by cudaMemcpyBatchAsync where the planner's count allows and the call is
/// available, else one cudaMemcpyAsync each (`kind` as for cudaMemcpyAsync). For the pieces of
/// a staged transfer, whose host end is pinned staging.
DEVICEKIT_DECL void copy_runs_batch_or_single(std::span<const copy_run> runs, cudaMemcpyKind kind, cudaStream_t s);

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/batch_api.ipp>
#endif
