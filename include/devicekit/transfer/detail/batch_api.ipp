#pragma once
/// \file
/// The definitions behind transfer/detail/batch_api.hpp: the cudaMemcpyBatchAsync call and its fallback.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/batch_api.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/capture.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/transfer/detail/planner.hpp>

#  include <cstddef>
#  include <cstdint>
#  include <string>
#  include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL bool batch_api_available([[maybe_unused]] cudaStream_t s) noexcept {
#  if CUDART_VERSION >= 12080
  if (s == nullptr || s == cudaStreamLegacy || batch_api_refused.load(std::memory_order_relaxed)) return false;
  // The runtime refuses cudaMemcpyBatchAsync on a capturing stream (cudaErrorStreamCaptureUnsupported)
  // and the refusal invalidates the whole capture: the planner must never pick it there.
  if (capture_of(s).active) return false;
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

DEVICEKIT_DECL bool copy_runs_batch_api([[maybe_unused]] std::span<const copy_run> runs,
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

DEVICEKIT_DECL void copy_runs_batch_or_single(std::span<const copy_run> runs, cudaMemcpyKind kind, cudaStream_t s) {
  if (runs.size() >= batch_api_min_count && batch_api_available(s) && copy_runs_batch_api(runs, s)) return;
  for (const auto& r : runs) DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(r.dst, r.src, r.bytes, kind, s));
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
