// graph_step: the device part of an optimizer step over a 400-leaf model, captured once into a
// CUDA graph and replayed every step (dk::capture, dk::graph::launch).
//
// Each step the gradients arrive in pinned host memory; the step copies them onto the device
// (400 copies), updates the weights (tree_axpy: w -= lr * g, one launch per element type), makes
// a zeroed scratch tree the size of the model (zeros_like: graph memory, allocated and freed by
// the graph) and copies the weights out into a pinned checkpoint. Eagerly that is over 800 calls
// into the CUDA runtime per step; the graph replays them for one. The program checks the
// checkpoint after every step against the same arithmetic on the host, times eager steps against
// replays, and exits with status 1 when a value is wrong.
//
// It runs on what it finds: a GPU (the update's kernels need this file compiled by nvcc, which
// CMake does when it has a CUDA compiler; compiled by g++, the step only moves the data and the
// weights stay as they are), or the CPU, where capture keeps the step and each launch calls it.
//
// Build: cmake --preset default && cmake --build --preset default --target graph_step
// Run:   ./build/examples/graph_step [steps]
#include <devicekit/compute.hpp>
#include <devicekit/devicekit.hpp>
#if DEVICEKIT_CUDA_COMPILER
#  include <devicekit/compute/kernels.cuh>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

constexpr std::size_t leaves = 400;
constexpr float learning_rate = 0.5f;

/// Whether the weights are updated on `dev`: always on the CPU; on a GPU only with the tree
/// algorithms' kernels, which need this file compiled by nvcc.
bool updates_on(dk::device dev) { return dev.is_cpu() || DEVICEKIT_CUDA_COMPILER != 0; }

/// Leaf i has 16 + (i % 7) * 40 floats (16 to 256): the small tensors that make a step
/// launch-bound.
using model = std::vector<std::vector<float>>;
model make_model(float (*value)(std::size_t leaf, std::size_t k)) {
  model m(leaves);
  for (std::size_t i = 0; i < leaves; ++i) {
    m[i].resize(16 + (i % 7) * 40);
    for (std::size_t k = 0; k < m[i].size(); ++k) m[i][k] = value(i, k);
  }
  return m;
}
float initial_weight(std::size_t i, std::size_t k) { return static_cast<float>(i) + static_cast<float>(k) / 64.f; }
float unit_gradient(std::size_t i, std::size_t k) { return static_cast<float>((i + k) % 5) / 8.f; }

/// Where a tree lives for copies the step queues: pinned host memory on a GPU (a graph's copy
/// reads the host at every launch, which needs page-locked memory), plain host memory on the CPU.
template <class T>
auto host_side(const T& tree, dk::device dev) {
  return dev.is_cuda() ? dk::place(tree, dev, dk::memory_kind::pinned_host) : dk::place(tree, dev);
}

}  // namespace

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  dk::device_manager<> dm;
  const dk::device dev = dm.default_device();
  const dk::stream s(dev);
  std::printf("graph_step: %zu leaves on %s, %d steps\n", leaves, dev.str().c_str(), steps);

  const model w0 = make_model(initial_weight);
  const model g1 = make_model(unit_gradient);
  auto weights = dk::place(w0, dev);
  auto grads = dk::place(g1, dev);
  auto incoming = host_side(g1, dev);    // the step's input: gradients, written by the host
  auto checkpoint = host_side(w0, dev);  // the step's output: the weights after the update

  // The step: everything it queues goes on `s`. Inside a capture nothing runs: it is recorded.
  const bool update = updates_on(dev);
  const auto step = [&] {
    dk::copy(incoming, grads, s);
    if (update) dk::tree_axpy(s, -learning_rate, grads, weights);
    auto scratch = dk::zeros_like(weights, dev, s);  // graph memory inside a capture
    dk::copy(weights, scratch, s);
    dk::copy(scratch, checkpoint, s);
  };

  dk::graph g = dk::capture(s, step);
  std::printf("captured: %s; graph memory %zu bytes (counted by the device's pool until the graph goes)\n",
              g.runs_on_host() ? "on the host (the step is called at each launch)" : "a CUDA graph", g.memory_bytes());

  // Step t sends gradients t * g1; after it the weights are w0 - lr * g1 * (1 + ... + t).
  int failures = 0;
  for (int t = 1; t <= steps; ++t) {
    for (std::size_t i = 0; i < leaves; ++i) {
      float* p = incoming[i].data();
      for (std::size_t k = 0; k < g1[i].size(); ++k) p[k] = static_cast<float>(t) * g1[i][k];
    }
    g.launch(s);
    s.synchronize();
    const float sum = static_cast<float>(t * (t + 1) / 2);
    for (std::size_t i = 0; i < leaves && failures < 5; ++i) {
      const float* got = checkpoint[i].data();
      for (std::size_t k = 0; k < w0[i].size(); ++k) {
        const float want = update ? w0[i][k] - learning_rate * g1[i][k] * sum : w0[i][k];
        if (got[k] != want) {
          std::printf("graph_step: FAILED: step %d, leaf %zu[%zu] = %g, expected %g\n", t, i, k, got[k], want);
          ++failures;
          break;
        }
      }
    }
  }
  if (failures != 0) return 1;
  std::printf("checked: every checkpoint after %d replays matches the host's arithmetic%s\n", steps,
              update ? "" : " (no kernels in this build: the step moved the data only)");

  // Timing, for information: the same step eagerly and replayed (launch-bound on a GPU; on the
  // simulated GPUs every replayed node waits a random delay, so there the figures mean nothing).
  using clock = std::chrono::steady_clock;
  const int rounds = steps < 20 ? steps : 20;
  const auto time_per_step = [&](auto&& one) {
    one();
    s.synchronize();
    const auto t0 = clock::now();
    for (int i = 0; i < rounds; ++i) one();
    s.synchronize();
    return std::chrono::duration<double, std::micro>(clock::now() - t0).count() / rounds;
  };
  const double eager = time_per_step(step);
  const double replay = time_per_step([&] { g.launch(s); });
  std::printf("per step: eager %.1f us, graph %.1f us (%.1fx)\n", eager, replay, replay > 0 ? eager / replay : 0.0);
  std::printf("graph_step: ok\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "graph_step: FAILED: %s\n", e.what());
  return 1;
}
