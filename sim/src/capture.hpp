#pragma once
// Stream capture as the other API families see it: the checks a call on a stream makes while
// capture sequences are active, the recording of a queued operation as a graph node, and graph
// memory. Locking: called with the state's mutex held. capture.cpp holds the rules and the
// capture entry points, graph.cpp the graphs and their launches.
#include "state.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace devicekit::cuda_sim::detail {

/// The active capture sequence `id`, or nullptr (never begun, or ended).
capture_seq* active_capture(state& g, std::uint64_t id);
/// Invalidates `c` ("Invalidation": the failing call returns its own error, later captured
/// calls on its streams cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture a NULL graph).
void invalidate(capture_seq* c);
/// The capture rules of a call that queues work on `s`: the legacy stream while a blocking stream
/// of its device captures (cudaErrorStreamCaptureImplicit, invalidating those captures), a
/// stream whose capture was invalidated (cudaErrorStreamCaptureInvalidated). cudaSuccess else.
cudaError_t capture_use(state& g, stream_obj* s);
/// A call that waits for `s` (cudaStreamSynchronize, cudaStreamQuery): capture_use, then
/// cudaErrorStreamCaptureUnsupported (invalidating) when `s` captures.
cudaError_t capture_wait(state& g, stream_obj* s);
/// A "potentially unsafe" call (cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost) from a
/// thread that cudaThreadExchangeStreamCaptureMode's rules prohibit: cudaErrorStreamCaptureUnsupported,
/// invalidating the sequences that prohibit it. cudaSuccess else.
cudaError_t capture_unsafe_call(state& g);
/// cudaDeviceSynchronize: cudaErrorStreamCaptureUnsupported (invalidating) while a stream of
/// `device` captures.
cudaError_t capture_device_wait(state& g, int device);
/// Records an operation queued on capturing stream `s` as a node of its sequence's graph, after
/// the stream's dependency set; the node becomes that set.
void record_node(state& g, stream_obj* s, std::function<void()> run, const char* api,
                 const std::vector<planned_access>& accesses, event_obj* wait_event = nullptr);
/// Graph memory: one allocation node on capturing stream `s` (cudaMallocAsync,
/// cudaMallocFromPoolAsync) of `size` bytes on `device`.
cudaError_t capture_alloc(state& g, stream_obj* s, void** ptr, std::size_t size, int device, const char* api);
/// Graph memory: a free node (cudaFreeAsync on capturing stream `s`).
cudaError_t capture_free(state& g, stream_obj* s, void* ptr);
/// Releases graph memory `m` once nothing holds it: its graph and execs destroyed, no launch in
/// flight (the caller has just dropped its own hold).
void drop_graph_memory(state& g, graph_memory& m);
/// Destroys graph `gr` (cudaGraphDestroy, or a capture that failed): its nodes go, its memory
/// when no exec holds it any more (graph.cpp).
void destroy_graph(state& g, graph_obj* gr);
/// The driver's cuStreamIsCapturing, handed out by cudaGetDriverEntryPointByVersion (driver.cpp):
/// a CUresult, and the status as CUstreamCaptureStatus. Takes the state's lock itself and, like
/// the driver, sets no runtime last error.
int driver_stream_is_capturing(cudaStream_t stream, int* status);

}  // namespace devicekit::cuda_sim::detail
