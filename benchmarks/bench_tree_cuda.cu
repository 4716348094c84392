// The tree algorithms on a GPU (compute/kernels.cuh: one launch per element-type group over a
// chunk table, apex's multi_tensor_apply scheme, which PyTorch's _foreach ops use) against the
// per-leaf calls they replace, on the same stream. Every ratio is baseline time / devicekit time,
// both measured in this run (run only with a GPU; without one it prints what is owed, exit 0):
//
//   tree.transform.vs_per_leaf.<shape>   tree_axpy (y += a x, one launch) vs one thrust::transform
//                                        per leaf (thrust::cuda::par_nosync.on(s): a launch per
//                                        leaf and no synchronisation between them, the fastest a
//                                        per-leaf loop gets)
//   tree.transform.of_d2d.<shape>        tree_axpy's bandwidth (x and y read, y written) as a
//                                        fraction of a device-to-device cudaMemcpyAsync of the same
//                                        leaves (goal >= 0.85 on large leaves)
//   tree.reduce_norm.vs_per_leaf.<shape> tree_global_norm (one launch, then cub::DeviceReduce over
//                                        the chunks' partials) vs one thrust::transform_reduce per
//                                        leaf (double accumulator; each returns its value to the
//                                        host, so it waits for the stream once per leaf, as a
//                                        per-tensor norm loop does)
//   tree.transform.whole_leaf.vs_chunked.<n>x<size>  tree_axpy with every leaf launched on its own
//                                        (cub::DeviceTransform, the threshold lowered to 0) vs every
//                                        leaf in the chunk kernel (threshold SIZE_MAX), n leaves of
//                                        4 to 64 MiB: where the whole-leaf threshold belongs
//                                        (compute/detail/plan.hpp, tree_whole_leaf_elements)
//   tree.transform.args.vs_table.400_leaves  tree_axpy on 400 leaves of 16 to 1,024 floats (the
//                                        CUDA-graph step's shape) with its chunks in the launch's
//                                        parameters vs with its chunk table staged through the pool
//                                        (tree_args_enabled off), call and synchronisation each
//
// shapes, with the goals of both entries: .small_leaves 1,000 leaves x 4 KiB, where launch
// overhead dominates (goal >= 20: a launch costs about 3-5 us, the leaf's work well under one);
// .large_leaves 8 leaves x 64 MiB, memory-bound either way (goal >= 0.95: the transform launches
// each leaf on its own, as the baseline does; the reduction's chunk table and partials must cost
// nothing noticeable).
#include "bench_common.hpp"

#include <devicekit/compute.hpp>
#include <devicekit/compute/kernels.cuh>
#include <devicekit/devicekit.hpp>

#include <thrust/system/cuda/execution_policy.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

struct axpy {
  float a;
  __host__ __device__ float operator()(float x, float y) const { return a * x + y; }
};
struct square {
  __host__ __device__ double operator()(float e) const { return static_cast<double>(e) * e; }
};
struct plus {
  __host__ __device__ double operator()(double u, double v) const { return u + v; }
};

std::vector<std::vector<float>> make_tree(std::size_t leaves, std::size_t elements) {
  std::vector<std::vector<float>> t(leaves);
  for (std::size_t l = 0; l < leaves; ++l) {
    t[l].resize(elements);
    for (std::size_t i = 0; i < elements; ++i) t[l][i] = 1.f + 1e-6f * static_cast<float>((i + l) % 1000);
  }
  return t;
}

double sink = 0;  // keeps the norms alive

