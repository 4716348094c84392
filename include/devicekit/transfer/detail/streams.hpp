#pragma once
/// \file
/// The streams and events of copies: the per-device, per-thread placement streams, events
/// recorded on a stream, "this stream waits for that one", host waits, and the ordering of calls
/// without a stream after the legacy default stream. No locks: placement streams are
/// thread_local, events belong to their caller.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/event.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/memory/cuda_resources.hpp>

#  include <map>
#  include <optional>

namespace devicekit::detail {

/// A stream per device and thread for placement without a caller's stream (destroyed at thread
/// exit, before the CUDA runtime's teardown).
[[nodiscard]] inline const stream& placement_stream(device dev) {
  thread_local std::map<int, stream> streams;
  auto it = streams.find(dev.ordinal());
  if (it == streams.end()) it = streams.emplace(dev.ordinal(), stream(dev)).first;
  return it->second;
}

/// Creates an event on the current device (core/event.hpp: host waits for it sleep), records it
/// on `s` (a stream of that device), and returns it (the caller owns it).
[[nodiscard]] inline cudaEvent_t record_event(cudaStream_t s) {
  const cudaEvent_t ev = create_event();
  const cudaError_t r = cudaEventRecord(ev, s);
  if (r != cudaSuccess) {
    (void)cudaEventDestroy(ev);
    DEVICEKIT_CUDA_CHECK(r);
  }
  return ev;
}

/// Makes `waiter` (a stream of any device) wait for the work queued so far on `source`, a stream
/// of the current device: an event recorded there, waited for, and destroyed once the wait is
/// queued (cudaStreamWaitEvent accepts an event of another device; cudaEventDestroy allows it).
inline void stream_waits_for(cudaStream_t waiter, cudaStream_t source) {
  const cudaEvent_t ev = record_event(source);
  const cudaError_t r = cudaStreamWaitEvent(waiter, ev, 0);
  (void)cudaEventDestroy(ev);
  DEVICEKIT_CUDA_CHECK(r);
}

/// Waits on the host for the work queued on `s` so far, blocking the thread instead of spinning
/// in cudaStreamSynchronize (cuda_events::wait_for, memory/cuda_resources.hpp).
inline void host_wait(stream_ref s) {
  scoped_device on(s.get_device().ordinal());
  DEVICEKIT_CUDA_CHECK(cuda_events::wait_for(s.native_handle()));
}

/// How a call that takes no stream is ordered (README, "Calls without a stream"). Such a call
/// queues its work on devicekit's own non-blocking stream (placement_stream), which CUDA orders
/// against nothing, so it is ordered as cudaMemcpy is, by hand: its stream first waits for the
/// work queued so far on the legacy default stream of each cuda device it touches. An event
/// recorded on the legacy default stream completes only after the work queued before it on every
/// blocking stream of that device too, the per-thread default streams included (CUDA runtime
/// API, "Stream synchronization behavior"), so a kernel of the caller's on any of those is seen.
/// Work on the caller's own non-blocking streams is not, as with cudaMemcpy: pass that stream.
/// The calls of this kind all finish before they return (or, for prefetch, make the legacy
/// default stream wait for their copies), so work queued after them is ordered after them too.
inline void order_after_default_stream(cudaStream_t s, device d) {
  if (!d.is_cuda()) return;
  // cudaStreamLegacy names the legacy default stream of the current device: hence the guard.
  scoped_device on(d.ordinal());
  stream_waits_for(s, cudaStreamLegacy);
}

/// The stream of a call without a stream that works on `dev` and reads memory of `from` too (the
/// source tree's device, if any): dev's placement stream, ordered after the legacy default
/// streams of both (order_after_default_stream).
[[nodiscard]] inline const stream& default_ordered_stream(device dev, std::optional<device> from = std::nullopt) {
  const stream& s = placement_stream(dev);
  order_after_default_stream(s.native_handle(), dev);
  if (from && *from != dev) order_after_default_stream(s.native_handle(), *from);
  return s;
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
