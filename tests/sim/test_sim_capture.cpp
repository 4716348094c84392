// Stream capture and graphs, each case against the rule of cuda_runtime_api.h or of the CUDA
// Programming Guide ("CUDA Graphs" > "Stream Capture", "Graph Memory Nodes") that it names. Run
// on the simulator with 1, 2 and 4 devices, and against the real runtime (gpu_sim_rules) without
// the [sim_only] cases, which observe what only the simulator can (byte counts, launches, races).
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>

#include "sim_test_support.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if DEVICEKIT_CUDA_SIM_NCCL  // the simulator implements NCCL (its header was found at build time)
#  include <nccl.h>
#endif

namespace sim = devicekit::cuda_sim;

namespace {

using sim_test::gate;
using sim_test::ok;
using sim_test::pinned_host;
using sim_test::scoped_device_memory;
using sim_test::scoped_event;
using sim_test::scoped_stream;

constexpr std::size_t bytes = 4096;

bool all_bytes(const void* p, std::size_t n, unsigned char v) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != v) return false;
  }
  return true;
}

cudaStreamCaptureStatus capture_status(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  ok(cudaStreamIsCapturing(s, &st));
  return st;
}

/// Ends a capture that an invalid call invalidated ("Invalidation"): a later captured call on
/// the stream returns cudaErrorStreamCaptureInvalidated, and cudaStreamEndCapture that error and
/// a NULL graph; the stream then leaves capture mode.
void expect_invalidated(cudaStream_t s, void* dev) {
  CHECK(capture_status(s) == cudaStreamCaptureStatusInvalidated);
  CHECK(cudaMemsetAsync(dev, 1, 16, s) == cudaErrorStreamCaptureInvalidated);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(&graph);
  CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
  CHECK(graph == nullptr);
  CHECK(capture_status(s) == cudaStreamCaptureStatusNone);
  (void)cudaGetLastError();
}

/// Instantiates `graph` (and destroys it: the exec is independent of it).
cudaGraphExec_t instantiate(cudaGraph_t graph, unsigned long long flags = 0) {
  cudaGraphExec_t exec = nullptr;
  ok(cudaGraphInstantiateWithFlags(&exec, graph, flags));
  ok(cudaGraphDestroy(graph));
  return exec;
}

void CUDART_CB count_call(void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); }

/// DEVICEKIT_SIM_RACECHECK=0 turns the detector off: the race case then has nothing to check.
bool detector_off() {
  const char* v = std::getenv("DEVICEKIT_SIM_RACECHECK");
  return v != nullptr && std::string(v) == "0";
}

}  // namespace

TEST_CASE("capture: begin, is-capturing, get-info and end; captured work runs only when launched", "[sim][capture]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto dev = scoped_device_memory(bytes);
  ok(cudaMemset(dev, 1, bytes));
  ok(cudaDeviceSynchronize());
  CHECK(capture_status(s) == cudaStreamCaptureStatusNone);
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(capture_status(s) == cudaStreamCaptureStatusActive);
  // "it may only be initiated if the stream is not already in capture mode".
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState);
  ok(cudaMemsetAsync(dev, 2, bytes, s));
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long id1 = 0;
  cudaGraph_t building = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  std::size_t ndeps = 0;
  ok(cudaStreamGetCaptureInfo(s, &st, &id1, &building, &deps, nullptr, &ndeps));
  CHECK(st == cudaStreamCaptureStatusActive);
  CHECK(building != nullptr);
  CHECK(ndeps == 1);  // the next node depends on the memset
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s, &graph));
  REQUIRE(graph != nullptr);
  CHECK(capture_status(s) == cudaStreamCaptureStatusNone);
  std::vector<unsigned char> out(bytes);
  ok(cudaMemcpy(out.data(), dev, bytes, cudaMemcpyDeviceToHost));
  CHECK(all_bytes(out.data(), bytes, 1));  // "operations ... will not be executed" while captured
  cudaGraphExec_t exec = instantiate(graph);
  ok(cudaGraphLaunch(exec, s));
  ok(cudaStreamSynchronize(s));
  ok(cudaMemcpy(out.data(), dev, bytes, cudaMemcpyDeviceToHost));
  CHECK(all_bytes(out.data(), bytes, 2));
  ok(cudaGraphExecDestroy(exec));
  // id_out: "an id for the capture sequence, which is unique over the lifetime of the process".
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  unsigned long long id2 = 0;
  ok(cudaStreamGetCaptureInfo(s, &st, &id2));
  CHECK(id2 != id1);
  ok(cudaStreamEndCapture(s, &graph));
  ok(cudaGraphDestroy(graph));
  // "Capture may not be initiated if stream is cudaStreamLegacy"; ending a capture never begun.
  CHECK(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorIllegalState);
  (void)cudaGetLastError();
}

