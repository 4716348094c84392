// devicekit inside CUDA graph capture on simulated GPUs: the cases every backend with CUDA runs
// (tests/common/graph_cases.hpp) on the last simulated GPU, and what only the simulator observes:
// the copy planner's choice under capture. The simulator records captured work and replays it at
// each launch, as CUDA does (sim/README.md).
#include <catch2/catch.hpp>

#include <devicekit/transfer/detail/batch_api.hpp>

#include "sim_devicekit_support.hpp"

#define DEVICEKIT_CASES_BACKEND "sim"
#define DEVICEKIT_CASES_DEVICE() dk::device::cuda(devicekit::cuda_sim::device_count() - 1)
#include "../common/graph_cases.hpp"

#include <vector>

TEST_CASE("the copy planner never picks cudaMemcpyBatchAsync on a capturing stream", "[sim][graph]") {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  // Eight device leaves copied leaf by leaf: eagerly one cudaMemcpyBatchAsync (batch_api_min_count 4).
  const std::vector<std::vector<float>> host(8, std::vector<float>(512, 5.f));
  const auto src = dk::place(host, gpu);
  auto dst = dk::place(std::vector<std::vector<float>>(8, std::vector<float>(512, 0.f)), gpu);
  const auto eager_before = sim::copies().batch_calls;
  dk::copy(src, dst, s);
  s.synchronize();
  const bool eager_batched = sim::copies().batch_calls > eager_before;
  const auto captured_before = sim::copies().batch_calls;
  dk::graph g = dk::capture(s, [&] { dk::copy(src, dst, s); });
  CHECK(sim::copies().batch_calls == captured_before);
  g.launch(s);
  s.synchronize();
  CHECK(sim::copies().batch_calls == captured_before);
  CHECK(dk::to_host(dst) == host);
  // The eager copy did use the batch API where the runtime offers it: the check above can fail.
  if (dk::detail::batch_api_available(s.native_handle())) CHECK(eager_batched);
}

// A stream that does not capture is answered by the driver's cuStreamIsCapturing alone; a
// capturing one, an invalidated one, a default-stream handle and a failed driver query go to
// cudaStreamGetCaptureInfo, and no answer leaves a last error behind.
TEST_CASE("capture_of asks the driver first and the runtime only when the driver's answer is not 'none'",
          "[sim][graph]") {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::scoped_device on(gpu.ordinal());
  const dk::stream s(gpu);
  const cudaStream_t h = s.native_handle();
  (void)dk::capture_of(h);  // the driver's entry point is fetched once per process
  struct counts {
    std::size_t driver = sim::api_calls("cuStreamIsCapturing");
    std::size_t runtime = sim::api_calls("cudaStreamGetCaptureInfo");
  };
  const auto asked = [](const counts& before) {
    const counts now;
    return std::pair{now.driver - before.driver, now.runtime - before.runtime};
  };
  {
    const counts before;
    CHECK_FALSE(dk::capture_of(h).active);
    CHECK(asked(before) == std::pair<std::size_t, std::size_t>{1, 0});
  }
  {  // the driver fails: the runtime answers
    const counts before;
    sim::fail_call("cuStreamIsCapturing", 1, cudaErrorUnknown);
    CHECK_FALSE(dk::capture_of(h).active);
    CHECK(asked(before) == std::pair<std::size_t, std::size_t>{1, 1});
    CHECK(cudaGetLastError() == cudaSuccess);
  }
  {  // the legacy stream: the runtime decides what a default-stream handle names
    const counts before;
    CHECK_FALSE(dk::capture_of(cudaStreamLegacy).active);
    CHECK_FALSE(dk::capture_of(cudaStreamPerThread).active);
    CHECK_FALSE(dk::capture_of(dk::native_stream_handle{}).active);
    CHECK(asked(before) == std::pair<std::size_t, std::size_t>{0, 3});
  }
  REQUIRE(cudaStreamBeginCapture(h, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  {  // capturing: the driver says so, the runtime gives the id
    const counts before;
    const dk::capture_state c = dk::capture_of(h);
    CHECK(c.active);
    CHECK(c.id != 0);
    CHECK(asked(before) == std::pair<std::size_t, std::size_t>{1, 1});
  }
  {  // the legacy stream while a blocking stream captures: not capturing itself, no error left
    const dk::stream_ref blocking_legacy(gpu, cudaStreamLegacy);
    const sim_test::scoped<cudaStream_t> blocking = sim_test::scoped_stream(cudaStreamDefault);
    cudaGraph_t g = nullptr;
    REQUIRE(cudaStreamBeginCapture(blocking.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK_FALSE(dk::capture_of(blocking_legacy).active);
    CHECK(cudaGetLastError() == cudaSuccess);
    REQUIRE(cudaStreamEndCapture(blocking.get(), &g) == cudaSuccess);  // not invalidated by the query
    REQUIRE(cudaGraphDestroy(g) == cudaSuccess);
  }
  // A call that may not be captured invalidates the capture.
  CHECK(cudaStreamSynchronize(h) == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  {
    const counts before;
    const dk::capture_state c = dk::capture_of(h);
    CHECK_FALSE(c.active);
    CHECK(c.invalidated);
    CHECK(c.id == 0);
    CHECK(asked(before) == std::pair<std::size_t, std::size_t>{1, 1});
    CHECK(cudaGetLastError() == cudaSuccess);
  }
  cudaGraph_t none = nullptr;
  CHECK(cudaStreamEndCapture(h, &none) == cudaErrorStreamCaptureInvalidated);
  CHECK(none == nullptr);
  (void)cudaGetLastError();
  const counts before;
  CHECK_FALSE(dk::capture_of(h).active);
  CHECK(asked(before) == std::pair<std::size_t, std::size_t>{1, 0});
}

// A stream synchronised inside its own capture: CUDA refuses it (cudaStreamSynchronize, "Stream
// Capture" > "Prohibited and Unhandled Operations") and invalidates the capture; devicekit's error
// names the refusal and says what it means, and the stream is usable again afterwards.
TEST_CASE("a stream synchronised inside its capture is a cuda_error naming cudaErrorStreamCaptureUnsupported",
          "[sim][graph]") {
  const dk::device gpu = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(gpu);
  CHECK_THROWS_WITH((void)dk::capture(s, [&] { s.synchronize(); }),
                    Catch::Contains("cudaStreamSynchronize") &&
                        Catch::Contains("cudaErrorStreamCaptureUnsupported (900): operation not permitted when "
                                        "stream is capturing"));
  CHECK_FALSE(dk::capture_of(s.native_handle()).active);
  s.synchronize();
}
