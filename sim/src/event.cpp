// Events: create, record, query, synchronize, destroy, and cudaStreamWaitEvent.
// Locking: each call holds the state's mutex (SIM_ENTER). A record and a wait also give the race
// detector its order.
#include "capture.hpp"
#include "entry.hpp"
#include "race_detector.hpp"
#include "scheduler.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

using namespace devicekit::cuda_sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  SIM_ENTER("cudaEventCreateWithFlags");
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  // The flags cudaEventCreateWithFlags documents; cudaEventInterprocess "must be specified
  // along with cudaEventDisableTiming".
  constexpr unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~known) != 0 || ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0)) {
    return fail(cudaErrorInvalidValue);
  }
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  bind_current(g);
  auto* ev = new event_obj;
  ev->device = tl_device;  // an event belongs to the device current at its creation
  ev->flags = flags;
  g.events.insert(ev);
  *event = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

namespace {
event_obj* resolve_event(state& g, cudaEvent_t h, const char* api) {
  auto* ev = reinterpret_cast<event_obj*>(h);
  if (g.events.count(ev) == 0) {
    violation(g, api, "an event handle that no cudaEventCreate returned");
    return nullptr;
  }
  if (ev->destroyed) {
    violation(g, api, "an event used after cudaEventDestroy");
    return nullptr;
  }
  return ev;
}

/// "It is invalid to synchronize or query the execution status of ... a captured event"
/// (Prohibited and Unhandled Operations): cudaErrorCapturedEvent ("not permitted on an event
/// which was last recorded in a capturing stream"), invalidating its capture.
cudaError_t captured_event_use(state& g, event_obj* ev) {
  capture_seq* c = active_capture(g, ev->capture_id);
  if (c == nullptr) return cudaSuccess;
  invalidate(c);
  return cudaErrorCapturedEvent;
}

/// cudaStreamWaitEvent where the event is captured or the stream captures ("Cross-stream
/// Dependencies and Events").
cudaError_t capture_wait_event(state& g, stream_obj* s, event_obj* ev, unsigned flags) {
  capture_seq* c = active_capture(g, ev->capture_id);
  if (c != nullptr) {
    if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
    if (s->capture == nullptr) {
      // A fork: "waiting on a captured event from a non-captured stream" joins that stream to
      // the sequence, after the event's nodes. The legacy stream cannot capture.
      if (s->type == stream_obj::kind::legacy) {
        invalidate(c);
        return cudaErrorStreamCaptureUnsupported;
      }
      s->capture = c;
      c->streams.insert(s);
      s->capture_deps = ev->capture_nodes;
      return cudaSuccess;
    }
    if (s->capture != c) {
      // "It is invalid to merge two separate capture graphs": cudaErrorStreamCaptureMerge ("a
      // merge of two independent capture sequences").
      invalidate(c);
      invalidate(s->capture);
      return cudaErrorStreamCaptureMerge;
    }
    for (std::size_t n : ev->capture_nodes) {
      if (std::find(s->capture_deps.begin(), s->capture_deps.end(), n) == s->capture_deps.end())
        s->capture_deps.push_back(n);
    }
    return cudaSuccess;
  }
  // A capturing stream waits for an event recorded outside any capture: only with
  // cudaEventWaitExternal ("It is invalid to wait on a non-captured event from a stream which
  // is being captured without specifying the cudaEventWaitExternal flag"); the node then waits
  // at each launch for the event's record current at that launch. Without the flag:
  // cudaErrorStreamCaptureIsolation ("a dependency ... which crosses the capture sequence
  // boundary").
  if ((flags & cudaEventWaitExternal) != 0) {
    record_node(g, s, nullptr, "cudaStreamWaitEvent", {}, ev);
    return cudaSuccess;
  }
  invalidate(s->capture);
  return cudaErrorStreamCaptureIsolation;
}
}  // namespace

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIM_ENTER("cudaEventRecord");
  event_obj* ev = resolve_event(g, event, "cudaEventRecord");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaEventRecord", err);
  if (s == nullptr) return fail(err);
  // "event and stream must be on the same device" (cudaEventRecord): the driver refuses others.
  if (s->device != ev->device) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t c = capture_use(g, s); c != cudaSuccess) return fail(c);
  if (s->capture != nullptr) {
    // A captured event: it stands for the stream's current nodes, for a cudaStreamWaitEvent of
    // the same sequence to depend on ("Cross-stream Dependencies and Events"). It has no record
    // to complete; once the capture has ended it reads as never recorded.
    ev->capture_id = s->capture->id;
    ev->capture_nodes = s->capture_deps;
    ev->stream = nullptr;
    ev->target = 0;
    return cudaSuccess;
  }
  ev->capture_id = 0;
  ev->capture_nodes.clear();
  ev->stream = s;
  ev->target = enqueue(g, s, nullptr, {}, "cudaEventRecord");
  ev->clock = s->clock;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  SIM_ENTER("cudaEventQuery");
  event_obj* ev = resolve_event(g, event, "cudaEventQuery");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t c = captured_event_use(g, ev); c != cudaSuccess) return fail(c);
  if (ev->stream == nullptr) return cudaSuccess;  // never recorded: complete
  if (ev->stream->completed < ev->target) return cudaErrorNotReady;
  host_joins(g, ev->clock);  // the work the record captured is done
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  SIM_ENTER("cudaEventSynchronize");
  event_obj* ev = resolve_event(g, event, "cudaEventSynchronize");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t c = captured_event_use(g, ev); c != cudaSuccess) return fail(c);
  // "cudaEventBlockingSync: Specifies that event should use blocking synchronization. A host
  // thread that uses cudaEventSynchronize() to wait on an event created with this flag will
  // block until the event actually completes" (cudaEventCreateWithFlags); without it the wait
  // follows the device's scheduling flags: a spin under the default cudaDeviceScheduleAuto.
  if ((ev->flags & cudaEventBlockingSync) == 0) ++g.spinning_host_waits;
  if (ev->stream != nullptr) {
    host_joins(g, ev->clock);
    wait_until(g, e_.lk, ev->stream, ev->target);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  SIM_ENTER("cudaEventDestroy");
  event_obj* ev = resolve_event(g, event, "cudaEventDestroy");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  ev->destroyed = true;  // kept, so that its handle never names another event
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  SIM_ENTER("cudaStreamWaitEvent");
  if (flags != 0 && flags != cudaEventWaitExternal) return fail(cudaErrorInvalidValue);
  event_obj* ev = resolve_event(g, event, "cudaStreamWaitEvent");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaStreamWaitEvent", err);
  if (s == nullptr) return fail(err);
  if (cudaError_t c = capture_use(g, s); c != cudaSuccess) return fail(c);
  if (s->capture != nullptr || active_capture(g, ev->capture_id) != nullptr) {
    return fail(capture_wait_event(g, s, ev, flags));
  }
  // "The stream stream will wait only for the completion of the most recent host call to
  // cudaEventRecord() on event"; the event may belong to another device.
  std::vector<std::pair<stream_obj*, std::uint64_t>> deps;
  if (ev->stream != nullptr) deps.emplace_back(ev->stream, ev->target);
  enqueue(g, s, nullptr, std::move(deps), "cudaStreamWaitEvent", {}, ev->stream != nullptr ? &ev->clock : nullptr);
  return cudaSuccess;
}

}  // extern "C"
