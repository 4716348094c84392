#pragma once
/// \file
/// Creating the CUDA events devicekit waits on, with one choice of flags; no locks (an event
/// belongs to whoever created it).
///
/// cudaEventDisableTiming | cudaEventBlockingSync: a host thread that waits for such an event
/// sleeps instead of spinning a core, which under cudaDeviceScheduleAuto it otherwise does
/// whenever the process has fewer active contexts than cores (CUDA runtime API,
/// cudaEventCreateWithFlags and cudaSetDeviceFlags). It costs nothing to events only queried or
/// waited for by streams, and timing is never read. The copy engine's events, the memory pools'
/// stream events and host waits for a stream all come from here.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/error.hpp>

#  include <source_location>

namespace devicekit::detail {

/// The flags of every event devicekit creates (see the file comment).
inline constexpr unsigned int event_flags = cudaEventDisableTiming | cudaEventBlockingSync;

/// Creates an event on the current device into `ev`; returns the runtime's result, for callers
/// that must not throw.
[[nodiscard]] inline cudaError_t try_create_event(cudaEvent_t& ev) noexcept {
  return cudaEventCreateWithFlags(&ev, event_flags);
}

/// Creates an event on the current device (the caller owns it); throws cuda_error naming the
/// caller's line when the runtime refuses.
[[nodiscard]] inline cudaEvent_t create_event(std::source_location where = std::source_location::current()) {
  cudaEvent_t ev = nullptr;
  check_cuda(try_create_event(ev), "cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync)",
             where);
  return ev;
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
