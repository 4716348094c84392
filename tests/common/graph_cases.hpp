// devicekit inside CUDA graph capture, one body per backend with CUDA (the simulator and a GPU;
// tests/common/cases.hpp says how a backend includes them): a step captured once and replayed
// (pool allocation as graph memory nodes, placement from pinned memory, copies, zeros_like),
// graphs sharing a pool, a capture forked across streams, out of memory inside a capture, the
// refusals, a graph destroyed with a launch queued, and the plain route.
#pragma once

#include <catch2/catch.hpp>

#include <devicekit/compute/zeros_like.hpp>
#include <devicekit/devicekit.hpp>

#include "../sim/sim_test_support.hpp"
#include "cases.hpp"
#include "pools.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace dk = devicekit;

namespace graph_cases {

/// `n` floats of pinned host memory belonging to `gpu` (memory_kind::pinned_host), all `v`.
inline auto pinned_floats(dk::device gpu, std::size_t n, float v) {
  return dk::place(std::vector<float>(n, v), gpu, dk::memory_kind::pinned_host);
}

/// The step the replay cases capture: `input` (pinned) onto the device, a zeroed buffer of the
/// same shape, the data copied into it and from there into `output` (pinned). Both device trees
/// are made and dropped inside the step: graph memory, allocated and freed by the graph.
template <class In, class Out>
void copy_through_device(const In& input, Out& output, dk::device gpu, dk::stream_ref s) {
  auto on_device = dk::place(input, gpu, s);
  auto scratch = dk::zeros_like(on_device, gpu, s);
  dk::copy(on_device, scratch, s);
  dk::copy(scratch, output, s);
}

inline void fill(float* p, std::size_t n, float base) {
  for (std::size_t k = 0; k < n; ++k) p[k] = base + static_cast<float>(k);
}

inline bool holds(const float* p, std::size_t n, float base) {
  for (std::size_t k = 0; k < n; ++k) {
    if (p[k] != base + static_cast<float>(k)) return false;
  }
  return true;
}

}  // namespace graph_cases

