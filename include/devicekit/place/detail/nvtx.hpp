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
//
// Only nvtx.ipp includes NVTX's header, behind the out-of-line push and pop below. Header-only,
// that is every translation unit that includes placement, as before. Under
// DEVICEKIT_SEPARATE_COMPILATION the header stays out of the program's translation units
// altogether, and whether the ranges reach NVTX is decided when the library is compiled: by
// DEVICEKIT_DISABLE_NVTX as defined for src/devicekit.cpp (the devicekit::compiled target);
// DEVICEKIT_HAS_NVTX in other translation units then says only what they would have chosen.
#if DEVICEKIT_HAS_CUDA && !defined(DEVICEKIT_DISABLE_NVTX) && __has_include(<nvtx3/nvToolsExt.h>)
#  define DEVICEKIT_HAS_NVTX 1
#else
#  define DEVICEKIT_HAS_NVTX 0
#endif

namespace devicekit::detail {

using range_observer_fn = void (*)(std::string_view name);
inline std::atomic<range_observer_fn> range_observer{nullptr};

/// Opens a range named `name` in the "devicekit" domain (created on first use); nothing without
/// NVTX.
DEVICEKIT_DECL void nvtx_range_push(const char* name) noexcept;

/// Closes the innermost range nvtx_range_push opened on this thread; nothing without NVTX.
DEVICEKIT_DECL void nvtx_range_pop() noexcept;

/// Opens a range for its lifetime. `name` must be a string literal (it is not copied).
class scoped_range {
 public:
  explicit scoped_range(const char* name) noexcept {
    if (auto obs = range_observer.load(std::memory_order_relaxed)) obs(name);
    nvtx_range_push(name);
  }
  scoped_range(const scoped_range&) = delete;
  scoped_range& operator=(const scoped_range&) = delete;
  ~scoped_range() { nvtx_range_pop(); }
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/detail/nvtx.ipp>
#endif