TEST_CASE("capture: a pinned H2D, D2D, memset, D2H and host function graph replays 100 launches", "[sim][capture]") {
  ok(cudaSetDevice(0));
  constexpr std::size_t n = bytes / sizeof(std::uint32_t);
  auto s = scoped_stream();
  auto a = scoped_device_memory(bytes);
  auto b = scoped_device_memory(bytes);
  auto* in = static_cast<std::uint32_t*>(pinned_host(bytes, 0));
  auto* out = static_cast<std::uint32_t*>(pinned_host(bytes, 0));
  std::atomic<int> calls{0};
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ok(cudaMemcpyAsync(a, in, bytes, cudaMemcpyHostToDevice, s));
  ok(cudaMemcpyAsync(b, a, bytes / 2, cudaMemcpyDeviceToDevice, s));
  ok(cudaMemsetAsync(static_cast<unsigned char*>(b.get()) + bytes / 2, 0x11, bytes / 2, s));
  ok(cudaMemcpyAsync(out, b, bytes, cudaMemcpyDeviceToHost, s));
  ok(cudaLaunchHostFunc(s, count_call, &calls));
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s, &graph));
  CHECK(calls.load() == 0);
  cudaGraphExec_t exec = instantiate(graph);
  // The pinned input is read at each launch, not at the capture: each launch sees what the host
  // wrote before it.
  for (std::uint32_t k = 0; k < 100; ++k) {
    for (std::size_t i = 0; i < n; ++i) in[i] = k * 100'000 + static_cast<std::uint32_t>(i);
    ok(cudaGraphLaunch(exec, s));
    ok(cudaStreamSynchronize(s));
    bool right = true;
    for (std::size_t i = 0; i < n / 2; ++i) right = right && out[i] == k * 100'000 + i;
    CHECK(right);
    CHECK(all_bytes(out + n / 2, bytes / 2, 0x11));
    CHECK(calls.load() == static_cast<int>(k) + 1);
  }
  ok(cudaGraphExecDestroy(exec));
  ok(cudaFreeHost(in));
  ok(cudaFreeHost(out));
}

TEST_CASE("capture: graph memory nodes keep their address over launches", "[sim][capture]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto* out = static_cast<unsigned char*>(pinned_host(bytes, 0));
  void* scratch = nullptr;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ok(cudaMallocAsync(&scratch, bytes, s));
  REQUIRE(scratch != nullptr);
  ok(cudaMemsetAsync(scratch, 7, bytes, s));  // the captured copies pass the range checks
  ok(cudaMemcpyAsync(out, scratch, bytes, cudaMemcpyDeviceToHost, s));
  ok(cudaFreeAsync(scratch, s));
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  ok(cudaGraphInstantiate(&exec, graph, 0));
  // "If graph contains any allocation or free nodes, there can be at most one executable graph
  // in existence for that graph at a time" (cudaGraphInstantiate).
  cudaGraphExec_t second = nullptr;
  CHECK(cudaGraphInstantiate(&second, graph, 0) != cudaSuccess);
  (void)cudaGetLastError();
  ok(cudaGraphDestroy(graph));
  for (int k = 0; k < 3; ++k) {
    std::memset(out, 0, bytes);
    ok(cudaGraphLaunch(exec, s));
    ok(cudaStreamSynchronize(s));
    CHECK(all_bytes(out, bytes, 7));
  }
  ok(cudaGraphExecDestroy(exec));
  ok(cudaFreeHost(out));
}