TEST_CASE(DEVICEKIT_CASE_NAME("a captured step that allocates, copies and frees replays 100 times with fresh data"),
          DEVICEKIT_CASE_TAGS("[graph]")) {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  constexpr std::size_t n = 4096;
  auto input = graph_cases::pinned_floats(gpu, n, 0.f);
  auto output = graph_cases::pinned_floats(gpu, n, -1.f);
  dk::device_memory& pool = dk::default_placement_resource(gpu);
  const std::size_t graph_bytes_before = pool.stats().graph_bytes;

  dk::graph g = dk::capture(s, [&] { graph_cases::copy_through_device(input, output, gpu, s); });
  CHECK(output.data()[0] == -1.f);  // captured, not run
  // Two device buffers of n floats at once: the graph's memory, counted by the pool.
  CHECK(g.memory_bytes() >= 2 * n * sizeof(float));
  CHECK(pool.stats().graph_bytes == graph_bytes_before + g.memory_bytes());
  const dk::pool_stats after_capture = pool.stats();

  for (int i = 0; i < 100; ++i) {
    graph_cases::fill(input.data(), n, static_cast<float>(i * 10'000));
    g.launch(s);
    s.synchronize();
    REQUIRE(graph_cases::holds(output.data(), n, static_cast<float>(i * 10'000)));
  }
  CHECK(g.launches() == 100);
  // Replays allocate nothing from the pool: the graph's memory nodes are CUDA's.
  CHECK(pool.stats().allocation_count == after_capture.allocation_count);
  CHECK(pool.stats().upstream_allocations == after_capture.upstream_allocations);
  g = dk::graph();
  CHECK(pool.stats().graph_bytes == graph_bytes_before);
  pool.check_consistency();
}

TEST_CASE(DEVICEKIT_CASE_NAME("two graphs share a pool: each counts its memory until it is destroyed"),
          DEVICEKIT_CASE_TAGS("[graph]")) {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  dk::device_memory& pool = dk::default_placement_resource(gpu);
  const std::size_t base = pool.stats().graph_bytes;
  auto in_a = graph_cases::pinned_floats(gpu, 1000, 1.f);
  auto in_b = graph_cases::pinned_floats(gpu, 3000, 2.f);
  auto out_a = graph_cases::pinned_floats(gpu, 1000, 0.f);
  auto out_b = graph_cases::pinned_floats(gpu, 3000, 0.f);
  auto a = std::make_optional(dk::capture(s, [&] { graph_cases::copy_through_device(in_a, out_a, gpu, s); }));
  dk::graph b = dk::capture(s, [&] { graph_cases::copy_through_device(in_b, out_b, gpu, s); });
  CHECK(a->memory_bytes() > 0);
  CHECK(b.memory_bytes() > a->memory_bytes());
  CHECK(pool.stats().graph_bytes == base + a->memory_bytes() + b.memory_bytes());
  for (int i = 0; i < 10; ++i) {
    graph_cases::fill(in_a.data(), 1000, static_cast<float>(i));
    graph_cases::fill(in_b.data(), 3000, static_cast<float>(-i));
    a->launch(s);
    b.launch(s);
    s.synchronize();
    REQUIRE(graph_cases::holds(out_a.data(), 1000, static_cast<float>(i)));
    REQUIRE(graph_cases::holds(out_b.data(), 3000, static_cast<float>(-i)));
  }
  a.reset();
  CHECK(pool.stats().graph_bytes == base + b.memory_bytes());
  b.launch(s);
  s.synchronize();
  CHECK(graph_cases::holds(out_b.data(), 3000, -9.f));
}

TEST_CASE(DEVICEKIT_CASE_NAME("a capture forked onto a second stream and joined by events replays in order"),
          DEVICEKIT_CASE_TAGS("[graph]")) {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream main_stream(gpu);
  const dk::stream side(gpu);
  constexpr std::size_t n = 2048;
  auto input = graph_cases::pinned_floats(gpu, n, 0.f);
  auto output = graph_cases::pinned_floats(gpu, n, 0.f);
  auto middle = dk::place(std::vector<float>(n, 0.f), gpu);  // device memory made before the capture
  cudaEvent_t forked = nullptr;
  cudaEvent_t joined = nullptr;
  {
    const dk::scoped_device on(gpu.ordinal());  // an event belongs to the device current at its creation
    REQUIRE(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming) == cudaSuccess);
  }
  dk::graph g = dk::capture(main_stream, [&] {
    dk::copy(input, middle, main_stream);
    REQUIRE(cudaEventRecord(forked, main_stream.native_handle()) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(side.native_handle(), forked, 0) == cudaSuccess);  // side joins the capture
    CHECK(dk::capture_of(side).active);
    CHECK(dk::capture_of(side).id == dk::capture_of(main_stream).id);
    dk::copy(middle, output, side);
    REQUIRE(cudaEventRecord(joined, side.native_handle()) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(main_stream.native_handle(), joined, 0) == cudaSuccess);  // and is joined back
  });
  CHECK_FALSE(dk::capture_of(side).active);
  for (int i = 0; i < 20; ++i) {
    graph_cases::fill(input.data(), n, static_cast<float>(100 * i));
    g.launch(main_stream);
    main_stream.synchronize();
    REQUIRE(graph_cases::holds(output.data(), n, static_cast<float>(100 * i)));
  }
  CHECK(cudaEventDestroy(forked) == cudaSuccess);
  CHECK(cudaEventDestroy(joined) == cudaSuccess);
}

TEST_CASE(DEVICEKIT_CASE_NAME("out of memory inside a capture ends it cleanly and leaves the pool intact"),
          DEVICEKIT_CASE_TAGS("[graph]")) {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(gpu.ordinal()), dk::testing::small_pool()};
  void* eager = pool.allocate(std::size_t{8} << 20, s);
  void* fits = nullptr;
  std::string message;
  try {
    (void)dk::capture(s, [&] {
      fits = pool.allocate(std::size_t{16} << 20, s);
      void* too_much = pool.allocate(std::size_t{60} << 20, s);  // over the 64 MiB budget with the rest
      pool.deallocate(too_much, std::size_t{60} << 20, s);
      pool.deallocate(fits, std::size_t{16} << 20, s);
    });
    FAIL("no out_of_memory");
  } catch (const dk::out_of_memory& e) {
    message = e.what();
  }
  CHECK(message.find("inside a CUDA graph capture") != std::string::npos);
  CHECK(message.find("captured CUDA graphs hold") != std::string::npos);  // the step's first block
  CHECK_FALSE(dk::capture_of(s).active);                                  // the capture was ended
  CHECK(pool.stats().graph_bytes == 0);                                   // and its memory forgotten
  // The block the step made before it threw (and skipped its free) is the dead graph's: dropping
  // it later is accepted and touches no memory.
  REQUIRE(fits != nullptr);
  CHECK(pool.stats().graph_blocks == 1);
  pool.deallocate(fits, std::size_t{16} << 20, s);
  CHECK(pool.stats().graph_blocks == 0);
  pool.check_consistency();
  // The pool and the stream work on.
  void* again = pool.allocate(std::size_t{32} << 20, s);
  pool.deallocate(again, std::size_t{32} << 20, s);
  pool.deallocate(eager, std::size_t{8} << 20, s);
  s.synchronize();
  CHECK(pool.stats().allocated_bytes == 0);
}

TEST_CASE(DEVICEKIT_CASE_NAME("work that cannot be captured is refused, and the stream can be captured again"),
          DEVICEKIT_CASE_TAGS("[graph]")) {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  auto pinned_in = graph_cases::pinned_floats(gpu, 256, 3.f);
  auto pinned_out = graph_cases::pinned_floats(gpu, 256, 0.f);
  const std::size_t base = dk::default_placement_resource(gpu).stats().graph_bytes;
  const auto refused = [&](auto&& step, const char* says) {
    std::string message;
    try {
      (void)dk::capture(s, step);
    } catch (const dk::capture_error& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.find(says) != std::string::npos);
    CHECK_FALSE(dk::capture_of(s).active);
    CHECK(dk::default_placement_resource(gpu).stats().graph_bytes == base);
  };
  // A pageable source would be staged by the host at call time.
  refused([&] { (void)dk::place(std::vector<float>(256, 1.f), gpu, s); }, "pageable host memory");
  // to_host returns with the data: the host would wait for recorded work.
  auto on_device = dk::place(std::vector<float>(256, 1.f), gpu);
  refused([&] { (void)dk::to_host(on_device, s); }, "to_host");
  // Memory from before the capture, freed inside it, would still be used by every replay.
  dk::device_memory& pool = dk::default_placement_resource(gpu);
  void* before = pool.allocate(1024, s);
  refused([&] { pool.deallocate(before, 1024, s); }, "allocated before the capture");
  pool.deallocate(before, 1024, s);
  // A tree placed in the step and kept: graph memory exists only during a launch.
  std::optional<decltype(dk::place(pinned_in, gpu, s))> kept;
  refused([&] { kept.emplace(dk::place(pinned_in, gpu, s)); }, "still allocated at its end");
  CHECK(dk::default_placement_resource(gpu).stats().graph_blocks == 1);
  kept.reset();  // dropping it later is safe: the pool only forgets its record
  CHECK(dk::default_placement_resource(gpu).stats().graph_blocks == 0);
  // Captures do not nest, and the legacy default stream cannot be captured.
  refused([&] { (void)dk::capture(s, [] {}); }, "already being captured");
  CHECK_THROWS_AS(dk::capture(dk::stream_ref(gpu, nullptr), [] {}), dk::capture_error);
  // The runtime's own refusal: synchronising a capturing stream invalidates the capture; capture
  // reports it and ends the capture. The message names the call in the program's words.
  CHECK_THROWS_AS(dk::capture(s, [&] { s.synchronize(); }), dk::cuda_error);
  CHECK_THROWS_WITH(dk::capture(s, [&] { s.synchronize(); }),
                    Catch::Contains("cudaStreamSynchronize(stream) failed: ") && !Catch::Contains("handle_"));
  CHECK_FALSE(dk::capture_of(s).active);
  // After all of that the stream captures and replays.
  dk::graph g = dk::capture(s, [&] { graph_cases::copy_through_device(pinned_in, pinned_out, gpu, s); });
  g.launch(s);
  s.synchronize();
  CHECK(pinned_out.data()[255] == 3.f);
  dk::default_placement_resource(gpu).check_consistency();
}

TEST_CASE(DEVICEKIT_CASE_NAME("a graph destroyed with a launch queued completes it and leaves the budget"),
          DEVICEKIT_CASE_TAGS("[graph]")) {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  auto input = graph_cases::pinned_floats(gpu, 1024, 0.f);
  auto output = graph_cases::pinned_floats(gpu, 1024, 0.f);
  graph_cases::fill(input.data(), 1024, 7.f);
  dk::device_memory& pool = dk::default_placement_resource(gpu);
  const std::size_t base = pool.stats().graph_bytes;
  sim_test::gate hold;  // outlives the stream's wait on it (synchronised below)
  {
    dk::graph g = dk::capture(s, [&] { graph_cases::copy_through_device(input, output, gpu, s); });
    REQUIRE(cudaLaunchHostFunc(s.native_handle(), sim_test::gate::hold, &hold) == cudaSuccess);
    g.launch(s);
    hold.open = true;
  }  // destroyed here, perhaps before the launch ran: CUDA completes it first
  CHECK(pool.stats().graph_bytes == base);
  s.synchronize();
  CHECK(graph_cases::holds(output.data(), 1024, 7.f));
}

TEST_CASE(DEVICEKIT_CASE_NAME("the plain route: a capture of the program's own, adopted as a graph"),
          DEVICEKIT_CASE_TAGS("[graph]")) {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  auto input = graph_cases::pinned_floats(gpu, 512, 0.f);
  auto output = graph_cases::pinned_floats(gpu, 512, 0.f);
  dk::device_memory& pool = dk::default_placement_resource(gpu);
  const std::size_t base = pool.stats().graph_bytes;
  REQUIRE(cudaStreamBeginCapture(s.native_handle(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  graph_cases::copy_through_device(input, output, gpu, s);
  unsigned long long id = 0;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  REQUIRE(cudaStreamGetCaptureInfo(s.native_handle(), &status, &id) == cudaSuccess);
  cudaGraph_t captured = nullptr;
  REQUIRE(cudaStreamEndCapture(s.native_handle(), &captured) == cudaSuccess);
  CHECK(pool.stats().graph_bytes > base);  // counted from the capture on
  {
    dk::graph g = dk::graph::adopt(captured, id, gpu);
    CHECK(g.memory_bytes() == pool.stats().graph_bytes - base);
    graph_cases::fill(input.data(), 512, 42.f);
    g.launch(s);
    s.synchronize();
    CHECK(graph_cases::holds(output.data(), 512, 42.f));
  }
  CHECK(pool.stats().graph_bytes == base);
}

// capture_of asks the driver first (cuStreamIsCapturing) and the runtime only for a capture's id:
// its answer must be the runtime's in every state a program meets without an error.
TEST_CASE(DEVICEKIT_CASE_NAME("capture_of reports a capture's state and id as cudaStreamGetCaptureInfo does"),
          DEVICEKIT_CASE_TAGS("[graph]")) {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  const dk::stream side(gpu);
  const auto runtime_id = [](cudaStream_t h) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    REQUIRE(cudaStreamGetCaptureInfo(h, &status, &id) == cudaSuccess);
    return status == cudaStreamCaptureStatusActive ? id : 0ULL;
  };
  CHECK_FALSE(dk::capture_of(s).active);
  CHECK(dk::capture_of(s).id == 0);
  for (int round = 0; round < 2; ++round) {  // ids are never reused: the second capture has its own
    REQUIRE(cudaStreamBeginCapture(s.native_handle(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    const dk::capture_state c = dk::capture_of(s);
    CHECK(c.active);
    CHECK_FALSE(c.invalidated);
    CHECK(c.id != 0);
    CHECK(c.id == runtime_id(s.native_handle()));
    CHECK_FALSE(dk::capture_of(side).active);  // another stream of the device does not capture
    cudaGraph_t captured = nullptr;
    REQUIRE(cudaStreamEndCapture(s.native_handle(), &captured) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(captured) == cudaSuccess);
    CHECK_FALSE(dk::capture_of(s).active);
  }
  CHECK(cudaGetLastError() == cudaSuccess);
}
