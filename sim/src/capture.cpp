// Stream capture: cudaStreamBeginCapture, cudaStreamEndCapture, cudaStreamIsCapturing,
// cudaStreamGetCaptureInfo, cudaThreadExchangeStreamCaptureMode, and the rules other families
// apply while a capture sequence is active (capture.hpp). Locking: each call holds the state's
// mutex (SIM_ENTER). The rules come from cuda_runtime_api.h and from the CUDA Programming
// Guide, "CUDA Graphs" > "Stream Capture" (its sub-sections "Cross-stream Dependencies and
// Events", "Prohibited and Unhandled Operations", "Invalidation", and "Graph Memory Nodes").
#include "capture.hpp"

#include "entry.hpp"
#include "memory_model.hpp"
#include "scheduler.hpp"

#include <cuda.h>  // CUresult: what cuStreamIsCapturing returns

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace devicekit::cuda_sim::detail {
namespace {

/// The calling thread's interaction mode (cudaThreadExchangeStreamCaptureMode; global by default).
thread_local cudaStreamCaptureMode tl_capture_mode = cudaStreamCaptureModeGlobal;

bool valid_mode(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal || m == cudaStreamCaptureModeThreadLocal || m == cudaStreamCaptureModeRelaxed;
}

/// "When a blocking stream is capturing, the legacy stream is in an unusable state until the
/// blocking stream capture is terminated" (cudaStreamIsCapturing): the active sequences that
/// hold a blocking stream of `s`'s device, when `s` is the legacy stream.
std::vector<capture_seq*> implicit_captures(state& g, const stream_obj* s) {
  std::vector<capture_seq*> out;
  if (s->type != stream_obj::kind::legacy) return out;
  for (auto& [id, c] : g.captures) {
    for (const stream_obj* t : c->streams) {
      if (t->device == s->device && t->blocking()) {
        out.push_back(c.get());
        break;
      }
    }
  }
  return out;
}

/// Takes every stream of `c` out of capture mode and forgets the sequence (its graph is the
/// caller's to keep or destroy).
void end_sequence(state& g, capture_seq* c) {
  for (stream_obj* t : c->streams) {
    t->capture = nullptr;
    t->capture_deps.clear();
  }
  g.captures.erase(c->id);
}

}  // namespace

capture_seq* active_capture(state& g, std::uint64_t id) {
  auto it = g.captures.find(id);
  return it == g.captures.end() ? nullptr : it->second.get();
}

void invalidate(capture_seq* c) {
  if (c != nullptr) c->invalidated = true;
}

cudaError_t capture_use(state& g, stream_obj* s) {
  // "When any stream in the same context is being captured, and it was not created with
  // cudaStreamNonBlocking, any attempted use of the legacy stream is invalid" (Prohibited and
  // Unhandled Operations); the error is cudaErrorStreamCaptureImplicit ("a disallowed implicit
  // dependency on a current capture sequence from cudaStreamLegacy", driver_types.h).
  const std::vector<capture_seq*> implicit = implicit_captures(g, s);
  for (capture_seq* c : implicit) invalidate(c);
  if (!implicit.empty()) return cudaErrorStreamCaptureImplicit;
  // "further use of any streams which are being captured ... is invalid and will return an
  // error, until stream capture is ended" (Invalidation).
  if (s->capture != nullptr && s->capture->invalidated) return cudaErrorStreamCaptureInvalidated;
  return cudaSuccess;
}

cudaError_t capture_wait(state& g, stream_obj* s) {
  if (cudaError_t e = capture_use(g, s); e != cudaSuccess) return e;
  // "It is invalid to synchronize or query the execution status of a stream which is being
  // captured ... because they do not represent items scheduled for execution" (Prohibited and
  // Unhandled Operations); cudaErrorStreamCaptureUnsupported: "not permitted when the stream is
  // capturing".
  if (s->capture != nullptr) {
    invalidate(s->capture);
    return cudaErrorStreamCaptureUnsupported;
  }
  return cudaSuccess;
}

cudaError_t capture_unsafe_call(state& g) {
  // cudaThreadExchangeStreamCaptureMode: global mode prohibits potentially unsafe calls while
  // the thread has its own non-relaxed capture or any other thread a global one; thread-local
  // mode only for the thread's own non-relaxed capture; relaxed never.
  const std::thread::id me = std::this_thread::get_id();
  bool prohibited = false;
  for (auto& [id, c] : g.captures) {
    const bool mine = c->thread == me;
    bool p = false;
    if (tl_capture_mode == cudaStreamCaptureModeGlobal) {
      p = (mine && c->mode != cudaStreamCaptureModeRelaxed) || (!mine && c->mode == cudaStreamCaptureModeGlobal);
    } else if (tl_capture_mode == cudaStreamCaptureModeThreadLocal) {
      p = mine && c->mode != cudaStreamCaptureModeRelaxed;
    }
    if (p) {
      invalidate(c.get());
      prohibited = true;
    }
  }
  return prohibited ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t capture_device_wait(state& g, int device) {
  // "It is also invalid to query the execution status of or synchronize a broader handle which
  // encompasses an active stream capture, such as a device or context handle when any associated
  // stream is in capture mode" (Prohibited and Unhandled Operations).
  bool capturing = false;
  for (auto& [id, c] : g.captures) {
    for (const stream_obj* t : c->streams) {
      if (t->device == device) {
        invalidate(c.get());
        capturing = true;
        break;
      }
    }
  }
  return capturing ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

void record_node(state& g, stream_obj* s, std::function<void()> run, const char* api,
                 const std::vector<planned_access>& accesses, event_obj* wait_event) {
  (void)g;
  graph_obj* gr = s->capture->graph;
  gr->nodes.push_back({std::move(run), s->capture_deps, api, accesses, wait_event});
  s->capture_deps.assign(1, gr->nodes.size() - 1);
}

cudaError_t capture_alloc(state& g, stream_obj* s, void** ptr, std::size_t size, int device, const char* api) {
  // "Graph Memory Nodes": the allocation's virtual address is fixed for the life of the graph
  // (every launch uses the same address); the simulator allocates it at capture and keeps it
  // until the graph and its execs are gone. CUDA reserves physical memory at the first launch;
  // here it counts from the capture on (cudaMemGetInfo, device_bytes_in_use), which is stricter.
  if (cudaError_t e = device_alloc(g, ptr, size, device, true, api); e != cudaSuccess) return e;
  allocation* a = find_allocation(g, *ptr);
  a->graph_capture = s->capture->id;
  graph_memory& m = *s->capture->graph->memory;
  m.bases.push_back(a->base);
  ++m.unfreed;
  const auto d = static_cast<std::size_t>(device);
  g.graph_bytes[d] += a->size;
  g.graph_bytes_high[d] = std::max(g.graph_bytes_high[d], g.graph_bytes[d]);
  // Each launch reaching the node sees fresh memory: poisoned, as a new allocation is, so a
  // graph that reads scratch before writing it (or across launches) reads garbage.
  void* p = *ptr;
  const std::size_t n = a->size;
  record_node(g, s, [p, n] { std::memset(p, poison_new, n); }, api, {{p, n, true, "graph memory allocated"}});
  return cudaSuccess;
}

cudaError_t capture_free(state& g, stream_obj* s, void* ptr) {
  allocation* a = find_allocation(g, ptr);
  if (a != nullptr && a->base == reinterpret_cast<std::uintptr_t>(ptr) && a->free_pending) {
    violation(g, "cudaFreeAsync", "a pointer freed twice");
    return cudaErrorInvalidValue;
  }
  // CUDA captures a free node for any stream-ordered or graph allocation; the simulator only for
  // memory its own sequence allocated (all devicekit does), so that graph memory keeps one owner.
  if (a == nullptr || a->base != reinterpret_cast<std::uintptr_t>(ptr) || a->graph_capture != s->capture->id) {
    return cudaErrorNotSupported;
  }
  a->free_pending = true;  // later captured uses are uses after free (check_range)
  --s->capture->graph->memory->unfreed;
  const std::size_t n = a->size;
  record_node(g, s, [ptr, n] { std::memset(ptr, poison_freed, n); }, "cudaFreeAsync",
              {{ptr, n, true, "the allocation freed"}});
  return cudaSuccess;
}

void drop_graph_memory(state& g, graph_memory& m) {
  if (m.owners > 0 || m.launches_in_flight > 0) return;
  for (std::uintptr_t base : m.bases) {
    auto it = g.allocations.find(base);
    if (it == g.allocations.end()) continue;
    g.graph_bytes[static_cast<std::size_t>(it->second.device)] -= it->second.size;
    release_device(g, it->second);
  }
  m.bases.clear();
}

int driver_stream_is_capturing(cudaStream_t stream, int* status) {
  // The driver's answer leaves the runtime's last error alone: no fail() here.
  entry e("cuStreamIsCapturing", stream);
  if (e.early != cudaSuccess) return static_cast<int>(e.early);
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!implicit_captures(e.g, e.stream).empty()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  const capture_seq* c = e.stream->capture;
  // CUstreamCaptureStatus: NONE 0, ACTIVE 1, INVALIDATED 2, as cudaStreamCaptureStatus.
  *status = c == nullptr ? 0 : c->invalidated ? 2 : 1;
  return CUDA_SUCCESS;
}

}  // namespace devicekit::cuda_sim::detail

using namespace devicekit::cuda_sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  SIM_ENTER_STREAM("cudaStreamBeginCapture", stream);
  if (!valid_mode(mode)) return fail(cudaErrorInvalidValue);
  // "Capture may not be initiated if stream is cudaStreamLegacy" (cudaStreamBeginCapture).
  if (s->type == stream_obj::kind::legacy) return fail(cudaErrorStreamCaptureUnsupported);
  // "it may only be initiated if the stream is not already in capture mode".
  if (s->capture != nullptr) return fail(cudaErrorIllegalState);
  auto c = std::make_unique<capture_seq>();
  c->id = g.next_capture_id++;
  c->mode = mode;
  c->origin = s;
  c->thread = std::this_thread::get_id();
  c->graph = new graph_obj;
  g.graphs.insert(c->graph);
  ++g.graphs_alive;
  c->streams.insert(s);
  s->capture = c.get();
  s->capture_deps.clear();
  g.captures[c->id] = std::move(c);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  SIM_ENTER_STREAM("cudaStreamIsCapturing", stream);
  if (pCaptureStatus == nullptr) return fail(cudaErrorInvalidValue);
  // On the legacy stream while a blocking stream captures: cudaErrorStreamCaptureImplicit, and
  // "The blocking stream capture is not invalidated" (cudaStreamIsCapturing).
  if (!implicit_captures(g, s).empty()) return fail(cudaErrorStreamCaptureImplicit);
  *pCaptureStatus = s->capture == nullptr     ? cudaStreamCaptureStatusNone
                    : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                              : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                               unsigned long long* id_out, cudaGraph_t* graph_out,
                                               const cudaGraphNode_t** dependencies_out,
                                               const cudaGraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  // The arrays stay valid "until the next API call which operates on the stream": per thread here.
  thread_local std::vector<cudaGraphNode_t> deps;
  thread_local std::vector<cudaGraphEdgeData> edges;
  SIM_ENTER_STREAM("cudaStreamGetCaptureInfo", stream);
  // captureStatus_out is "required"; "If edgeData_out is non-NULL then dependencies_out must be".
  if (captureStatus_out == nullptr || (edgeData_out != nullptr && dependencies_out == nullptr)) {
    return fail(cudaErrorInvalidValue);
  }
  if (!implicit_captures(g, s).empty()) return fail(cudaErrorStreamCaptureImplicit);
  capture_seq* c = s->capture;
  if (c == nullptr) {
    *captureStatus_out = cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  *captureStatus_out = c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  if (id_out != nullptr) *id_out = c->id;  // "unique over the lifetime of the process"
  if (graph_out != nullptr) *graph_out = reinterpret_cast<cudaGraph_t>(c->graph);
  deps.clear();
  for (std::size_t i : s->capture_deps) deps.push_back(reinterpret_cast<cudaGraphNode_t>(&c->graph->nodes[i]));
  edges.assign(deps.size(), cudaGraphEdgeData{});
  if (dependencies_out != nullptr) *dependencies_out = deps.data();
  if (edgeData_out != nullptr) *edgeData_out = edges.data();
  if (numDependencies_out != nullptr) *numDependencies_out = deps.size();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  SIM_ENTER("cudaThreadExchangeStreamCaptureMode");
  if (mode == nullptr || !valid_mode(*mode)) return fail(cudaErrorInvalidValue);
  std::swap(*mode, tl_capture_mode);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  SIM_ENTER_STREAM("cudaStreamEndCapture", stream);
  if (pGraph == nullptr) return fail(cudaErrorInvalidValue);
  capture_seq* c = s->capture;
  if (c == nullptr) return fail(cudaErrorIllegalState);
  // "Capture must be ended on the same stream in which it was initiated"
  // (cudaStreamBeginCapture): cudaErrorStreamCaptureUnmatched ("The capture was not initiated
  // in this stream"). An invalid operation during capture invalidates it ("Invalidation"); the
  // sequence stays open for the origin stream's cudaStreamEndCapture.
  if (c->origin != s) {
    invalidate(c);
    return fail(cudaErrorStreamCaptureUnmatched);
  }
  // "If the mode argument to cudaStreamBeginCapture was not cudaStreamCaptureModeRelaxed, this
  // call must be from the same thread" (cudaStreamEndCapture). On an H200 (driver 580.159) such a
  // call also ended the sequence: the stream left capture mode, and the right thread's
  // cudaStreamEndCapture then answered cudaErrorIllegalState.
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id()) {
    graph_obj* graph = c->graph;
    end_sequence(g, c);
    destroy_graph(g, graph);
    *pGraph = nullptr;
    return fail(cudaErrorStreamCaptureWrongThread);
  }
  // "All streams being joined to the same capture graph must be rejoined to the origin stream"
  // (Cross-stream Dependencies and Events): every node must come before the origin's current
  // dependency set, else cudaErrorStreamCaptureUnjoined ("a fork that was not joined to the
  // primary stream").
  graph_obj* graph = c->graph;
  std::vector<bool> reached(graph->nodes.size(), false);
  std::vector<std::size_t> todo = s->capture_deps;
  while (!todo.empty()) {
    const std::size_t i = todo.back();
    todo.pop_back();
    if (reached[i]) continue;
    reached[i] = true;
    for (std::size_t d : graph->nodes[i].deps) todo.push_back(d);
  }
  const bool joined = std::all_of(reached.begin(), reached.end(), [](bool r) { return r; });
  const bool invalidated = c->invalidated;
  // The sequence ends: its streams leave capture mode, in every case ("This call will take the
  // associated streams out of capture mode, but will also return an error value and a NULL
  // graph", Invalidation).
  end_sequence(g, c);
  if (invalidated || !joined) {
    destroy_graph(g, graph);
    *pGraph = nullptr;
    return fail(invalidated ? cudaErrorStreamCaptureInvalidated : cudaErrorStreamCaptureUnjoined);
  }
  *pGraph = reinterpret_cast<cudaGraph_t>(graph);
  return cudaSuccess;
}

}  // extern "C"
