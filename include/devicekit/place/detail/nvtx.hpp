#pragma once
/// \file
/// NVTX ranges around placement, so Nsight Systems shows "devicekit.place", "devicekit.shard",
/// "devicekit.replicate", "devicekit.prefetch" (NVTX 3 is header-only and ships with the CUDA
/// toolkit; without CUDA the ranges are only reported to the observer below). Ranges go to the
/// "devicekit" domain.
///
/// `range_observer`, when set, is told the name of every range opened: tests use it to check that
/// an operation is instrumented.
#include <devicekit/core/config.hpp>

#include <atomic>
#include <string_view>

// NVTX 3's implementation is in its header, and it is the largest single part of what placement
// costs to compile (about 0.4 s of every translation unit that includes placement; see
// scripts/compile-times). Like CCCL's CCCL_DISABLE_NVTX, DEVICEKIT_DISABLE_NVTX (defined the same
// in every translation unit of a program) leaves it out; the ranges then reach only the observer.
#if DEVICEKIT_HAS_CUDA && !defined(DEVICEKIT_DISABLE_NVTX) && __has_include(<nvtx3/nvToolsExt.h>)
#  include <nvtx3/nvToolsExt.h>
#  define DEVICEKIT_HAS_NVTX 1
#else
#  define DEVICEKIT_HAS_NVTX 0
#endif

namespace devicekit::detail {

using range_observer_fn = void (*)(std::string_view name);
inline std::atomic<range_observer_fn> range_observer{nullptr};

#if DEVICEKIT_HAS_NVTX
[[nodiscard]] inline nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("devicekit");
  return domain;
}
#endif

/// Opens a range for its lifetime. `name` must be a string literal (it is not copied).
class scoped_range {
 public:
  explicit scoped_range(const char* name) noexcept {
    if (auto obs = range_observer.load(std::memory_order_relaxed)) obs(name);
#if DEVICEKIT_HAS_NVTX
    nvtxEventAttributes_t attr{};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = name;
    nvtxDomainRangePushEx(nvtx_domain(), &attr);
#endif
  }
  scoped_range(const scoped_range&) = delete;
  scoped_range& operator=(const scoped_range&) = delete;
  ~scoped_range() {
#if DEVICEKIT_HAS_NVTX
    nvtxDomainRangePop(nvtx_domain());
#endif
  }
};

}  // namespace devicekit::detail