TEST_CASE("capture: graph memory is poisoned at each launch and returned when graph and exec are gone",
          "[sim][capture][sim_only]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto* out = static_cast<unsigned char*>(pinned_host(bytes, 0));
  const std::size_t before = sim::device_bytes_in_use(0);
  const std::size_t graphs_before = sim::graphs_alive();
  const std::size_t launches_before = sim::graph_launches();
  void* scratch = nullptr;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ok(cudaMallocAsync(&scratch, bytes, s));
  ok(cudaMemcpyAsync(out, scratch, bytes, cudaMemcpyDeviceToHost, s));  // read before written
  ok(cudaMemsetAsync(scratch, 3, bytes, s));
  ok(cudaFreeAsync(scratch, s));
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s, &graph));
  // Counted from the capture on (CUDA reserves it at the first launch: the simulator is earlier).
  CHECK(sim::device_bytes_in_use(0) == before + bytes);
  cudaGraphExec_t exec = instantiate(graph);
  CHECK(sim::graphs_alive() == graphs_before + 1);
  for (int k = 0; k < 2; ++k) {  // the 3s of the previous launch are gone: fresh memory again
    ok(cudaGraphLaunch(exec, s));
    ok(cudaStreamSynchronize(s));
    CHECK(all_bytes(out, bytes, 0xA5));
  }
  CHECK(sim::graph_launches() == launches_before + 2);
  ok(cudaGraphExecDestroy(exec));
  CHECK(sim::device_bytes_in_use(0) == before);
  CHECK(sim::graphs_alive() == graphs_before);

  // Without a free node a relaunch needs cudaGraphInstantiateFlagAutoFreeOnLaunch: "If any
  // allocations created by graphExec remain unfreed ... the launch will fail with
  // cudaErrorInvalidValue" (cudaGraphLaunch).
  for (const unsigned long long flags :
       {0ull, static_cast<unsigned long long>(cudaGraphInstantiateFlagAutoFreeOnLaunch)}) {
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ok(cudaMallocAsync(&scratch, bytes, s));
    ok(cudaMemsetAsync(scratch, 3, bytes, s));
    ok(cudaStreamEndCapture(s, &graph));
    exec = instantiate(graph, flags);
    ok(cudaGraphLaunch(exec, s));
    CHECK(cudaGraphLaunch(exec, s) == (flags == 0 ? cudaErrorInvalidValue : cudaSuccess));
    ok(cudaStreamSynchronize(s));
    // Graph memory is its graph's here: freeing it outside the graph is refused.
    CHECK(cudaFreeAsync(scratch, s) == cudaErrorNotSupported);
    ok(cudaGraphExecDestroy(exec));
    CHECK(sim::device_bytes_in_use(0) == before);
  }
  // A free node for memory the sequence did not allocate: not supported by the simulator.
  auto dev = scoped_device_memory(bytes);
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaFreeAsync(dev, s) == cudaErrorNotSupported);
  ok(cudaStreamEndCapture(s, &graph));
  ok(cudaGraphDestroy(graph));
  ok(cudaFreeHost(out));
  (void)cudaGetLastError();
}

