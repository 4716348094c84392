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
#  include <devicekit/memory/cuda_resources.hpp>

#  include <map>

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

DEVICEKIT_DECL void stream_waits_for(cudaStream_t waiter, cudaStream_t source) {
  const cudaEvent_t ev = record_event(source);
  const cudaError_t r = cudaStreamWaitEvent(waiter, ev, 0);
  (void)cudaEventDestroy(ev);
  DEVICEKIT_CUDA_CHECK(r);
}

DEVICEKIT_DECL void host_wait(stream_ref s) {
  scoped_device on(s.get_device().ordinal());
  // Refused here, before the runtime refuses it (cudaErrorStreamCaptureUnsupported) and
  // invalidates the whole capture.
  if (capture_of(s.native_handle()).active) {
    refuse_in_capture("wait for the stream", "the host would wait for work that has only been recorded",
                      "queue the work that needs the result on the stream instead, and wait after launching the graph");
  }
  DEVICEKIT_CUDA_CHECK(cuda_events::wait_for(s.native_handle()));
}

DEVICEKIT_DECL void order_after_default_stream(cudaStream_t s, device d) {
  if (!d.is_cuda()) return;
  // cudaStreamLegacy names the legacy default stream of the current device: hence the guard.
  scoped_device on(d.ordinal());
  stream_waits_for(s, cudaStreamLegacy);
}

DEVICEKIT_DECL const stream& default_ordered_stream(device dev, std::optional<device> from) {
  const stream& s = placement_stream(dev);
  order_after_default_stream(s.native_handle(), dev);
  if (from && *from != dev) order_after_default_stream(s.native_handle(), *from);
  return s;
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
