// The tree algorithms (compute/) on the cpu device against the per-leaf calls they
// replace. Every ratio is baseline time / devicekit time, both measured in this run.
//
//   tree.transform.vs_per_leaf           tree_axpy (y += a x) vs one thrust::transform
//                                        (thrust::cpp) per leaf; .plain_loop: vs a plain loop
//   tree.reduce_norm.vs_per_leaf         tree_global_norm vs one thrust::transform_reduce
//                                        (thrust::cpp, double accumulator) per leaf; .plain_loop
// each for 1,000 leaves x 4 KiB and for 8 leaves x 8 MiB (the cuda entries use 64 MiB leaves:
// on the host the large shape is memory-bound either way, and 1 GiB per side would not fit the
// CI machines). The cuda entries are in bench_tree_cuda.cu.
#include "bench_common.hpp"

#include <devicekit/compute.hpp>
#include <devicekit/devicekit.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

// The per-leaf baseline is Thrust's serial host system, where CCCL is at hand.
#if DEVICEKIT_HAS_CUDA && __has_include(<thrust/system/cpp/execution_policy.h>)
#  include <thrust/system/cpp/execution_policy.h>
#  include <thrust/transform.h>
#  include <thrust/transform_reduce.h>
#  define BENCH_HOST_THRUST 1
#else
#  define BENCH_HOST_THRUST 0
#endif

namespace dk = devicekit;

namespace {

using tree_t = std::vector<std::vector<float>>;

tree_t make_tree(std::size_t leaves, std::size_t elements, float start) {
  tree_t t(leaves);
  for (std::size_t l = 0; l < leaves; ++l) {
    t[l].resize(elements);
    for (std::size_t i = 0; i < elements; ++i) t[l][i] = start + 1e-6f * static_cast<float>((i + l) % 1000);
  }
  return t;
}

double sink = 0;  // keeps the reductions' results alive

void entries(const bench::options& opt, bench::report& report, std::size_t leaves, std::size_t elements,
             const std::string& shape, double transform_goal) {
  tree_t x = make_tree(leaves, elements, 1.f);
  tree_t y = make_tree(leaves, elements, 2.f);
  const float a = 1e-7f;  // keeps y bounded over many rounds
  const int samples = opt.quick ? 7 : 31;

  auto ours = [&] { dk::tree_axpy(a, x, y); };
  auto plain = [&] {
    for (std::size_t l = 0; l < leaves; ++l) {
      const float* xs = x[l].data();
      float* ys = y[l].data();
      const std::size_t n = x[l].size();
      for (std::size_t i = 0; i < n; ++i) ys[i] = a * xs[i] + ys[i];
    }
  };
#if BENCH_HOST_THRUST
  auto per_leaf = [&] {
    for (std::size_t l = 0; l < leaves; ++l) {
      thrust::transform(thrust::cpp::par, x[l].begin(), x[l].end(), y[l].begin(), y[l].begin(),
                        [a](float xv, float yv) { return a * xv + yv; });
    }
  };
  const auto [t, b, p] = bench::interleaved_medians(samples, ours, per_leaf, plain);
  report.add({"tree.transform.vs_per_leaf" + shape, "cpu", "time of y += a x over the tree", t * 1e6, "us",
              "one thrust::transform (cpp) per leaf", b * 1e6, b / t,
              "goal >= " + std::to_string(transform_goal).substr(0, 4)});
#else
  const auto [t, p] = bench::interleaved_medians(samples, ours, plain);
#endif
  report.add({"tree.transform.vs_per_leaf" + shape + ".plain_loop", "cpu", "time of y += a x over the tree", t * 1e6,
              "us", "a plain loop per leaf", p * 1e6, p / t, "informational; goal >= 0.95"});

  auto norm_ours = [&] { sink += dk::tree_global_norm(x); };
  auto norm_plain = [&] {
    double acc = 0;
    for (const auto& leaf : x) {
      for (float e : leaf) acc += static_cast<double>(e) * e;
    }
    sink += std::sqrt(acc);
  };
#if BENCH_HOST_THRUST
  auto norm_per_leaf = [&] {
    double acc = 0;
    for (const auto& leaf : x) {
      acc += thrust::transform_reduce(
          thrust::cpp::par, leaf.begin(), leaf.end(), [](float e) { return static_cast<double>(e) * e; }, 0.0,
          [](double u, double v) { return u + v; });
    }
    sink += std::sqrt(acc);
  };
  const auto [tn, bn, pn] = bench::interleaved_medians(samples, norm_ours, norm_per_leaf, norm_plain);
  report.add({"tree.reduce_norm.vs_per_leaf" + shape, "cpu", "time of the global norm", tn * 1e6, "us",
              "one thrust::transform_reduce (cpp) per leaf", bn * 1e6, bn / tn, "goal >= 1.0"});
#else
  const auto [tn, pn] = bench::interleaved_medians(samples, norm_ours, norm_plain);
#endif
  report.add({"tree.reduce_norm.vs_per_leaf" + shape + ".plain_loop", "cpu", "time of the global norm", tn * 1e6, "us",
              "a plain loop per leaf (double accumulator)", pn * 1e6, pn / tn, "informational; goal >= 0.95"});
}

}  // namespace

int main(int argc, char** argv) {
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  entries(opt, report, 1000, 1024, ".small_leaves", 1.0);               // 1,000 x 4 KiB
  entries(opt, report, 8, std::size_t{2} << 20, ".large_leaves", 1.0);  // 8 x 8 MiB
  report.write(opt.json_path);
  std::printf("(checksum %g)\n", sink);
  return 0;
}
