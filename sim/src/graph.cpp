// Graphs: cudaGraphCreate, cudaGraphInstantiate(WithFlags), cudaGraphLaunch,
// cudaGraphExecDestroy, cudaGraphDestroy, cudaDeviceGetGraphMemAttribute, cudaDeviceGraphMemTrim.
// Locking: each call holds the state's mutex (SIM_ENTER); the last operation of a launch takes it
// to hand back its hold on graph memory. A launch queues the graph's nodes in their capture
// order, which is a topological order, on the launch stream: running them one after another is
// a legal schedule of the graph, and each node's accesses go to the race detector again.
#include "capture.hpp"
#include "entry.hpp"
#include "race_detector.hpp"
#include "scheduler.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace devicekit::cuda_sim::detail {

void destroy_graph(state& g, graph_obj* gr) {
  gr->destroyed = true;
  gr->nodes.clear();
  --g.graphs_alive;
  --gr->memory->owners;
  drop_graph_memory(g, *gr->memory);
}

namespace {

graph_obj* resolve_graph(state& g, cudaGraph_t h, const char* api) {
  auto* gr = reinterpret_cast<graph_obj*>(h);
  if (g.graphs.count(gr) == 0 || gr->destroyed) {
    violation(g, api, "a graph that does not exist (never created, or destroyed)");
    return nullptr;
  }
  return gr;
}

exec_obj* resolve_exec(state& g, cudaGraphExec_t h, const char* api) {
  auto* x = reinterpret_cast<exec_obj*>(h);
  if (g.execs.count(x) == 0 || x->destroyed) {
    violation(g, api, "an executable graph that does not exist (never instantiated, or destroyed)");
    return nullptr;
  }
  return x;
}

bool being_captured(state& g, const graph_obj* gr) {
  for (const auto& [id, c] : g.captures) {
    if (c->graph == gr) return true;
  }
  return false;
}

}  // namespace
}  // namespace devicekit::cuda_sim::detail

