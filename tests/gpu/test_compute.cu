// The tree algorithms on cuda:0 (compute.hpp, kernels from compute/kernels.cuh): the cases every backend runs
// (tests/common/compute_cases.hpp), the same checks as the cpu tests, that one
// launch covers every leaf of a tree whose leaves share an element type, and that the chunk
// table and the reduction's scratch come from the device's devicekit pool (runs only where a
// CUDA device is present).
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>
#include <devicekit/compute.hpp>
#include <devicekit/compute/kernels.cuh>

// The cases every backend runs, on the first GPU (after kernels.cuh: they launch its kernels).
#define DEVICEKIT_CASES_BACKEND "gpu"
#define DEVICEKIT_CASES_DEVICE() devicekit::device::cuda(0)
#include "../common/compute_cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

namespace dk = devicekit;

using compute_cases::ramp;

namespace {
struct scale_add {
  __host__ __device__ float operator()(float a, float c, float b) const { return a * c + b; }
  __host__ __device__ double operator()(double a, float c, double b) const { return a * c + b; }
  __host__ __device__ int operator()(int a, float c, int b) const { return static_cast<int>(a * c + b); }
};
struct times {
  __host__ __device__ float operator()(float e, float s) const { return e * s; }
};
}  // namespace

TEMPLATE_TEST_CASE("tree_transform on cuda:0 matches a plain loop", "[tree_algorithms][gpu]", int, float, double,
                   dk::float16_t, dk::bfloat16_t, dk::float8_e4m3_t) {
  using T = TestType;
  const dk::device gpu = dk::device::cuda(0);
  std::tuple<std::vector<T>, std::vector<T>> hx{ramp<T>(100000, -3.f, 0.001f), ramp<T>(7, 1.f)};
  std::tuple<std::vector<T>, std::vector<T>> hy{ramp<T>(100000, 2.f, 0.5f), ramp<T>(7, -2.f)};
  auto x = dk::place(hx, gpu);
  auto y = dk::place(hy, gpu);
  auto out = dk::zeros_like(x, gpu);
  const auto launches = dk::detail::tree_counters().launches.load();
  dk::tree_transform(out, scale_add{}, x, 0.5f, y);
  CHECK(dk::detail::tree_counters().launches.load() == launches + 1);  // both leaves, one kernel
  auto back = dk::to_host(out);
  auto check = [](const auto& o, const auto& a, const auto& b) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      const auto want = dk::narrow_to<T>(scale_add{}(dk::widen(a[i]), 0.5f, dk::widen(b[i])));
      CHECK(dk::widen(o[i]) == dk::widen(want));
    }
  };
  check(std::get<0>(back), std::get<0>(hx), std::get<0>(hy));
  check(std::get<1>(back), std::get<1>(hx), std::get<1>(hy));
  double sum = 0, sumsq = 0;
  for (const T& e : std::get<0>(hx)) {
    sum += dk::widen(e);
    sumsq += static_cast<double>(dk::widen(e)) * dk::widen(e);
  }
  for (const T& e : std::get<1>(hx)) {
    sum += dk::widen(e);
    sumsq += static_cast<double>(dk::widen(e)) * dk::widen(e);
  }
  CHECK(dk::tree_reduce(x, dk::reduce::sum) == Approx(sum));
  CHECK(dk::tree_global_norm(x) == Approx(std::sqrt(sumsq)));
  CHECK(dk::tree_all_finite(x));
}

