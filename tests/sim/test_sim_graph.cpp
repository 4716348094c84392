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
