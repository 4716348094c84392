#pragma once
/// \file
/// The definitions behind transfer/detail/streams.hpp: placement streams, events and the ordering
/// after the legacy default stream.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/streams.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/capture.hpp>
#  include <devicekit/core/detail/event.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/runtime.hpp>
#  include <devicekit/memory/cuda_resources.hpp>

#  include <array>
#  include <map>
#  include <mutex>
#  include <new>
#  include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL const stream& placement_stream(device dev) {
  thread_local std::map<int, stream> streams;
  auto it = streams.find(dev.ordinal());
  if (it == streams.end()) it = streams.emplace(dev.ordinal(), stream(dev)).first;
  return it->second;
}

DEVICEKIT_DECL cudaEvent_t record_event(cudaStream_t s) {
  const cudaEvent_t ev = create_event();
  const cudaError_t r = cudaEventRecord(ev, s);
  if (r != cudaSuccess) {
    (void)cudaEventDestroy(ev);
    DEVICEKIT_CUDA_CHECK(r);
  }
  return ev;
}

/// The events of record_reused_event, by device ordinal, under one lock: a block's event may be
/// given back by any thread. Made once and never destroyed: placed trees may be dropped by static
/// objects' destructors after any of this library's own (the CUDA runtime's teardown reclaims the
/// events then).
struct reused_events {
  std::mutex mutex;
  std::vector<std::vector<cudaEvent_t>> by_device;
};
DEVICEKIT_DECL reused_events& reused_events_of_process() {
  static reused_events* const events = new reused_events;
  return *events;
}

DEVICEKIT_DECL cudaEvent_t record_reused_event(cudaStream_t s, int ordinal) {
  reused_events& kept = reused_events_of_process();
  const auto at = static_cast<std::size_t>(ordinal);
  cudaEvent_t ev = nullptr;
  {
    const std::lock_guard lock(kept.mutex);
    if (at < kept.by_device.size() && !kept.by_device[at].empty()) {
      ev = kept.by_device[at].back();
      kept.by_device[at].pop_back();
    }
  }
  if (ev == nullptr) {
    scoped_device on(ordinal);  // an event belongs to the device current at its creation
    ev = create_event();
    note_cuda_runtime_used();
  }
  const cudaError_t r = cudaEventRecord(ev, s);
  if (r != cudaSuccess) {
    (void)cudaEventDestroy(ev);
    DEVICEKIT_CUDA_CHECK(r);
  }
  return ev;
}

DEVICEKIT_DECL void give_back_reused_event(int ordinal, cudaEvent_t ev) noexcept {
  if (ev == nullptr || !cuda_calls_allowed()) return;
  reused_events& kept = reused_events_of_process();
  const auto at = static_cast<std::size_t>(ordinal);
  try {
    const std::lock_guard lock(kept.mutex);
    if (kept.by_device.size() <= at) kept.by_device.resize(at + 1);
    if (kept.by_device[at].size() < reused_events_kept) {
      kept.by_device[at].push_back(ev);
      return;
    }
  } catch (const std::bad_alloc&) {
    // No room to keep it: it is destroyed instead.
  }
  (void)cudaEventDestroy(ev);
}

/// This thread's kept events (thread_event), by device ordinal.
struct thread_events {
  std::vector<std::array<cudaEvent_t, thread_event_slots>> by_device;
  thread_events() = default;
  thread_events(const thread_events&) = delete;
  thread_events& operator=(const thread_events&) = delete;
  ~thread_events() {
    // After the runtime's teardown the driver has reclaimed them; calling it would crash.
    if (!cuda_calls_allowed()) return;
    for (const auto& slots : by_device) {
      for (const cudaEvent_t ev : slots) {
        if (ev != nullptr) (void)cudaEventDestroy(ev);
      }
    }
  }
};

DEVICEKIT_DECL cudaEvent_t thread_event(int ordinal, unsigned slot) {
  thread_local thread_events events;
  const auto at = static_cast<std::size_t>(ordinal);
  if (events.by_device.size() <= at) events.by_device.resize(at + 1, {});
  cudaEvent_t& ev = events.by_device[at][slot];
  if (ev == nullptr) {
    scoped_device on(ordinal);  // an event belongs to the device current at its creation
    ev = create_event();
    note_cuda_runtime_used();
  }
  return ev;
}

DEVICEKIT_DECL void stream_waits_for(cudaStream_t waiter, cudaStream_t source) {
  int dev = 0;
  DEVICEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  const cudaEvent_t ev = thread_event(dev);
  DEVICEKIT_CUDA_CHECK(cudaEventRecord(ev, source));
  DEVICEKIT_CUDA_CHECK(cudaStreamWaitEvent(waiter, ev, 0));
}

DEVICEKIT_DECL void host_wait(stream_ref s) {
  // Refused here, before the runtime refuses it (cudaErrorStreamCaptureUnsupported) and
  // invalidates the whole capture.
  if (capture_of(s).active) {
    refuse_in_capture("wait for the stream", "the host would wait for work that has only been recorded",
                      "queue the work that needs the result on the stream instead, and wait after launching the graph");
  }
  host_wait_uncaptured(s);
}

DEVICEKIT_DECL void host_wait_uncaptured(stream_ref s) {
  // An event is recorded on a stream of its own context, whichever device is current (CUDA
  // runtime API, cudaEventRecord); only a default-stream handle names a stream by the current
  // device.
  std::optional<scoped_device> on;
  if (is_default_stream(s.native_handle())) on.emplace(s.get_device().ordinal());
  const cudaEvent_t ev = thread_event(s.get_device().ordinal());
  DEVICEKIT_CUDA_CHECK(cudaEventRecord(ev, s.native_handle()));
  DEVICEKIT_CUDA_CHECK(cudaEventSynchronize(ev));
}

DEVICEKIT_DECL void order_after_default_stream(cudaStream_t s, device d) {
  if (!d.is_cuda()) return;
  // cudaStreamLegacy names the legacy default stream of the current device: hence the guard.
  scoped_device on(d.ordinal());
  const cudaEvent_t ev = thread_event(d.ordinal());
  DEVICEKIT_CUDA_CHECK(cudaEventRecord(ev, cudaStreamLegacy));
  DEVICEKIT_CUDA_CHECK(cudaStreamWaitEvent(s, ev, 0));
}

DEVICEKIT_DECL const stream& default_ordered_stream(device dev, std::optional<device> from) {
  const stream& s = placement_stream(dev);
  order_after_default_stream(s.native_handle(), dev);
  if (from && *from != dev) order_after_default_stream(s.native_handle(), *from);
  return s;
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