TEST_CASE("a 1,000-leaf tree takes one launch; table and scratch come from the pool", "[tree_algorithms][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  std::vector<std::vector<float>> h;
  double sumsq = 0;
  for (std::size_t l = 0; l < 1000; ++l) {
    h.push_back(ramp<float>(1 + l % 300, static_cast<float>(l) * 0.01f, 0.25f));
    for (float e : h.back()) sumsq += static_cast<double>(e) * e;
  }
  auto g = dk::place(h, gpu, s);
  const auto before = dk::detail::tree_counters().launches.load();
  const auto tables = dk::detail::tree_counters().tables.load();
  const auto scratch = dk::scratch_memory_stats(gpu).allocations;
  const double norm = dk::tree_global_norm(s, g);
  CHECK(norm == Approx(std::sqrt(sumsq)));
  CHECK(dk::detail::tree_counters().launches.load() == before + 1);
  CHECK(dk::detail::tree_counters().tables.load() == tables + 1);
  CHECK(dk::scratch_memory_stats(gpu).allocations == scratch + 1);
  dk::tree_transform(s, g, times{}, g, static_cast<float>(1.0 / norm));
  CHECK(dk::tree_global_norm(s, g) == Approx(1.0));
  CHECK(dk::scratch_memory_stats(gpu).in_use_bytes == 0);

  double* d = nullptr;
  REQUIRE(cudaMalloc(&d, sizeof(double)) == cudaSuccess);
  dk::tree_reduce_async(s, g, dk::reduce::sumsq, d);
  double back = 0;
  REQUIRE(cudaMemcpyAsync(&back, d, sizeof(double), cudaMemcpyDeviceToHost, s.native_handle()) == cudaSuccess);
  s.synchronize();
  CHECK(back == Approx(1.0));
  (void)cudaFree(d);
}

TEST_CASE("trees on different devices are refused on cuda:0 too", "[tree_algorithms][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  auto on_gpu = dk::place(ramp<float>(10, 0.f), gpu);
  std::vector<float> on_host = ramp<float>(10, 0.f);
  CHECK_THROWS_AS(dk::tree_axpy(1.f, on_host, on_gpu), dk::device_mismatch);
  const dk::stream cpu_stream;
  CHECK_THROWS_AS(dk::tree_fill(cpu_stream, on_gpu, 0.f), dk::device_mismatch);
}

// An extended lambda (nvcc --extended-lambda, which the devicekit target passes; CUDA C++
// Programming Guide, "Extended Lambdas"): the same closure type instantiates the kernel for the
// cuda tree and runs the host loop for the cpu one.
TEST_CASE("a __host__ __device__ lambda with tree_transform on cuda:0 and on the host", "[tree_algorithms][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  const std::tuple<std::vector<float>, std::vector<double>> h{ramp<float>(70000, -1.f, 0.01f), ramp<double>(9, 3.f)};
  auto x = dk::place(h, gpu);
  auto out = dk::zeros_like(x, gpu);
  const float shift = 0.25f;
  // Not generic (nvcc refuses generic extended lambdas): float elements widen to double.
  auto f = [shift] __host__ __device__(double e, float k) { return e * k + shift; };
  const auto launches = dk::detail::tree_counters().launches.load();
  dk::tree_transform(out, f, x, 2.f);
  CHECK(dk::detail::tree_counters().launches.load() == launches + 2);  // float and double leaves
  auto host_out = h;
  dk::tree_transform(host_out, f, h, 2.f);
  const auto back = dk::to_host(out);
  CHECK(std::get<0>(back) == std::get<0>(host_out));
  CHECK(std::get<1>(back) == std::get<1>(host_out));
  CHECK(std::get<1>(host_out)[4] == 7.0 * 2.0 + 0.25);
}