TEST_CASE("capture: fork and join across two streams with events; an unjoined fork fails", "[sim][capture]") {
  ok(cudaSetDevice(0));
  auto s1 = scoped_stream();
  auto s2 = scoped_stream();
  auto fork = scoped_event(cudaEventDisableTiming);
  auto join = scoped_event(cudaEventDisableTiming);
  auto a = scoped_device_memory(bytes);
  auto b = scoped_device_memory(bytes);
  auto* out = static_cast<unsigned char*>(pinned_host(2 * bytes, 0));
  ok(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  ok(cudaEventRecord(fork, s1));
  ok(cudaStreamWaitEvent(s2, fork, 0));  // s2 joins the sequence
  CHECK(capture_status(s2) == cudaStreamCaptureStatusActive);
  ok(cudaMemsetAsync(a, 4, bytes, s1));
  ok(cudaMemsetAsync(b, 5, bytes, s2));
  ok(cudaEventRecord(join, s2));
  ok(cudaStreamWaitEvent(s1, join, 0));
  ok(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToHost, s1));
  ok(cudaMemcpyAsync(out + bytes, b, bytes, cudaMemcpyDeviceToHost, s1));
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s1, &graph));
  CHECK(capture_status(s2) == cudaStreamCaptureStatusNone);  // every stream leaves capture
  cudaGraphExec_t exec = instantiate(graph);
  for (int k = 0; k < 3; ++k) {
    std::memset(out, 0, 2 * bytes);
    ok(cudaGraphLaunch(exec, s2));  // any stream may launch it
    ok(cudaStreamSynchronize(s2));
    CHECK(all_bytes(out, bytes, 4));
    CHECK(all_bytes(out + bytes, bytes, 5));
  }
  ok(cudaGraphExecDestroy(exec));

  // "Failure to rejoin to the origin stream will result in failure of the overall capture".
  ok(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  ok(cudaEventRecord(fork, s1));
  ok(cudaStreamWaitEvent(s2, fork, 0));
  ok(cudaMemsetAsync(b, 5, bytes, s2));
  graph = reinterpret_cast<cudaGraph_t>(&graph);
  CHECK(cudaStreamEndCapture(s1, &graph) == cudaErrorStreamCaptureUnjoined);
  CHECK(graph == nullptr);
  CHECK(capture_status(s1) == cudaStreamCaptureStatusNone);
  CHECK(capture_status(s2) == cudaStreamCaptureStatusNone);
  ok(cudaFreeHost(out));
  (void)cudaGetLastError();
}

