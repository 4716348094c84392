// A training step's device part captured into a CUDA graph (core/graph.hpp) against the same step
// queued eagerly, on the same stream. Every ratio is baseline / devicekit, both measured in this
// run (run only with a GPU; without one it prints what is owed, exit 0):
//
//   graph.step.vs_eager            a 400-leaf step (SGD with momentum: m = beta m + g, w -= lr m,
//                                  through tree_transform; a scratch tree from zeros_like,
//                                  written and dropped inside the step; w += tiny * g through
//                                  tree_axpy) replayed with one cudaGraphLaunch vs queued call
//                                  by call; each sample ends with the stream synchronised. Goal
//                                  >= 3: the step is launch-bound (leaves of 16 to 1,024 floats).
//   graph.pool.allocations_per_replay  the pool's allocations per replay (0 after the capture:
//                                  graph memory nodes are CUDA's) vs per eager step (one, the
//                                  scratch tree).
#include "bench_common.hpp"

#include <devicekit/compute.hpp>
#include <devicekit/compute/kernels.cuh>
#include <devicekit/devicekit.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

constexpr std::size_t leaves = 400;

std::vector<std::vector<float>> make_tree(float base) {
  std::vector<std::vector<float>> t(leaves);
  for (std::size_t l = 0; l < leaves; ++l) {
    t[l].assign(16 << (l % 7), base + 1e-3f * static_cast<float>(l % 11));  // 16 to 1,024 floats
  }
  return t;
}

struct momentum {
  float beta;
  __host__ __device__ float operator()(float m, float g) const { return beta * m + g; }
};
struct descend {
  float lr;
  __host__ __device__ float operator()(float w, float m) const { return w - lr * m; }
};

void entries(const bench::options& opt, bench::report& report, dk::device gpu) {
  const dk::stream s(gpu);
  auto w = dk::place(make_tree(1.f), gpu, s);
  auto g = dk::place(make_tree(1e-3f), gpu, s);
  auto m = dk::zeros_like(w, gpu, s);
  s.synchronize();
  const auto step = [&] {
    dk::tree_transform(s, m, momentum{0.9f}, m, g);
    dk::tree_transform(s, w, descend{1e-6f}, w, m);
    auto scratch = dk::zeros_like(w, gpu, s);
    dk::tree_axpy(s, 1e-7f, g, scratch);
    dk::tree_axpy(s, 1.f, scratch, w);
  };
  dk::device_memory& pool = dk::default_placement_resource(gpu);
  dk::graph graph = dk::capture(s, step);

  const int samples = opt.quick ? 9 : 31;
  auto replayed = [&] {
    graph.launch(s);
    s.synchronize();
  };
  auto eager = [&] {
    step();
    s.synchronize();
  };
  const auto [t, b] = bench::interleaved_medians(samples, replayed, eager);
  report.add({"graph.step.vs_eager", "cuda", "time of one 400-leaf step, replayed (dk::capture, graph::launch)",
              t * 1e6, "us", "the same step queued call by call", b * 1e6, b / t,
              "goal >= 3; graph memory " + std::to_string(graph.memory_bytes()) + " bytes; medians of " +
                  std::to_string(samples)});

  constexpr int replays = 100;
  const auto before_replays = pool.stats().allocation_count;
  for (int i = 0; i < replays; ++i) graph.launch(s);
  s.synchronize();
  const double per_replay = static_cast<double>(pool.stats().allocation_count - before_replays) / replays;
  const auto before_eager = pool.stats().allocation_count;
  for (int i = 0; i < replays; ++i) step();
  s.synchronize();
  const double per_eager = static_cast<double>(pool.stats().allocation_count - before_eager) / replays;
  report.add({"graph.pool.allocations_per_replay", "cuda", "pool allocations per replay", per_replay, "allocs",
              "pool allocations per eager step", per_eager, per_replay > 0 ? per_eager / per_replay : 0.0,
              "goal: 0 per replay (the ratio is 0 when the goal is met)"});
}

}  // namespace

int main(int argc, char** argv) {
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  if (dk::cuda_detector{}.detect(dk::settings{}).gpu_count > 0) {
    const dk::device gpu = dk::device::cuda(0);
    dk::scoped_device on(gpu.ordinal());
    entries(opt, report, gpu);
  } else {
    std::printf(
        "bench_graph_cuda: no GPU, nothing to measure; owed on a GPU: graph.step.vs_eager (goal >= 3) and "
        "graph.pool.allocations_per_replay (goal 0)\n");
  }
  report.write(opt.json_path);
  return 0;
}