// Each thread of the transform kernel takes vectors of four elements where every pointer of a
// chunk is aligned for them, and four single elements otherwise (compute/detail/chunk_share.hpp):
// leaves that start at every offset from an aligned address, and lengths around both cuts, the
// vector's and the chunk's (65,536 elements).
TEST_CASE("tree_transform on cuda:0 with leaves at every alignment", "[tree_algorithms][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  const std::vector<std::size_t> lengths{1, 3, 4, 5, 1023, 1024, 65536 + 5};
  const std::size_t room = 65536 + 64;
  float* xd = nullptr;
  float* yd = nullptr;
  double* od = nullptr;
  REQUIRE(cudaMalloc(&xd, room * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&yd, room * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&od, room * sizeof(double)) == cudaSuccess);
  for (std::size_t n : lengths) {
    for (std::size_t shift : {0, 1, 2, 3}) {
      const std::vector<float> hx = ramp<float>(n, 1.f, 0.5f);
      const std::vector<float> hy = ramp<float>(n, -2.f, 0.25f);
      // x aligned, y and the output shifted: vector loads only where shift is 0.
      REQUIRE(cudaMemcpy(xd, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE(cudaMemcpy(yd + shift, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE(cudaMemcpy(od, std::vector<double>(room, -9.0).data(), room * sizeof(double), cudaMemcpyHostToDevice) ==
              cudaSuccess);
      auto x = dk::device_array<float>::view(xd, n, gpu);
      auto y = dk::device_array<float>::view(yd + shift, n, gpu);
      auto out = dk::device_array<double>::view(od + shift, n, gpu);
      dk::tree_axpy(s, 0.5f, x, y);  // in place
      dk::tree_transform(
          s, out, [] __host__ __device__(float a) { return 2.0 * a; }, y);
      s.synchronize();
      std::vector<float> yb(n);
      std::vector<double> ob(room);
      REQUIRE(cudaMemcpy(yb.data(), yd + shift, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
      REQUIRE(cudaMemcpy(ob.data(), od, room * sizeof(double), cudaMemcpyDeviceToHost) == cudaSuccess);
      INFO("n " << n << ", shift " << shift);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const float want = 0.5f * hx[i] + hy[i];
        wrong += yb[i] != want || ob[shift + i] != 2.0 * want ? 1 : 0;
      }
      CHECK(wrong == 0);
      CHECK(std::count(ob.begin(), ob.end(), -9.0) == static_cast<std::ptrdiff_t>(room - n));
    }
  }
  (void)cudaFree(xd);
  (void)cudaFree(yd);
  (void)cudaFree(od);
}

// Where a call's chunks fit the launch's parameters (4 KiB, or 32,764 bytes with a CUDA 12.1
// driver: compute/kernels.cuh), no table is staged and no scratch is taken; beyond that the
// table goes through the pool as before. Each tier's results against the host.
TEST_CASE("tree_axpy with its chunks in the launch's parameters, and past them through a table",
          "[tree_algorithms][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  // tree_axpy's job: a broadcast, then x and y; a chunk holds y (the output) and the three.
  using job_t =
      dk::detail::transform_job<dk::detail::axpy_fn, float, dk::detail::tree_position, dk::detail::tree_position>;
  const std::size_t small = dk::detail::tree_args_chunks<4, job_t>(dk::detail::tree_small_args_bytes);
  const std::size_t large = dk::detail::tree_large_args_supported()
                                ? dk::detail::tree_args_chunks<4, job_t>(dk::detail::tree_large_args_bytes)
                                : small;
  REQUIRE(small >= 90);
  for (const std::size_t leaves : {std::size_t{3}, small, small + 1, large, large + 1}) {
    INFO(leaves << " leaves (" << small << " and " << large << " chunks fit)");
    std::vector<std::vector<float>> hx(leaves);
    std::vector<std::vector<float>> hy(leaves);
    for (std::size_t l = 0; l < leaves; ++l) {
      hx[l] = ramp<float>(1 + l % 300, static_cast<float>(l % 17), 0.5f);
      hy[l] = ramp<float>(hx[l].size(), -1.f, 0.25f);
    }
    auto x = dk::place(hx, gpu, s);
    auto y = dk::place(hy, gpu, s);
    const auto tables = dk::detail::tree_counters().tables.load();
    const auto launches = dk::detail::tree_counters().launches.load();
    const auto scratch = dk::scratch_memory_stats(gpu).allocations;
    dk::tree_axpy(s, 2.f, x, y);
    CHECK(dk::detail::tree_counters().launches.load() == launches + 1);
    const bool in_args = leaves <= large;
    CHECK(dk::detail::tree_counters().tables.load() == tables + (in_args ? 0 : 1));
    CHECK(dk::scratch_memory_stats(gpu).allocations == scratch + (in_args ? 0 : 1));
    const auto back = dk::to_host(y, s);
    std::size_t wrong = 0;
    for (std::size_t l = 0; l < leaves; ++l) {
      for (std::size_t i = 0; i < hx[l].size(); ++i) wrong += back[l][i] != 2.f * hx[l][i] + hy[l][i] ? 1 : 0;
    }
    CHECK(wrong == 0);
  }
}

// Leaves of tree_whole_leaf_elements or more get a launch of their own (cub::DeviceTransform),
// the shorter ones share the chunk kernel's launch: results against the host on both sides of the
// threshold, with the output one of the inputs (tree_axpy), with a broadcast between two trees, with
// the whole-leaf launches turned off, inside a CUDA graph, and for reduced-precision leaves (which
// stay in the chunk kernel). Every value here is exact in float, so the host's arithmetic is the
// device's.
TEST_CASE("long leaves are launched on their own, shorter ones together", "[tree_algorithms][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  constexpr std::size_t whole = dk::detail::tree_whole_leaf_elements;
  const std::vector<std::size_t> lengths{whole - 1, whole, 1000, whole + 3};
  std::vector<std::vector<float>> hx;
  std::vector<std::vector<float>> hy;
  for (const std::size_t n : lengths) {
    hx.push_back(ramp<float>(n, -7.f, 0.25f));
    hy.push_back(ramp<float>(n, 3.f, 0.5f));
  }
  auto x = dk::place(hx, gpu, s);
  auto y = dk::place(hy, gpu, s);
  auto& counters = dk::detail::tree_counters();
  auto count_wrong = [](const auto& got, auto&& want) {
    std::size_t wrong = 0;
    for (std::size_t l = 0; l < got.size(); ++l) {
      for (std::size_t i = 0; i < got[l].size(); ++i) wrong += dk::widen(got[l][i]) != dk::widen(want(l, i)) ? 1 : 0;
    }
    return wrong;
  };

  auto launches = counters.launches.load();
  dk::tree_axpy(s, 2.f, x, y);                      // y = 2 x + y
  CHECK(counters.launches.load() == launches + 3);  // two whole leaves, one launch for the other two
  CHECK(count_wrong(dk::to_host(y, s), [&](std::size_t l, std::size_t i) { return 2.f * hx[l][i] + hy[l][i]; }) == 0);

  auto out = dk::zeros_like(x, gpu, s);
  launches = counters.launches.load();
  dk::tree_transform(s, out, scale_add{}, x, 0.5f, y);  // out = 0.5 x + (2 x + y0)
  CHECK(counters.launches.load() == launches + 3);
  CHECK(count_wrong(dk::to_host(out, s),
                    [&](std::size_t l, std::size_t i) { return 0.5f * hx[l][i] + (2.f * hx[l][i] + hy[l][i]); }) == 0);

  dk::detail::tree_whole_leaf_threshold() = SIZE_MAX;
  launches = counters.launches.load();
  dk::tree_axpy(s, -2.f, x, y);  // y back to y0, every leaf in the chunk kernel
  dk::detail::tree_whole_leaf_threshold() = whole;
  CHECK(counters.launches.load() == launches + 1);
  CHECK(count_wrong(dk::to_host(y, s), [&](std::size_t l, std::size_t i) { return hy[l][i]; }) == 0);

  dk::graph graph = dk::capture(s, [&] { dk::tree_axpy(s, 1.f, x, y); });  // y += x per replay
  for (int replay = 1; replay <= 3; ++replay) graph.launch(s);
  CHECK(count_wrong(dk::to_host(y, s), [&](std::size_t l, std::size_t i) { return hy[l][i] + 3.f * hx[l][i]; }) == 0);

  std::vector<std::vector<dk::bfloat16_t>> h16{ramp<dk::bfloat16_t>(whole, 1.f, 0.f),
                                               ramp<dk::bfloat16_t>(10, 2.f, 0.f)};
  auto b16 = dk::place(h16, gpu, s);
  launches = counters.launches.load();
  dk::tree_transform(s, b16, times{}, b16, 4.f);
  CHECK(counters.launches.load() == launches + 1);
  CHECK(count_wrong(dk::to_host(b16, s), [&](std::size_t l, std::size_t) {
          return dk::narrow_to<dk::bfloat16_t>(4.f * (l == 0 ? 1.f : 2.f));
        }) == 0);
}
