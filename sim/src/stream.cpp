// Streams: create, destroy, synchronize, query, cudaStreamGetDevice, cudaLaunchHostFunc.
// Locking: each call holds the state's mutex (SIM_ENTER); the scheduler runs the queued work.
#include "capture.hpp"
#include "entry.hpp"
#include "race_detector.hpp"
#include "scheduler.hpp"

using namespace devicekit::cuda_sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  SIM_ENTER("cudaStreamCreateWithFlags");
  if (pStream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  bind_current(g);
  *pStream = reinterpret_cast<cudaStream_t>(make_stream(g, tl_device, flags, stream_obj::kind::created));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int /*priority*/) {
  return cudaStreamCreateWithFlags(pStream, flags);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  SIM_ENTER("cudaStreamDestroy");
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaStreamDestroy", err);
  if (s == nullptr) return fail(err);
  // "In case the device is still doing work in the stream when cudaStreamDestroy() is called,
  // the function will return immediately and the resources associated with stream will be
  // released automatically once the device has completed all work in stream."
  s->destroyed = true;
  g.cv.notify_all();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  SIM_ENTER_STREAM("cudaStreamSynchronize", stream);
  if (cudaError_t c = capture_wait(g, s); c != cudaSuccess) return fail(c);
  ++g.spinning_host_waits;  // spins under cudaDeviceScheduleAuto (see spinning_host_waits())
  host_joins_stream(g, s);
  wait_until(g, e_.lk, s, s->submitted);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  SIM_ENTER_STREAM("cudaStreamQuery", stream);
  if (cudaError_t c = capture_wait(g, s); c != cudaSuccess) return fail(c);
  // cudaErrorNotReady is a status, not an error: it does not become the last error.
  if (s->completed < s->submitted) return cudaErrorNotReady;
  host_joins_stream(g, s);  // "cudaSuccess if all operations in stream have completed"
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t stream, int* device) {
  SIM_ENTER("cudaStreamGetDevice");
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaStreamGetDevice", err);
  if (s == nullptr) return fail(err);
  *device = s->device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  SIM_ENTER("cudaLaunchHostFunc");
  if (fn == nullptr) return fail(cudaErrorInvalidValue);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaLaunchHostFunc", err);
  if (s == nullptr) return fail(err);
  if (cudaError_t c = capture_use(g, s); c != cudaSuccess) return fail(c);
  enqueue(
      g, s, [fn, userData] { fn(userData); }, {}, "cudaLaunchHostFunc");
  return cudaSuccess;
}

}  // extern "C"
