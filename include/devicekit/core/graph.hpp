#pragma once
/// \file
/// `dk::capture(stream, step)` records the device work of `step` once into a CUDA graph;
/// `graph::launch(stream)` replays all of it for one launch's host cost ("CUDA Graphs", CUDA C++
/// Programming Guide). For a step of many small operations (a 400-leaf optimizer update:
/// transform, norm, axpy, cast, all-reduce) the host's per-call overhead, not the GPU, bounds an
/// eager step; a graph pays it once.
///
///     dk::stream s(dev);
///     dk::graph g = dk::capture(s, [&] { update(params, grads, s); });  // recorded, not run
///     for (int i = 0; i < steps; ++i) g.launch(s);                     // one cudaGraphLaunch each
///
/// What a step may do inside the capture: queue work on the capturing stream (and on streams it
/// forks with events, joined back before the end), allocate and free through devicekit pools on
/// it (graph memory nodes, memory/device_memory.hpp), place trees from pinned or device memory,
/// copy into placed trees. What it may not: wait on the host, place from pageable memory, anything
/// else that must happen at call time; devicekit refuses those with capture_error before queuing
/// anything. Host code in `step` runs once, at capture: a graph replays device work only.
///
/// Memory allocated inside the capture must be freed inside it (a tree placed in the step is
/// dropped in it): graph memory exists only while a launch runs, so `capture` refuses a step
/// whose allocations outlive it. Inputs and outputs are placed before the capture and the step
/// copies into them. The pools count a graph's memory (the most it holds at once) against their
/// budgets until the graph is destroyed: `memory_bytes()`.
///
/// The plain route, for code that captures itself: cudaStreamBeginCapture, the same devicekit
/// calls (each layer sees the capture and takes its capture path), cudaStreamGetCaptureInfo for
/// the sequence id, cudaStreamEndCapture, then `graph::adopt(cuda_graph, id, dev)` to launch it
/// and to give its memory back to the pools when it is destroyed.
///
/// On a cpu stream, capture stores `step` and each launch calls it: the same program runs on a
/// machine without a GPU.
#include <devicekit/core/capture.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

namespace devicekit {

/// Which other calls a capture forbids while it runs (cudaStreamCaptureMode): `this_thread`
/// (cudaStreamCaptureModeThreadLocal, the default here) forbids unsafe calls such as cudaMalloc
/// on the capturing thread only, so other threads keep working eagerly; `global` forbids them on
/// every thread; `relaxed` on none.
enum class capture_mode { global, this_thread, relaxed };

/// A captured, instantiated graph: move-only. Destroying it destroys the CUDA graph and its
/// executable and gives its memory back to the pools' budgets.
class graph {
 public:
  graph() = default;
  graph(graph&& o) noexcept { swap(o); }
  graph& operator=(graph&& o) noexcept {
    graph tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  ~graph() { reset(); }

#if DEVICEKIT_HAS_CUDA
  /// Takes a graph the caller captured (cudaStreamEndCapture) on device `dev`, instantiates it
  /// and owns both. `capture_id` is the sequence id cudaStreamGetCaptureInfo gave during that
  /// capture: the pools count the graph's memory under it. Throws cuda_error when the runtime
  /// cannot instantiate it (the graph is destroyed then).
  [[nodiscard]] static graph adopt(cudaGraph_t g, unsigned long long capture_id, device dev);
  [[nodiscard]] cudaGraph_t native_graph() const noexcept { return graph_; }
  [[nodiscard]] cudaGraphExec_t native_exec() const noexcept { return exec_; }
#endif
  /// For capture on a cpu stream: a graph whose launch calls `step`.
  [[nodiscard]] static graph on_host(std::function<void()> step);

  /// Queues one replay of the graph on `s` (cudaGraphLaunch), after the work queued on `s` before
  /// it; returns without waiting. Launches of one graph run one after another, whatever streams
  /// they are queued on (CUDA runs an executable graph at most once at a time). On a cpu graph,
  /// calls the step now.
  void launch(stream_ref s);

  /// Bytes of graph memory the pools count for this graph (the most its capture held at once).
  [[nodiscard]] std::size_t memory_bytes() const noexcept { return bytes_; }
  /// The capture sequence it came from (0 for a cpu graph).
  [[nodiscard]] unsigned long long capture_id() const noexcept { return id_; }
  [[nodiscard]] std::uint64_t launches() const noexcept { return launches_; }
  [[nodiscard]] bool runs_on_host() const noexcept { return static_cast<bool>(host_step_); }
  [[nodiscard]] device get_device() const noexcept { return device_; }
  /// Whether it holds a graph.
  explicit operator bool() const noexcept;

 private:
  void swap(graph& o) noexcept {
#if DEVICEKIT_HAS_CUDA
    std::swap(graph_, o.graph_);
    std::swap(exec_, o.exec_);
    std::swap(last_launch_, o.last_launch_);
#endif
    std::swap(device_, o.device_);
    std::swap(id_, o.id_);
    std::swap(bytes_, o.bytes_);
    std::swap(launches_, o.launches_);
    std::swap(host_step_, o.host_step_);
  }
  void reset() noexcept;

#if DEVICEKIT_HAS_CUDA
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  /// Recorded after each launch when the capture kept host memory alive for the graph
  /// (graph_memory_ledger::keep_alive): reset() waits for it before that memory goes.
  cudaEvent_t last_launch_ = nullptr;
#endif
  device device_ = device::cpu();
  unsigned long long id_ = 0;
  std::size_t bytes_ = 0;
  std::uint64_t launches_ = 0;
  std::function<void()> host_step_;
};

namespace detail {

#if DEVICEKIT_HAS_CUDA
/// One capture on one stream: begun by the constructor; `finish` ends it and makes the graph; if
/// `finish` is not reached (the step threw), the destructor ends the capture, destroys what was
/// captured and gives its memory back, so the stream is usable again and no pool counts it.
class capture_session {
 public:
  DEVICEKIT_DECL capture_session(stream_ref s, capture_mode mode);
  capture_session(const capture_session&) = delete;
  capture_session& operator=(const capture_session&) = delete;
  DEVICEKIT_DECL ~capture_session();
  [[nodiscard]] DEVICEKIT_DECL graph finish();

 private:
  stream_ref stream_;
  unsigned long long id_ = 0;
  bool open_ = false;
};
#endif

}  // namespace detail

/// Records the device work that `step()` queues on `s` into a graph, without running it, and
/// instantiates the graph (see the file comment). Throws what `step` throws, capture_error when
/// `s` cannot be captured (the legacy default stream, a stream already capturing) or when memory
/// allocated in the step outlives it, and cuda_error when the runtime invalidated the capture (a
/// call CUDA forbids while capturing); the capture is ended and nothing is leaked in each case.
template <class Step>
[[nodiscard]] graph capture(stream_ref s, Step&& step, capture_mode mode = capture_mode::this_thread) {
  static_assert(std::is_invocable_v<Step&>, "capture(stream, step): step must be callable with no arguments");
  if (s.get_device().is_cpu()) return graph::on_host(std::function<void()>(std::forward<Step>(step)));
#if DEVICEKIT_HAS_CUDA
  detail::capture_session session(s, mode);
  step();
  return session.finish();
#else
  (void)mode;
  return graph::on_host(std::function<void()>(std::forward<Step>(step)));
#endif
}

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/graph.ipp>
#endif