void entries(const bench::options& opt, bench::report& report, dk::device gpu, std::size_t leaves, std::size_t elements,
             const std::string& shape, double goal) {
  const dk::stream s(gpu);
  auto x = dk::place(make_tree(leaves, elements), gpu, s);
  auto y = dk::zeros_like(x, gpu);
  dk::tree_fill(s, y, 2.f);
  s.synchronize();
  const float a = 1e-7f;  // keeps y bounded over many rounds
  const int samples = opt.quick ? 9 : 31;
  const auto policy = thrust::cuda::par_nosync.on(s.native_handle());

  auto ours = [&] {
    dk::tree_axpy(s, a, x, y);
    s.synchronize();
  };
  auto per_leaf = [&] {
    for (std::size_t l = 0; l < leaves; ++l) {
      const float* xs = x[l].data();
      float* ys = const_cast<float*>(y[l].data());
      thrust::transform(policy, xs, xs + x[l].size(), ys, ys, axpy{a});
    }
    s.synchronize();
  };
  // The device's copy bandwidth on the same leaves (each x leaf copied into a spare leaf): the
  // ceiling a memory-bound kernel can approach.
  void* spare = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaMalloc(&spare, elements * sizeof(float)));
  auto copy_ceiling = [&] {
    for (std::size_t l = 0; l < leaves; ++l) {
      DEVICEKIT_CUDA_CHECK(
          cudaMemcpyAsync(spare, x[l].data(), elements * sizeof(float), cudaMemcpyDeviceToDevice, s.native_handle()));
    }
    s.synchronize();
  };
  const auto [t, b, c] = bench::interleaved_medians(samples, ours, per_leaf, copy_ceiling);
  DEVICEKIT_CUDA_CHECK(cudaFree(spare));
  const auto launches = dk::detail::tree_counters().launches.load();
  ours();
  const auto per_call = dk::detail::tree_counters().launches.load() - launches;
  report.add({"tree.transform.vs_per_leaf" + shape, "cuda", "time of y += a x over the tree (tree_axpy)", t * 1e6, "us",
              "one thrust::transform (par_nosync, same stream) per leaf", b * 1e6, b / t,
              "goal >= " + std::to_string(goal).substr(0, 4) + "; " + std::to_string(per_call) + " launch(es) for " +
                  std::to_string(leaves) + " leaves; medians of " + std::to_string(samples)});
  // Bytes moved: axpy reads x and y and writes y; a copy reads and writes once.
  const double bytes = static_cast<double>(leaves * elements * sizeof(float));
  const double ours_gbs = 3.0 * bytes / t / 1e9;
  const double copy_gbs = 2.0 * bytes / c / 1e9;
  report.add({"tree.transform.of_d2d" + shape, "cuda", "GB/s of tree_axpy, bytes read + written", ours_gbs, "GB/s",
              "device-to-device cudaMemcpyAsync of the same leaves, read + written", copy_gbs, ours_gbs / copy_gbs,
              "ratio = our bandwidth / the copy's; goal >= 0.85 on large leaves"});

  double ours_norm = 0;
  double their_norm = 0;
  auto norm_ours = [&] {
    ours_norm = dk::tree_global_norm(s, x);
    sink += ours_norm;
  };
  auto norm_per_leaf = [&] {
    double acc = 0;
    for (std::size_t l = 0; l < leaves; ++l) {
      const float* xs = x[l].data();
      acc += thrust::transform_reduce(thrust::cuda::par.on(s.native_handle()), xs, xs + x[l].size(), square{}, 0.0,
                                      plus{});
    }
    their_norm = std::sqrt(acc);
    sink += their_norm;
  };
  const auto [tn, bn] = bench::interleaved_medians(samples, norm_ours, norm_per_leaf);
  report.add({"tree.reduce_norm.vs_per_leaf" + shape, "cuda", "time of the global norm (tree_global_norm)", tn * 1e6,
              "us", "one thrust::transform_reduce (double) per leaf, same stream", bn * 1e6, bn / tn,
              "goal >= " + std::to_string(goal).substr(0, 4) + "; relative difference of the norms " +
                  std::to_string(std::abs(ours_norm - their_norm) / their_norm)});
}