using namespace devicekit::cuda_sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t* pGraph, unsigned int flags) {
  SIM_ENTER("cudaGraphCreate");
  if (pGraph == nullptr || flags != 0) return fail(cudaErrorInvalidValue);  // "flags must be 0"
  auto* gr = new graph_obj;
  g.graphs.insert(gr);
  ++g.graphs_alive;
  *pGraph = reinterpret_cast<cudaGraph_t>(gr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  SIM_ENTER("cudaGraphDestroy");
  graph_obj* gr = resolve_graph(g, graph, "cudaGraphDestroy");
  if (gr == nullptr) return fail(cudaErrorInvalidValue);
  // The graph of an active capture is not the caller's to destroy: "This API does not transfer
  // ownership of the graph, which is transferred or destroyed at cudaStreamEndCapture"
  // (cudaStreamGetCaptureInfo).
  if (being_captured(g, gr)) return fail(cudaErrorIllegalState);
  destroy_graph(g, gr);  // execs made from it stay valid: they hold copies of its nodes
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                                    unsigned long long flags) {
  SIM_ENTER("cudaGraphInstantiateWithFlags");
  if (pGraphExec == nullptr) return fail(cudaErrorInvalidValue);
  graph_obj* gr = resolve_graph(g, graph, "cudaGraphInstantiate");
  if (gr == nullptr) return fail(cudaErrorInvalidValue);
  constexpr unsigned long long known = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
                                       cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  // "cudaGraphInstantiateFlagDeviceLaunch ... cannot be used in conjunction with
  // cudaGraphInstantiateFlagAutoFreeOnLaunch" (cudaGraphInstantiate).
  if ((flags & ~known) != 0 || ((flags & cudaGraphInstantiateFlagDeviceLaunch) != 0 &&
                                (flags & cudaGraphInstantiateFlagAutoFreeOnLaunch) != 0)) {
    return fail(cudaErrorInvalidValue);
  }
  if (being_captured(g, gr)) return fail(cudaErrorIllegalState);
  // "If graph contains any allocation or free nodes, there can be at most one executable graph
  // in existence for that graph at a time" (cudaGraphInstantiate).
  if (!gr->memory->bases.empty() && gr->execs > 0) return fail(cudaErrorInvalidValue);
  auto* x = new exec_obj;
  x->nodes = std::make_shared<const std::deque<graph_node>>(gr->nodes);
  x->memory = gr->memory;
  ++x->memory->owners;
  x->graph = gr;
  x->auto_free = (flags & cudaGraphInstantiateFlagAutoFreeOnLaunch) != 0;
  ++gr->execs;
  g.execs.insert(x);
  ++g.graphs_alive;
  *pGraphExec = reinterpret_cast<cudaGraphExec_t>(x);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiateWithFlags(pGraphExec, graph, flags);
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  SIM_ENTER("cudaGraphExecDestroy");
  exec_obj* x = resolve_exec(g, graphExec, "cudaGraphExecDestroy");
  if (x == nullptr) return fail(cudaErrorInvalidValue);
  // A launch in flight is not cut short: its queued nodes run to the end, and its graph memory
  // goes when the last launch is done (the launch's last operation holds it).
  x->destroyed = true;
  --g.graphs_alive;
  --x->graph->execs;
  --x->memory->owners;
  drop_graph_memory(g, *x->memory);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  SIM_ENTER_STREAM("cudaGraphLaunch", stream);
  exec_obj* x = resolve_exec(g, graphExec, "cudaGraphLaunch");
  if (x == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = capture_use(g, s); e != cudaSuccess) return fail(e);
  // CUDA captures a launch into a capturing stream as a child graph node; the simulator does
  // not (devicekit never does it) and says so rather than running it eagerly.
  if (s->capture != nullptr) return fail(cudaErrorStreamCaptureUnsupported);
  // "If any allocations created by graphExec remain unfreed (from a previous launch) and
  // graphExec was not instantiated with cudaGraphInstantiateFlagAutoFreeOnLaunch, the launch
  // will fail with cudaErrorInvalidValue" (cudaGraphLaunch). Graph memory is freed only by the
  // graph's own free nodes here.
  if (x->memory->unfreed > 0 && x->launches > 0 && !x->auto_free) return fail(cudaErrorInvalidValue);
  ++g.graph_launches;
  ++x->launches;
  ++x->memory->launches_in_flight;
  // "Each launch is ordered behind both any previous work in stream and any previous launches
  // of graphExec" (cudaGraphLaunch): the first operation waits for the previous launch's last.
  std::vector<std::pair<stream_obj*, std::uint64_t>> after_previous;
  if (x->last_stream != nullptr && x->last_stream != s) after_previous.emplace_back(x->last_stream, x->last_target);
  bool first = true;
  auto queue = [&](std::function<void()> run, const char* api, const std::vector<planned_access>& accesses,
                   const event_obj* wait_event) {
    std::vector<std::pair<stream_obj*, std::uint64_t>> deps;
    vclock waited;
    if (first) {
      deps = after_previous;
      waited = x->last_clock;
      first = false;
    }
    // An external event wait node waits for the event's most recent record at the launch.
    if (wait_event != nullptr && !wait_event->destroyed && wait_event->stream != nullptr) {
      deps.emplace_back(wait_event->stream, wait_event->target);
      join_into(waited, wait_event->clock);
    }
    enqueue(g, s, std::move(run), std::move(deps), api, accesses, waited.empty() ? nullptr : &waited);
  };
  for (const graph_node& n : *x->nodes) queue(n.run, n.api, n.accesses, n.wait_event);
  queue(
      [memory = x->memory] {
        state& gs = global();
        std::lock_guard lk(gs.m);
        --memory->launches_in_flight;
        drop_graph_memory(gs, *memory);
      },
      "cudaGraphLaunch", {}, nullptr);
  x->last_stream = s;
  x->last_target = s->submitted;
  x->last_clock = s->clock;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  SIM_ENTER("cudaDeviceGetGraphMemAttribute");
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  const auto d = static_cast<std::size_t>(device);
  // Used and reserved are the same here: graph memory is allocated when captured.
  switch (attr) {
    case cudaGraphMemAttrUsedMemCurrent:
    case cudaGraphMemAttrReservedMemCurrent: *static_cast<std::uint64_t*>(value) = g.graph_bytes[d]; break;
    case cudaGraphMemAttrUsedMemHigh:
    case cudaGraphMemAttrReservedMemHigh: *static_cast<std::uint64_t*>(value) = g.graph_bytes_high[d]; break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGraphMemTrim(int device) {
  SIM_ENTER("cudaDeviceGraphMemTrim");
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  return cudaSuccess;  // graph memory goes back when its graph is destroyed: nothing is cached
}

}  // extern "C"