TEST_CASE("capture: cross-stream rules: wrong stream, merge, isolation and external waits", "[sim][capture]") {
  ok(cudaSetDevice(0));
  auto s1 = scoped_stream();
  auto s2 = scoped_stream();
  auto ev = scoped_event(cudaEventDisableTiming);
  auto dev = scoped_device_memory(bytes);
  cudaGraph_t graph = nullptr;
  SECTION("cudaStreamEndCapture on a forked stream: cudaErrorStreamCaptureUnmatched") {
    ok(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    ok(cudaEventRecord(ev, s1));
    ok(cudaStreamWaitEvent(s2, ev, 0));
    CHECK(cudaStreamEndCapture(s2, &graph) == cudaErrorStreamCaptureUnmatched);
    expect_invalidated(s1, dev);
    CHECK(capture_status(s2) == cudaStreamCaptureStatusNone);
  }
  SECTION("cudaStreamEndCapture from another thread: cudaErrorStreamCaptureWrongThread") {
    // "If the mode argument to cudaStreamBeginCapture was not cudaStreamCaptureModeRelaxed, this
    // call must be from the same thread as cudaStreamBeginCapture".
    ok(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    cudaError_t other = cudaSuccess;
    std::thread([&] {
      (void)cudaSetDevice(0);
      other = cudaStreamEndCapture(s1, &graph);
      (void)cudaGetLastError();
    }).join();
    CHECK(other == cudaErrorStreamCaptureWrongThread);
    // As an H200 answered: that call ended the capture, so the right thread has none to end.
    CHECK(capture_status(s1) == cudaStreamCaptureStatusNone);
    CHECK(cudaStreamEndCapture(s1, &graph) == cudaErrorIllegalState);
    (void)cudaGetLastError();
    // A relaxed capture may end on any thread.
    ok(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
    ok(cudaMemsetAsync(dev, 1, bytes, s1));
    std::thread([&] {
      (void)cudaSetDevice(0);
      other = cudaStreamEndCapture(s1, &graph);
    }).join();
    REQUIRE(other == cudaSuccess);
    ok(cudaGraphDestroy(graph));
  }
  SECTION("waiting on another sequence's captured event: cudaErrorStreamCaptureMerge") {
    ok(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    ok(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
    ok(cudaEventRecord(ev, s2));
    CHECK(cudaStreamWaitEvent(s1, ev, 0) == cudaErrorStreamCaptureMerge);
    expect_invalidated(s1, dev);
    expect_invalidated(s2, dev);
  }
  SECTION("waiting on a non-captured event without cudaEventWaitExternal: cudaErrorStreamCaptureIsolation") {
    ok(cudaEventRecord(ev, s2));
    ok(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamWaitEvent(s1, ev, 0) == cudaErrorStreamCaptureIsolation);
    expect_invalidated(s1, dev);
  }
  SECTION("with cudaEventWaitExternal each launch waits for the event's record") {
    gate g;
    ok(cudaLaunchHostFunc(s2, gate::hold, &g));
    ok(cudaEventRecord(ev, s2));
    ok(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    ok(cudaStreamWaitEvent(s1, ev, cudaEventWaitExternal));
    ok(cudaMemsetAsync(dev, 9, bytes, s1));
    ok(cudaStreamEndCapture(s1, &graph));
    cudaGraphExec_t exec = instantiate(graph);
    ok(cudaGraphLaunch(exec, s1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(cudaStreamQuery(s1) == cudaErrorNotReady);  // held behind s2's gate
    g.open = true;
    ok(cudaStreamSynchronize(s1));
    ok(cudaGraphExecDestroy(exec));
  }
  (void)cudaGetLastError();
}

TEST_CASE("capture: prohibited calls return their error and invalidate the capture", "[sim][capture]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto dev = scoped_device_memory(bytes);
  SECTION("cudaStreamSynchronize and cudaStreamQuery on a capturing stream: cudaErrorStreamCaptureUnsupported") {
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, dev);
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamQuery(s) == cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, dev);
  }
  SECTION("cudaEventQuery and cudaEventSynchronize on a captured event: cudaErrorCapturedEvent") {
    auto ev = scoped_event(cudaEventDisableTiming);
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ok(cudaEventRecord(ev, s));
    CHECK(cudaEventQuery(ev) == cudaErrorCapturedEvent);
    expect_invalidated(s, dev);
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ok(cudaEventRecord(ev, s));
    CHECK(cudaEventSynchronize(ev) == cudaErrorCapturedEvent);
    expect_invalidated(s, dev);
  }
  SECTION("cudaDeviceSynchronize while a stream of the device captures: cudaErrorStreamCaptureUnsupported") {
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, dev);
  }
  SECTION("the legacy stream while a blocking stream captures: cudaErrorStreamCaptureImplicit") {
    auto blocking = scoped_stream(cudaStreamDefault);
    std::vector<unsigned char> host(bytes);
    ok(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus st{};
    // cudaStreamIsCapturing: "The blocking stream capture is not invalidated".
    CHECK(cudaStreamIsCapturing(cudaStreamLegacy, &st) == cudaErrorStreamCaptureImplicit);
    CHECK(capture_status(blocking) == cudaStreamCaptureStatusActive);
    CHECK(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureImplicit);
    expect_invalidated(blocking, dev);
    ok(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemset(dev, 0, bytes) == cudaErrorStreamCaptureImplicit);
    expect_invalidated(blocking, dev);
    // A non-blocking stream's capture leaves the legacy stream usable.
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ok(cudaMemset(dev, 0, bytes));
    cudaGraph_t graph = nullptr;
    ok(cudaStreamEndCapture(s, &graph));
    ok(cudaGraphDestroy(graph));
  }
  SECTION("cudaMalloc and cudaMallocHost from the capturing thread: cudaErrorStreamCaptureUnsupported") {
    void* p = nullptr;
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMalloc(&p, bytes) == cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, dev);
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK(cudaMallocHost(&p, bytes) == cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, dev);
  }
  ok(cudaDeviceSynchronize());
  (void)cudaGetLastError();
}

// The errors of the capture rules by their cudaError_t names (driver_types.h) and the texts of
// the runtime's cudaGetErrorString, which a message built from them (devicekit's cuda_error)
// shows; a code the runtime does not know reads "unrecognized error code" (cudaGetErrorName).
TEST_CASE("capture: the capture errors have the runtime's names and texts", "[sim][capture]") {
  struct named {
    cudaError_t code;
    const char* name;
    const char* text;
  };
  const named errors[] = {
      {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
      {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
       "operation not permitted when stream is capturing"},
      {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
       "operation failed due to a previous error during capture"},
      {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge",
       "operation would result in a merge of separate capture sequences"},
      {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
       "capture was not ended in the same stream as it began"},
      {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
      {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
       "dependency created on uncaptured work in another stream"},
      {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
       "operation would make the legacy stream depend on a capturing blocking stream"},
      {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
       "operation not permitted on an event last recorded in a capturing stream"},
      {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
       "attempt to terminate a thread-local capture sequence from another thread"},
  };
  for (const named& e : errors) {
    CHECK(std::string(cudaGetErrorName(e.code)) == e.name);
    CHECK(std::string(cudaGetErrorString(e.code)) == e.text);
  }
  CHECK(std::string(cudaGetErrorName(static_cast<cudaError_t>(12345))) == "unrecognized error code");
  CHECK(std::string(cudaGetErrorString(static_cast<cudaError_t>(12345))) == "unrecognized error code");
}

TEST_CASE("capture: cudaMemcpyBatchAsync cannot be captured", "[sim][capture][sim_only]") {
#if CUDART_VERSION >= 13000
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto dev = scoped_device_memory(bytes);
  auto src = scoped_device_memory(bytes);
  void* dsts[] = {dev.get()};
  const void* srcs[] = {src.get()};
  std::size_t sizes[] = {bytes};
  cudaMemcpyAttributes attrs{};
  attrs.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t idx[] = {0};
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attrs, idx, 1, s) == cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s, dev);
#endif
}

TEST_CASE("capture: interaction modes decide which threads may call cudaMalloc", "[sim][capture]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto dev = scoped_device_memory(bytes);
  // cudaMalloc from another thread in `mode`: its result (the memory is freed once captures end).
  std::vector<void*> made;
  auto from_other_thread = [&](cudaStreamCaptureMode mode) {
    cudaError_t result = cudaSuccess;
    std::thread t([&] {
      (void)cudaSetDevice(0);
      cudaStreamCaptureMode m = mode;
      (void)cudaThreadExchangeStreamCaptureMode(&m);
      void* p = nullptr;
      result = cudaMalloc(&p, 256);
      if (result == cudaSuccess) made.push_back(p);
      (void)cudaGetLastError();
    });
    t.join();
    return result;
  };
  auto end_ok = [&] {
    cudaGraph_t graph = nullptr;
    ok(cudaStreamEndCapture(s, &graph));
    ok(cudaGraphDestroy(graph));
  };
  SECTION("a global capture prohibits another thread in global mode, not in thread-local or relaxed mode") {
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(from_other_thread(cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(from_other_thread(cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(capture_status(s) == cudaStreamCaptureStatusActive);
    CHECK(from_other_thread(cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, dev);
  }
  SECTION("a thread-local capture leaves other threads alone, not its own") {
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK(from_other_thread(cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 256) == cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, dev);
  }
  SECTION("a relaxed capture prohibits nobody") {
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK(from_other_thread(cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 256) == cudaSuccess);
    made.push_back(p);
    end_ok();
  }
  SECTION("the capturing thread in relaxed mode may allocate during its global capture") {
    ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    ok(cudaThreadExchangeStreamCaptureMode(&m));
    CHECK(m == cudaStreamCaptureModeGlobal);  // the previous mode comes back
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 256) == cudaSuccess);
    made.push_back(p);
    ok(cudaThreadExchangeStreamCaptureMode(&m));
    end_ok();
  }
  for (void* p : made) ok(cudaFree(p));
  (void)cudaGetLastError();
}

TEST_CASE("capture: an executable graph destroyed while launched completes the launch", "[sim][capture]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto dev = scoped_device_memory(bytes);
  auto* out = static_cast<unsigned char*>(pinned_host(bytes, 0));
  gate g;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaMemsetAsync(dev, 6, bytes, s));
  ok(cudaMemcpyAsync(out, dev, bytes, cudaMemcpyDeviceToHost, s));
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = instantiate(graph);
  ok(cudaGraphLaunch(exec, s));
  ok(cudaGraphExecDestroy(exec));  // "it will not be terminated, but rather freed ... on completion"
  g.open = true;
  ok(cudaStreamSynchronize(s));
  CHECK(all_bytes(out, bytes, 6));
  ok(cudaFreeHost(out));
}

TEST_CASE("capture: graph memory of an exec destroyed in flight is returned when the launch ends",
          "[sim][capture][sim_only]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  const std::size_t before = sim::device_bytes_in_use(0);
  gate g;
  void* scratch = nullptr;
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaMallocAsync(&scratch, bytes, s));
  ok(cudaMemsetAsync(scratch, 6, bytes, s));
  ok(cudaFreeAsync(scratch, s));
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = instantiate(graph);
  ok(cudaGraphLaunch(exec, s));
  ok(cudaGraphExecDestroy(exec));
  CHECK(sim::device_bytes_in_use(0) == before + bytes);  // the launch still holds it
  g.open = true;
  ok(cudaStreamSynchronize(s));
  CHECK(sim::device_bytes_in_use(0) == before);
}

TEST_CASE("capture: the race detector checks each launch against eager work", "[sim][capture][sim_only]") {
  if (detector_off()) return;
  ok(cudaSetDevice(0));
  auto a = scoped_stream();
  auto b = scoped_stream();
  auto ev = scoped_event(cudaEventDisableTiming);
  auto dev = scoped_device_memory(bytes);
  ok(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal));
  ok(cudaMemsetAsync(dev, 1, bytes, a));
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(a, &graph));
  cudaGraphExec_t exec = instantiate(graph);
  const std::size_t races = sim::races_detected();
  // Ordered: b's memset, then the launch after an event.
  ok(cudaMemsetAsync(dev, 2, bytes, b));
  ok(cudaEventRecord(ev, b));
  ok(cudaStreamWaitEvent(a, ev, 0));
  ok(cudaGraphLaunch(exec, a));
  CHECK(sim::races_detected() == races);
  ok(cudaDeviceSynchronize());
  // Not ordered: the replay on a writes what b's memset writes, and nothing orders the two.
  sim::expect_violations(1);
  ok(cudaMemsetAsync(dev, 3, bytes, b));
  ok(cudaGraphLaunch(exec, a));
  CHECK(sim::races_detected() == races + 1);
  ok(cudaDeviceSynchronize());
  ok(cudaGraphExecDestroy(exec));
}

TEST_CASE("capture: a captured copy reads and writes pageable host memory at each launch", "[sim][capture][sim_only]") {
  // The simulator's choice for a copy CUDA would stage at the call (sim/README.md): a memcpy node
  // reads its source when it runs. Real graphs take device and pinned memory only.
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto dev = scoped_device_memory(bytes);
  std::vector<unsigned char> in(bytes, 1);
  std::vector<unsigned char> out(bytes, 0);
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  ok(cudaMemcpyAsync(dev, in.data(), bytes, cudaMemcpyHostToDevice, s));
  ok(cudaMemcpyAsync(out.data(), dev, bytes, cudaMemcpyDeviceToHost, s));  // does not wait while captured
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s, &graph));
  std::memset(in.data(), 2, bytes);  // after the capture: the launch sees it
  cudaGraphExec_t exec = instantiate(graph);
  ok(cudaGraphLaunch(exec, s));
  ok(cudaStreamSynchronize(s));
  CHECK(all_bytes(out.data(), bytes, 2));
  ok(cudaGraphExecDestroy(exec));
}

TEST_CASE("capture: graph handles, instantiate flags and the legacy stream's capture info",
          "[sim][capture][sim_only]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto blocking = scoped_stream(cudaStreamDefault);
  const std::size_t alive = sim::graphs_alive();
  cudaGraph_t empty = nullptr;
  ok(cudaGraphCreate(&empty, 0));
  CHECK(sim::graphs_alive() == alive + 1);
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiateWithFlags(&exec, empty, 1ull << 40) == cudaErrorInvalidValue);
  ok(cudaGraphInstantiateWithFlags(&exec, empty, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  ok(cudaGraphLaunch(exec, s));  // an empty graph launches and completes
  ok(cudaStreamSynchronize(s));
  // A launch into a capturing stream (a child graph node in CUDA) is refused here.
  ok(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaGraphLaunch(exec, s) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t building = nullptr;
  cudaStreamCaptureStatus st{};
  ok(cudaStreamGetCaptureInfo(s, &st, nullptr, &building));
  CHECK(cudaGraphDestroy(building) == cudaErrorIllegalState);  // owned by the capture until it ends
  cudaGraph_t graph = nullptr;
  ok(cudaStreamEndCapture(s, &graph));
  CHECK(graph == building);
  ok(cudaGraphDestroy(graph));
  // cudaStreamGetCaptureInfo on the legacy stream while a blocking stream captures.
  ok(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamGetCaptureInfo(cudaStreamLegacy, &st) == cudaErrorStreamCaptureImplicit);
  ok(cudaStreamEndCapture(blocking, &graph));  // not invalidated by the query
  ok(cudaGraphDestroy(graph));
  ok(cudaGraphExecDestroy(exec));
  ok(cudaGraphDestroy(empty));
  CHECK(sim::graphs_alive() == alive);
  std::uint64_t used = 1;
  ok(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  CHECK(used == 0);
  ok(cudaDeviceGraphMemTrim(0));
  (void)cudaGetLastError();
}

#if DEVICEKIT_CUDA_SIM_NCCL
TEST_CASE("capture: captured NCCL all-reduces meet their peers' at every launch", "[sim][capture][sim_only][multi]") {
  int n = 0;
  ok(cudaGetDeviceCount(&n));
  if (n < 2) return;
  constexpr std::size_t count = 256;
  const int devs[2] = {0, 1};
  ncclComm_t comms[2] = {};
  REQUIRE(ncclCommInitAll(comms, 2, devs) == ncclSuccess);
  cudaStream_t streams[2] = {};
  float* buf[2] = {};
  float* host[2] = {};
  cudaGraphExec_t execs[2] = {};
  for (int r = 0; r < 2; ++r) {
    ok(cudaSetDevice(r));
    ok(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    ok(cudaMalloc(reinterpret_cast<void**>(&buf[r]), count * sizeof(float)));
    ok(cudaMallocHost(reinterpret_cast<void**>(&host[r]), count * sizeof(float)));
  }
  // Each rank's graph: its input up, an all-reduce in place, the result down.
  for (int r = 0; r < 2; ++r) {
    ok(cudaSetDevice(r));
    ok(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeGlobal));
    ok(cudaMemcpyAsync(buf[r], host[r], count * sizeof(float), cudaMemcpyHostToDevice, streams[r]));
    REQUIRE(ncclAllReduce(buf[r], buf[r], count, ncclFloat, ncclSum, comms[r], streams[r]) == ncclSuccess);
    ok(cudaMemcpyAsync(host[r], buf[r], count * sizeof(float), cudaMemcpyDeviceToHost, streams[r]));
    cudaGraph_t graph = nullptr;
    ok(cudaStreamEndCapture(streams[r], &graph));
    execs[r] = instantiate(graph);
  }
  for (int k = 0; k < 5; ++k) {
    for (int r = 0; r < 2; ++r) {
      for (std::size_t i = 0; i < count; ++i) host[r][i] = static_cast<float>(k + 10 * r);
    }
    for (int r = 0; r < 2; ++r) ok(cudaGraphLaunch(execs[r], streams[r]));
    // An eager all-reduce between launches keeps its own rendezvous.
    for (int r = 0; r < 2; ++r) {
      REQUIRE(ncclAllReduce(buf[r], buf[r], count, ncclFloat, ncclSum, comms[r], streams[r]) == ncclSuccess);
    }
    for (int r = 0; r < 2; ++r) ok(cudaStreamSynchronize(streams[r]));
    for (int r = 0; r < 2; ++r) CHECK(host[r][count - 1] == static_cast<float>(2 * k + 10));
  }
  for (int r = 0; r < 2; ++r) {
    ok(cudaGraphExecDestroy(execs[r]));
    ok(cudaStreamDestroy(streams[r]));
    ok(cudaFree(buf[r]));
    ok(cudaFreeHost(host[r]));
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }
  ok(cudaSetDevice(0));
}
#endif