/// Every leaf launched on its own against every leaf in the chunk kernel, at one leaf length.
void whole_leaf_entry(const bench::options& opt, bench::report& report, dk::device gpu, std::size_t leaves,
                      std::size_t elements) {
  const dk::stream s(gpu);
  auto x = dk::place(make_tree(leaves, elements), gpu, s);
  auto y = dk::place(make_tree(leaves, elements), gpu, s);
  s.synchronize();
  const int samples = opt.quick ? 9 : 31;
  auto& threshold = dk::detail::tree_whole_leaf_threshold();
  auto run = [&](std::size_t from) {
    threshold = from;
    dk::tree_axpy(s, 1e-7f, x, y);
    s.synchronize();
  };
  const auto [w, c] = bench::interleaved_medians(
      samples, [&] { run(0); }, [&] { run(SIZE_MAX); });
  threshold = dk::detail::tree_whole_leaf_elements;
  const std::string shape = std::to_string(leaves) + "x" + std::to_string(elements * sizeof(float) >> 20) + "MiB";
  const double bytes = 3.0 * static_cast<double>(leaves * elements * sizeof(float));
  report.add({"tree.transform.whole_leaf.vs_chunked." + shape, "cuda",
              "time of tree_axpy, each leaf launched on its own (cub::DeviceTransform)", w * 1e6, "us",
              "every leaf in the chunk kernel", c * 1e6, c / w,
              "informational: above 1, leaves this long belong to the whole-leaf path (threshold now " +
                  std::to_string(dk::detail::tree_whole_leaf_elements) + " elements); " +
                  std::to_string(bytes / w / 1e9).substr(0, 6) + " vs " + std::to_string(bytes / c / 1e9).substr(0, 6) +
                  " GB/s; medians of " + std::to_string(samples)});
}

/// The launch with its chunks in its parameters against the staged table, on a tree that fits.
void args_entry(const bench::options& opt, bench::report& report, dk::device gpu) {
  const dk::stream s(gpu);
  std::vector<std::vector<float>> h(400);
  for (std::size_t l = 0; l < h.size(); ++l) h[l].assign(std::size_t{16} << (l % 7), 1.f);
  auto x = dk::place(h, gpu, s);
  auto y = dk::place(h, gpu, s);
  s.synchronize();
  const int samples = opt.quick ? 15 : 51;
  auto run = [&](bool in_args) {
    dk::detail::tree_args_enabled() = in_args;
    dk::tree_axpy(s, 1e-7f, x, y);
    s.synchronize();
  };
  const auto tables = dk::detail::tree_counters().tables.load();
  run(true);
  const bool took_args = dk::detail::tree_counters().tables.load() == tables;
  const auto [t, b] = bench::interleaved_medians(
      samples, [&] { run(true); }, [&] { run(false); });
  dk::detail::tree_args_enabled() = true;
  report.add({"tree.transform.args.vs_table.400_leaves", "cuda", "time of tree_axpy, chunks in the launch's parameters",
              t * 1e6, "us", "the same call with its chunk table staged through the pool", b * 1e6, b / t,
              std::string(took_args ? "" : "NOT IN ARGS (no large parameters here): ") +
                  "call and synchronisation; medians of " + std::to_string(samples)});
}

}  // namespace

int main(int argc, char** argv) {
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  if (dk::cuda_detector{}.detect(dk::settings{}).gpu_count > 0) {
    const dk::device gpu = dk::device::cuda(0);
    dk::scoped_device on(gpu.ordinal());
    entries(opt, report, gpu, 1000, 1024, ".small_leaves", 20.0);                // 1,000 x 4 KiB
    entries(opt, report, gpu, 8, std::size_t{16} << 20, ".large_leaves", 0.95);  // 8 x 64 MiB
    for (const std::size_t mib : {4, 8, 16, 32, 64}) whole_leaf_entry(opt, report, gpu, 512 / mib, mib << 18);
    args_entry(opt, report, gpu);
    std::printf("(checksum %g)\n", sink);
  } else {
    std::printf(
        "bench_tree_cuda: no GPU, nothing to measure; owed on a GPU: tree.transform.vs_per_leaf.small_leaves and "
        "tree.reduce_norm.vs_per_leaf.small_leaves (goal >= 20), tree.transform.vs_per_leaf.large_leaves and "
        "tree.reduce_norm.vs_per_leaf.large_leaves (goal >= 0.95), tree.transform.of_d2d.large_leaves (goal >= "
        "0.85), tree.transform.whole_leaf.vs_chunked at 4 to 64 MiB leaves, tree.transform.args.vs_table.400_leaves\n");
  }
  report.write(opt.json_path);
  return 0;
}
