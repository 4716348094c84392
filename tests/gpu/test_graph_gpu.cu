// devicekit inside CUDA graph capture on a GPU: the cases every backend with CUDA runs
// (tests/common/graph_cases.hpp) on cuda:0, where the runtime itself refuses what a capture may
// not hold (cudaMemcpyBatchAsync, synchronisation, cudaMalloc), and a step with the tree
// algorithms' kernels, whose chunk tables must outlive the capture. Label gpu: skipped (exit 77)
// without a device.
#include <catch2/catch.hpp>

#include <devicekit/compute.hpp>
#include <devicekit/compute/kernels.cuh>
#include <devicekit/devicekit.hpp>

#define DEVICEKIT_CASES_BACKEND "gpu"
#define DEVICEKIT_CASES_DEVICE() dk::device::cuda(0)
#include "../common/graph_cases.hpp"

#include <vector>

namespace {
struct descend {
  float lr;
  __host__ __device__ float operator()(float w, float g) const { return w - lr * g; }
};
}  // namespace

TEST_CASE("a captured step of kernels over 400 leaves replays with the host's results", "[gpu][graph]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  std::vector<std::vector<float>> w0(400);
  std::vector<std::vector<float>> g0(400);
  for (std::size_t l = 0; l < w0.size(); ++l) {
    w0[l].assign(16 + (l % 9) * 100, static_cast<float>(l));
    g0[l].assign(w0[l].size(), 0.25f);
  }
  auto w = dk::place(w0, gpu, s);
  auto g = dk::place(g0, gpu, s);
  auto out = dk::place(w0, gpu, dk::memory_kind::pinned_host);
  dk::graph graph = dk::capture(s, [&] {
    dk::tree_transform(s, w, descend{2.f}, w, g);  // w -= 0.5 per replay
    auto scratch = dk::zeros_like(w, gpu, s);
    dk::tree_axpy(s, 1.f, w, scratch);  // scratch = w
    dk::copy(scratch, out, s);
  });
  for (int i = 1; i <= 50; ++i) {
    graph.launch(s);
    s.synchronize();
    for (std::size_t l = 0; l < w0.size(); l += 37) {
      REQUIRE(out[l].data()[0] == static_cast<float>(l) - 0.5f * static_cast<float>(i));
      REQUIRE(out[l].data()[w0[l].size() - 1] == static_cast<float>(l) - 0.5f * static_cast<float>(i));
    }
  }
}
