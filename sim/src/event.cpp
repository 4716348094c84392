// Events: create, record, query, synchronize, destroy, and cudaStreamWaitEvent.
// Locking: each call holds the state's mutex (SIM_ENTER). A record and a wait also give the race
// detector its order.
#include "entry.hpp"
#include "race_detector.hpp"
#include "scheduler.hpp"

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
  ev->stream = s;
  ev->target = enqueue(g, s, nullptr, {}, "cudaEventRecord");
  ev->clock = s->clock;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  SIM_ENTER("cudaEventQuery");
  event_obj* ev = resolve_event(g, event, "cudaEventQuery");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (ev->stream == nullptr) return cudaSuccess;  // never recorded: complete
  if (ev->stream->completed < ev->target) return cudaErrorNotReady;
  host_joins(g, ev->clock);  // the work the record captured is done
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  SIM_ENTER("cudaEventSynchronize");
  event_obj* ev = resolve_event(g, event, "cudaEventSynchronize");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
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
  // "The stream stream will wait only for the completion of the most recent host call to
  // cudaEventRecord() on event"; the event may belong to another device.
  std::vector<std::pair<stream_obj*, std::uint64_t>> deps;
  if (ev->stream != nullptr) deps.emplace_back(ev->stream, ev->target);
  enqueue(g, s, nullptr, std::move(deps), "cudaStreamWaitEvent", {}, ev->stream != nullptr ? &ev->clock : nullptr);
  return cudaSuccess;
}

}  // extern "C"
