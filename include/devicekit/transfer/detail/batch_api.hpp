#pragma once
/// \file
/// The cudaMemcpyBatchAsync wrapper: whether the call may be used on a stream, one call for a
/// list of runs, and the fallback to one cudaMemcpyAsync per run. No locks: "refused once" is a
/// relaxed atomic flag, the driver check a function-local static.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/error.hpp>
#  include <devicekit/transfer/detail/planner.hpp>
#  include <devicekit/transfer/detail/runs.hpp>

#  include <atomic>
#  include <cstddef>
#  include <cstdint>
#  include <span>
#  include <string>
#  include <vector>

namespace devicekit::detail {

/// Whether cudaMemcpyBatchAsync may be used on `s`. It exists from CUDA runtime 12.8 on (the
/// headers this is compiled with); the driver must be as new (a newer runtime on an older driver
/// fails the call, "CUDA Compatibility"); the legacy NULL stream is refused by the call itself
/// ("Must not be legacy NULL stream"). Once a call is refused as not supported, no more are made.
inline std::atomic<bool> batch_api_refused{false};

[[nodiscard]] inline bool batch_api_available([[maybe_unused]] cudaStream_t s) noexcept {
#  if CUDART_VERSION >= 12080
  if (s == nullptr || s == cudaStreamLegacy || batch_api_refused.load(std::memory_order_relaxed)) return false;
  static const bool driver_ok = [] {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return v >= 12080;
  }();
  return driver_ok;
#  else
  return false;
#  endif
}

/// Queues `runs` on `s` as one cudaMemcpyBatchAsync. The sources are device memory or pinned
/// staging written in stream order before, so they are read in stream order
/// (cudaMemcpySrcAccessOrderStream); one attribute entry covers every copy (attrsIdxs {0}).
/// Returns false, having queued nothing, when the runtime or driver does not support the call
/// (remembered: later calls go straight to single copies); throws cuda_error for other failures,
/// naming the copy that failed where the runtime says (failIdx, CUDA 12.8 and 12.9).
[[nodiscard]] inline bool copy_runs_batch_api([[maybe_unused]] std::span<const copy_run> runs,
                                              [[maybe_unused]] cudaStream_t s) {
#  if CUDART_VERSION >= 12080
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<std::size_t> sizes;
  dsts.reserve(runs.size());
  srcs.reserve(runs.size());
  sizes.reserve(runs.size());
  for (const auto& r : runs) {
    if (r.bytes == 0) continue;
    dsts.push_back(r.dst);
    srcs.push_back(r.src);
    sizes.push_back(r.bytes);
  }
  if (sizes.empty()) return true;
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagDefault;
  std::size_t attr_index = 0;
#    if CUDART_VERSION >= 13000
  const cudaError_t r =
      cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &attr_index, 1, s);
  const std::size_t fail_index = SIZE_MAX;
#    else
  std::size_t fail_index = SIZE_MAX;
  const cudaError_t r =
      cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &attr_index, 1, &fail_index, s);
#    endif
  if (r == cudaErrorNotSupported || r == cudaErrorCallRequiresNewerDriver) {
    (void)cudaGetLastError();
    batch_api_refused.store(true, std::memory_order_relaxed);
    return false;
  }
  if (r != cudaSuccess && fail_index < sizes.size()) {
    check_cuda(r, "cudaMemcpyBatchAsync (copy " + std::to_string(fail_index) + " of " + std::to_string(sizes.size()) +
                      ", " + std::to_string(sizes[fail_index]) + " bytes)");
  }
  check_cuda(r, "cudaMemcpyBatchAsync(" + std::to_string(sizes.size()) + " copies)");
  stats().batch_api_calls.fetch_add(1, std::memory_order_relaxed);
  stats().batch_api_copies.fetch_add(sizes.size(), std::memory_order_relaxed);
  return true;
#  else
  return false;
#  endif
}

/// `runs` on `s` by cudaMemcpyBatchAsync where the planner's count allows and the call is
/// available, else one cudaMemcpyAsync each (`kind` as for cudaMemcpyAsync). For the pieces of
/// a staged transfer, whose host end is pinned staging.
inline void copy_runs_batch_or_single(std::span<const copy_run> runs, cudaMemcpyKind kind, cudaStream_t s) {
  if (runs.size() >= batch_api_min_count && batch_api_available(s) && copy_runs_batch_api(runs, s)) return;
  for (const auto& r : runs) DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(r.dst, r.src, r.bytes, kind, s));
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
