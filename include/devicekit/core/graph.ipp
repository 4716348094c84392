#pragma once
/// \file
/// The definitions behind core/graph.hpp: capture sessions, adoption, launch and destruction.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/graph.hpp>

#include <devicekit/core/detail/event.hpp>

#include <string>

namespace devicekit {

DEVICEKIT_DECL graph graph::on_host(std::function<void()> step) {
  graph g;
  g.host_step_ = std::move(step);
  return g;
}

DEVICEKIT_DECL graph::operator bool() const noexcept {
#if DEVICEKIT_HAS_CUDA
  if (exec_ != nullptr) return true;
#endif
  return static_cast<bool>(host_step_);
}

DEVICEKIT_DECL void graph::launch(stream_ref s) {
  if (host_step_) {
    host_step_();
    ++launches_;
    return;
  }
#if DEVICEKIT_HAS_CUDA
  if (exec_ == nullptr) throw config_error("graph::launch: an empty graph (moved from, or never captured)");
  if (s.get_device().is_cpu()) {
    throw config_error("graph::launch: a graph captured on " + device_.str() +
                       " launches on a stream of a CUDA device, not on " + s.get_device().str());
  }
  scoped_device on(s.get_device().ordinal());
  check_cuda(cudaGraphLaunch(exec_, s.native_handle()), "cudaGraphLaunch(graph, stream)");
  if (last_launch_ != nullptr)
    check_cuda(cudaEventRecord(last_launch_, s.native_handle()), "cudaEventRecord(event, stream)");
  ++launches_;
#else
  (void)s;
  throw config_error("graph::launch: an empty graph (moved from, or never captured)");
#endif
}

DEVICEKIT_DECL void graph::reset() noexcept {
#if DEVICEKIT_HAS_CUDA
  if ((exec_ != nullptr || graph_ != nullptr) && cuda_calls_allowed()) {
    // CUDA lets an executable graph be destroyed with launches still queued: they complete, and
    // the graph's memory goes back to the device afterwards ("Graph Memory Nodes", CUDA C++
    // Programming Guide). Host memory the graph reads (keep_alive) is devicekit's to keep until
    // then: the last launch is waited for first.
    if (last_launch_ != nullptr) {
      (void)cudaEventSynchronize(last_launch_);
      (void)cudaEventDestroy(last_launch_);
    }
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
  }
  exec_ = nullptr;
  graph_ = nullptr;
  last_launch_ = nullptr;
#endif
  if (id_ != 0) detail::graph_memory_ledger::instance().release(id_);
  id_ = 0;
  bytes_ = 0;
  host_step_ = nullptr;
}

#if DEVICEKIT_HAS_CUDA
DEVICEKIT_DECL graph graph::adopt(cudaGraph_t g, unsigned long long capture_id, device dev) {
  graph out;
  out.graph_ = g;  // owned from here on: destroyed with `out` if instantiation throws
  out.id_ = capture_id;
  out.device_ = dev;
  if (capture_id != 0) out.bytes_ = detail::graph_memory_ledger::instance().peak_bytes(capture_id);
  scoped_device on(dev.ordinal());
  check_cuda(cudaGraphInstantiate(&out.exec_, g, 0), "cudaGraphInstantiate(&exec, graph, 0)");
  if (capture_id != 0 && detail::graph_memory_ledger::instance().keeps_alive(capture_id)) {
    out.last_launch_ = detail::create_event();
  }
  return out;
}

namespace detail {

namespace {
cudaStreamCaptureMode native_mode(capture_mode m) noexcept {
  switch (m) {
    case capture_mode::global: return cudaStreamCaptureModeGlobal;
    case capture_mode::this_thread: return cudaStreamCaptureModeThreadLocal;
    case capture_mode::relaxed: return cudaStreamCaptureModeRelaxed;
  }
  return cudaStreamCaptureModeThreadLocal;
}
}  // namespace

DEVICEKIT_DECL capture_session::capture_session(stream_ref s, capture_mode mode) : stream_(s) {
  const native_stream_handle h = s.native_handle();
  // The legacy stream is not supported for capture (cudaStreamBeginCapture); the per-thread
  // default stream is.
  if (h == nullptr || h == cudaStreamLegacy) {
    throw capture_error("capture: the legacy default stream of " + s.get_device().str() +
                        " cannot be captured into a CUDA graph; capture on a stream of your own (devicekit::stream)");
  }
  scoped_device on(s.get_device().ordinal());
  if (const capture_state c = capture_of(h); c.active || c.invalidated) {
    throw capture_error("capture: the stream is already being captured (sequence " + std::to_string(c.id) +
                        "); captures do not nest: end the outer one first, or capture the step on another stream");
  }
  DEVICEKIT_CUDA_CHECK(cudaStreamBeginCapture(h, native_mode(mode)));
  open_ = true;
  id_ = capture_of(h).id;
}

DEVICEKIT_DECL capture_session::~capture_session() {
  if (!open_ || !cuda_calls_allowed()) return;
  scoped_device on(stream_.get_device().ordinal(), std::nothrow);
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(stream_.native_handle(), &g);  // an invalidated capture answers an error
  (void)cudaGetLastError();
  if (g != nullptr) (void)cudaGraphDestroy(g);
  if (id_ != 0) graph_memory_ledger::instance().release(id_);
}

DEVICEKIT_DECL graph capture_session::finish() {
  scoped_device on(stream_.get_device().ordinal());
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_.native_handle(), &g);
  open_ = false;
  graph_memory_ledger& ledger = graph_memory_ledger::instance();
  if (ended != cudaSuccess || g == nullptr) {
    (void)cudaGetLastError();
    if (g != nullptr) (void)cudaGraphDestroy(g);
    ledger.release(id_);
    check_cuda(ended != cudaSuccess ? ended : cudaErrorStreamCaptureInvalidated,
               "cudaStreamEndCapture(stream, &graph): the capture was invalidated by a call CUDA forbids while "
               "capturing (a synchronisation, a query of captured work, cudaMalloc, the legacy stream); "
               "nothing of the step was kept");
  }
  if (const std::size_t live = ledger.live_bytes(id_); live != 0) {
    (void)cudaGraphDestroy(g);
    ledger.release(id_);
    throw capture_error("capture: " + std::to_string(live) +
                        " bytes allocated inside the captured step are still allocated at its end (a tree "
                        "placed in the step and kept, or an allocation not freed in it); graph memory exists "
                        "only while a launch runs: place outputs before the capture and copy into them in the step");
  }
  graph out = graph::adopt(g, id_, stream_.get_device());
  id_ = 0;  // the graph owns the sequence's memory from here on
  return out;
}

}  // namespace detail
#endif

}  // namespace devicekit
