#pragma once
// The scheduler: streams, their worker threads, the legacy default stream's order, waits.
// Locking: called with the state's mutex held; the workers take it themselves. Streams are
// created, legacy default or per-thread default.
#include "state.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace devicekit::cuda_sim::detail {

/// A new stream on `device` with its worker thread.
stream_obj* make_stream(state& g, int device, unsigned flags, stream_obj::kind k);
/// The stream a handle names for the calling thread: 0 and cudaStreamLegacy the legacy default
/// stream of the current device, cudaStreamPerThread this thread's default stream on it.
/// nullptr and `err` when the handle is bad (a violation) or there is no device.
stream_obj* resolve(state& g, cudaStream_t h, const char* api, cudaError_t& err);
/// Queues `run` on `s` after `deps` (stream, count) and the legacy stream's implicit order;
/// returns the count `s` reaches when it has run. `accesses` (the memory it reads and writes)
/// and `waited` (the clock of an event the stream waits for) go to the race detector, now.
/// On a capturing stream the operation becomes a graph node instead (capture.hpp; returns 0):
/// `run` must then be re-runnable, as it runs at every launch.
std::uint64_t enqueue(state& g, stream_obj* s, std::function<void()> run,
                      std::vector<std::pair<stream_obj*, std::uint64_t>> deps = {}, const char* api = "",
                      const std::vector<planned_access>& accesses = {}, const vclock* waited = nullptr);
/// Blocks (releasing `lk` meanwhile) until `s` has completed `target` operations.
void wait_until(state& g, std::unique_lock<std::mutex>& lk, stream_obj* s, std::uint64_t target);
/// Waits for all work queued so far on the streams of `device` (every device when negative); the
/// calling thread is then ordered after it.
void wait_device_idle(state& g, std::unique_lock<std::mutex>& lk, int device);
/// Stops and joins the workers: the runtime's teardown at exit (takes the lock).
void teardown();

}  // namespace devicekit::cuda_sim::detail
