// The simulator's race detector against devicekit's ordering of calls without a stream: the way
// to_host read a tree before it was ordered after the legacy default stream (its copy on
// devicekit's own non-blocking stream, ordered after nothing) is reported on the first run,
// whatever the schedule; the ordered call is not.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>
#include <devicekit/devicekit.hpp>

#include "sim_test_support.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace dk = devicekit;
namespace sim = devicekit::cuda_sim;

namespace {

/// Reads `tree` back the way to_host did without the ordering: its device-to-host copies on the
/// placement stream as it is, not ordered after the legacy default stream.
std::vector<float> read_back_unordered(const dk::device_array<float>& tree) {
  std::vector<float> back(tree.size());
  const dk::detail::copy_item item{reinterpret_cast<const std::byte*>(tree.data()), tree.device(), tree.owner().get(),
                                   reinterpret_cast<std::byte*>(back.data()), tree.size_bytes()};
  const dk::stream_ref unordered(dk::detail::placement_stream(tree.device()));
  dk::detail::copy_device_group_to_host(std::span<const dk::detail::copy_item>(&item, 1), tree.device(), &unordered);
  return back;
}

}  // namespace

TEST_CASE("a read-back not ordered after the legacy default stream is reported on the first run",
          "[sim][stream_order]") {
  // The tree is written by a copy queued on the legacy default stream behind a held host function
  // (a stand-in for a kernel of the caller's): no thread can have waited for that write, so the
  // detector's verdict cannot depend on what the schedule let anyone observe.
  const dk::device dev = dk::device::cuda(0);
  auto tree = dk::place(std::vector<float>(4096, 1.f), dev);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  float* src = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&src), tree.size_bytes()) == cudaSuccess);
  std::fill(src, src + tree.size(), 2.f);
  sim_test::gate g;
  REQUIRE(cudaLaunchHostFunc(cudaStreamLegacy, sim_test::gate::hold, &g) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(tree.data(), src, tree.size_bytes(), cudaMemcpyHostToDevice, cudaStreamLegacy) ==
          cudaSuccess);

  const std::size_t before = sim::violations().size();
  (void)read_back_unordered(tree);  // the ordering to_host had: reads the old bytes
  const auto after = sim::violations();
  g.open = true;
  REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  REQUIRE(cudaFreeHost(src) == cudaSuccess);
  REQUIRE(after.size() > before);
  sim::expect_violations(after.size() - before);
  INFO(after[before]);
  CHECK(after[before].find("cudaMemcpyAsync") != std::string::npos);
  CHECK(after[before].find("legacy") != std::string::npos);

  // The same read through to_host, which is ordered: no report, and the new bytes.
  sim_test::gate g2;
  float* src2 = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&src2), tree.size_bytes()) == cudaSuccess);
  std::fill(src2, src2 + tree.size(), 3.f);
  REQUIRE(cudaLaunchHostFunc(cudaStreamLegacy, sim_test::gate::hold, &g2) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(tree.data(), src2, tree.size_bytes(), cudaMemcpyHostToDevice, cudaStreamLegacy) ==
          cudaSuccess);
  std::thread opener([&g2] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g2.open = true;
  });
  const std::size_t before_ordered = sim::violations().size();
  const std::vector<float> back = dk::to_host(tree);
  opener.join();
  CHECK(sim::violations().size() == before_ordered);
  CHECK(back == std::vector<float>(tree.size(), 3.f));
  REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  REQUIRE(cudaFreeHost(src2) == cudaSuccess);
}

TEST_CASE("to_host of a prefetched tree is not reported", "[sim][stream_order]") {
  const dk::device dev = dk::device::cuda(0);
  std::vector<std::vector<float>> source(3, std::vector<float>(4096, 2.f));
  const std::size_t before = sim::violations().size();
  for (auto& batch : dk::prefetch(source, dev, 1)) CHECK(dk::to_host(batch) == source.front());
  CHECK(sim::violations().size() == before);
}
