#pragma once
/// \file
/// The streams and events of copies: the per-device, per-thread placement streams, events
/// recorded on a stream, "this stream waits for that one", host waits, and the ordering of calls
/// without a stream after the legacy default stream. No locks: placement streams and the events
/// kept for waits (thread_event) are thread_local, other events belong to their caller.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/stream.hpp>

#  include <cstddef>
#  include <optional>

namespace devicekit::detail {

/// A stream per device and thread for placement without a caller's stream (destroyed at thread
/// exit, before the CUDA runtime's teardown).
[[nodiscard]] DEVICEKIT_DECL const stream& placement_stream(device dev);

/// Creates an event on the current device (core/detail/event.hpp: host waits for it sleep), records it
/// on `s` (a stream of that device), and returns it (the caller owns it).
[[nodiscard]] DEVICEKIT_DECL cudaEvent_t record_event(cudaStream_t s);

/// An event of device `ordinal` recorded on `s` (a stream of that device) for one wait or query,
/// taken from a process-wide list of such events per device and given back with
/// give_back_reused_event once nothing waits on it any more: a placed block's event (its copy has
/// run) is then neither created nor destroyed per placement in steady state. cudaEventCreate and
/// cudaEventDestroy cost more than a record (CUDA C++ Best Practices Guide: create events once and
/// reuse them), and a later record does not change what an earlier wait waited for (CUDA runtime
/// API, cudaEventRecord). The current device need not be `ordinal`: an event and the stream it is
/// recorded on need only share a context (cudaEventRecord); a new event is created on `ordinal`.
[[nodiscard]] DEVICEKIT_DECL cudaEvent_t record_reused_event(cudaStream_t s, int ordinal);
/// Gives back an event from record_reused_event whose record has completed (queried or waited
/// for): kept for the next record (up to reused_events_kept per device; past that, destroyed).
/// After the CUDA runtime's teardown has begun (core/runtime.hpp) it is left to the process's exit.
inline constexpr std::size_t reused_events_kept = 64;
DEVICEKIT_DECL void give_back_reused_event(int ordinal, cudaEvent_t ev) noexcept;

/// Events kept per thread and device (slots 0 to thread_event_slots - 1), so that a wait does not
/// create and destroy an event each time (CUDA C++ Best Practices Guide: create events once and
/// reuse them). An event may be recorded again as soon as the waits on its last record have been
/// queued (cudaStreamWaitEvent) or have returned (cudaEventSynchronize): later records do not
/// change what an earlier wait waits for (CUDA runtime API, cudaEventRecord). Slot 0 is for a
/// record followed at once by its wait (host_wait_uncaptured, stream_waits_for); the others for a
/// transfer's own pipeline (device -> host staging). Created on first use on `ordinal` with
/// event_flags (core/detail/event.hpp: host waits sleep); destroyed at thread exit unless the CUDA
/// runtime has shut down (core/runtime.hpp).
inline constexpr unsigned thread_event_slots = 3;
[[nodiscard]] DEVICEKIT_DECL cudaEvent_t thread_event(int ordinal, unsigned slot = 0);

/// Makes `waiter` (a stream of any device) wait for the work queued so far on `source`, a stream
/// of the current device: this thread's event of that device recorded there and waited for
/// (cudaStreamWaitEvent accepts an event of another device).
DEVICEKIT_DECL void stream_waits_for(cudaStream_t waiter, cudaStream_t source);

/// Waits on the host for the work queued on `s` so far, blocking the thread instead of spinning
/// in cudaStreamSynchronize (cuda_events::wait_for, memory/cuda_resources.hpp).
/// Refuses a capturing stream (capture_error) before the runtime would refuse the wait and
/// invalidate the capture.
DEVICEKIT_DECL void host_wait(stream_ref s);
/// host_wait for a stream known not to be capturing (devicekit's own placement streams, or a
/// stream the caller has asked about already): this thread's event of the stream's device,
/// recorded and waited for (cudaEventSynchronize on a cudaEventBlockingSync event blocks the
/// thread; cudaStreamSynchronize spins under the default cudaDeviceScheduleAuto: CUDA runtime
/// API, cudaEventSynchronize and cudaSetDeviceFlags).
DEVICEKIT_DECL void host_wait_uncaptured(stream_ref s);

/// How a call that takes no stream is ordered (docs/placement.md, "Calls without a stream"). Such a call
/// queues its work on devicekit's own non-blocking stream (placement_stream), which CUDA orders
/// against nothing, so it is ordered as cudaMemcpy is, by hand: its stream first waits for the
/// work queued so far on the legacy default stream of each cuda device it touches. An event
/// recorded on the legacy default stream completes only after the work queued before it on every
/// blocking stream of that device too, the per-thread default streams included (CUDA runtime
/// API, "Stream synchronization behavior"), so a kernel of the caller's on any of those is seen.
/// Work on the caller's own non-blocking streams is not, as with cudaMemcpy: pass that stream.
/// The calls of this kind all finish before they return (or, for prefetch, make the legacy
/// default stream wait for their copies), so work queued after them is ordered after them too.
DEVICEKIT_DECL void order_after_default_stream(cudaStream_t s, device d);

/// The stream of a call without a stream that works on `dev` and reads memory of `from` too (the
/// source tree's device, if any): dev's placement stream, ordered after the legacy default
/// streams of both (order_after_default_stream).
[[nodiscard]] DEVICEKIT_DECL const stream& default_ordered_stream(device dev,
                                                                  std::optional<device> from = std::nullopt);

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/streams.ipp>
#endif
