// The tree algorithms (compute.hpp) on the cpu device: every algorithm and element type
// against a plain loop, broadcast scalars, zero-length leaves, a 1,000-leaf tree, Hana structs,
// tuples and vectors of leaves, and the errors for mismatched structures and devices; and the
// cases every backend runs (tests/common/compute_cases.hpp).
#include <catch2/catch.hpp>

#include <devicekit/compute/detail/chunk_share.hpp>
#include <devicekit/compute.hpp>
#include <devicekit/tree/hana.hpp>

#include <boost/hana/define_struct.hpp>

// The cases every backend runs, on cpu:0.
#define DEVICEKIT_CASES_BACKEND "cpu"
#define DEVICEKIT_CASES_DEVICE() devicekit::device::cpu()
#include "../common/compute_cases.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

namespace dk = devicekit;

namespace tree_algorithms_test {
struct params {
  BOOST_HANA_DEFINE_STRUCT(params, (std::vector<float>, w), (std::vector<float>, b), (float, scale));
};
}  // namespace tree_algorithms_test
using namespace tree_algorithms_test;

namespace tree_algorithms_test {
/// A user's leaf type whose leaf_traits say nothing of always_on_host: its device is asked.
struct user_buffer {
  float* p = nullptr;
  std::size_t n = 0;
};
}  // namespace tree_algorithms_test
template <>
struct devicekit::leaf_traits<tree_algorithms_test::user_buffer> {
  static constexpr bool is_leaf = true;
  static constexpr leaf_kind kind = leaf_kind::contiguous;
  using element_type = float;
  static constexpr std::size_t rank = 1;
  static const float* data(const tree_algorithms_test::user_buffer& b) noexcept { return b.p; }
  static std::size_t size(const tree_algorithms_test::user_buffer& b) noexcept { return b.n; }
  static std::array<std::size_t, 1> shape(const tree_algorithms_test::user_buffer& b) noexcept { return {b.n}; }
  static dk::device device(const tree_algorithms_test::user_buffer&) noexcept { return dk::device::cuda(0); }
};
using compute_cases::ramp;

TEMPLATE_TEST_CASE("tree_transform matches a plain loop for every element type", "[tree_algorithms]", int, float,
                   double, dk::float16_t, dk::bfloat16_t, dk::float8_e4m3_t, dk::float8_e5m2_t) {
  using T = TestType;
  std::tuple<std::vector<T>, std::vector<T>> x{ramp<T>(100, -3.f, 0.25f), ramp<T>(7, 1.f)};
  std::tuple<std::vector<T>, std::vector<T>> y{ramp<T>(100, 2.f, 0.5f), ramp<T>(7, -2.f)};
  auto out = dk::zeros_like(x, dk::device::cpu());
  dk::tree_transform(
      out, [](auto a, float c, auto b) { return a * c + b; }, x, 0.5f, y);
  auto check = [](const auto& o, const auto& a, const auto& b) {
    REQUIRE(o.size() == a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const auto want = dk::narrow_to<T>(dk::widen(a[i]) * 0.5f + dk::widen(b[i]));
      CHECK(dk::widen(o.data()[i]) == dk::widen(want));
    }
  };
  check(std::get<0>(out), std::get<0>(x), std::get<0>(y));
  check(std::get<1>(out), std::get<1>(x), std::get<1>(y));
}

TEMPLATE_TEST_CASE("tree_reduce, tree_global_norm and tree_axpy match plain loops", "[tree_algorithms]", int, float,
                   double, dk::float16_t, dk::bfloat16_t, dk::float8_e4m3_t) {
  using T = TestType;
  std::vector<std::vector<T>> t{ramp<T>(50, -4.f, 0.25f), ramp<T>(3, 2.f), {}};
  double sum = 0, sumsq = 0, max = -std::numeric_limits<double>::infinity();
  for (const auto& leaf : t) {
    for (const T& e : leaf) {
      const double v = static_cast<double>(dk::widen(e));
      sum += v;
      sumsq += v * v;
      max = std::max(max, v);
    }
  }
  CHECK(dk::tree_reduce(t, dk::reduce::sum) == Approx(sum));
  CHECK(dk::tree_reduce(t, dk::reduce::sumsq) == Approx(sumsq));
  CHECK(dk::tree_reduce(t, dk::reduce::max) == max);
  CHECK(dk::tree_global_norm(t) == Approx(std::sqrt(sumsq)));
  CHECK(dk::tree_all_finite(t));

  auto y = t;
  dk::tree_axpy(2, t, y);  // y = 3 t
  for (std::size_t l = 0; l < t.size(); ++l) {
    for (std::size_t i = 0; i < t[l].size(); ++i) {
      const auto want = dk::narrow_to<T>(2 * dk::widen(t[l][i]) + dk::widen(t[l][i]));
      CHECK(dk::widen(y[l][i]) == dk::widen(want));
    }
  }
}

TEMPLATE_TEST_CASE("tree_all_finite finds NaN and infinity", "[tree_algorithms]", float, double, dk::float16_t,
                   dk::bfloat16_t, dk::float8_e5m2_t) {
  using T = TestType;
  std::tuple<std::vector<T>, std::vector<T>> t{ramp<T>(1000, 0.f, 0.01f), ramp<T>(5, 1.f)};
  CHECK(dk::tree_all_finite(t));
  std::get<1>(t)[3] = dk::narrow_to<T>(std::numeric_limits<float>::quiet_NaN());
  CHECK_FALSE(dk::tree_all_finite(t));
  std::get<1>(t)[3] = T{};
  CHECK(dk::tree_all_finite(t));
  if constexpr (sizeof(T) == 1) {
    const std::uint8_t minus_inf = 0xFC;  // E5M2: conversions saturate, so write the bits
    std::memcpy(&std::get<0>(t)[999], &minus_inf, 1);
  } else {
    std::get<0>(t)[999] = dk::narrow_to<T>(-std::numeric_limits<float>::infinity());
  }
  REQUIRE(std::isinf(dk::widen(std::get<0>(t)[999])));
  CHECK_FALSE(dk::tree_all_finite(t));
}

TEST_CASE("fp8 e4m3 has no infinity: its NaN is still found", "[tree_algorithms]") {
  std::vector<dk::float8_e4m3_t> v = ramp<dk::float8_e4m3_t>(16, 0.f);
  CHECK(dk::tree_all_finite(v));
  v[2] = dk::narrow_to<dk::float8_e4m3_t>(std::numeric_limits<float>::quiet_NaN());
  CHECK_FALSE(dk::tree_all_finite(v));
}

TEST_CASE("integer leaves are always finite; bool leaves reduce as 0/1", "[tree_algorithms]") {
  std::tuple<std::vector<std::int64_t>, std::vector<bool>> t{{1, -2, 3}, {true, false, true}};
  CHECK(dk::tree_all_finite(std::get<0>(t)));
  CHECK(dk::tree_reduce(std::get<0>(t), dk::reduce::sum) == 2.0);
  CHECK(dk::tree_reduce(std::get<0>(t), dk::reduce::max) == 3.0);
}

TEST_CASE("tree_fill, zeros_like and tree_cast keep the structure", "[tree_algorithms]") {
  params p{ramp<float>(6, 1.f), ramp<float>(2, -1.f), 3.f};
  auto z = dk::zeros_like(p, dk::device::cpu());
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(z.get<0>())>, dk::device_array<float>>);
  CHECK(z.get<0>().size() == 6);
  CHECK(z.get<1>().size() == 2);
  CHECK(z.get<2>() == 0.f);
  CHECK(dk::tree_reduce(z, dk::reduce::sumsq) == 0.0);
  CHECK(dk::same_structure(z, p));

  dk::tree_fill(z, 1.5);
  for (float e : z.get<0>().span()) CHECK(e == 1.5f);
  CHECK(z.get<2>() == 1.5f);

  auto h = dk::tree_cast<dk::bfloat16_t>(p);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(h.get<0>())>, dk::device_array<dk::bfloat16_t>>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(h.get<2>())>, dk::bfloat16_t>);
  for (std::size_t i = 0; i < p.w.size(); ++i) CHECK(dk::widen(h.get<0>().data()[i]) == p.w[i]);
  CHECK(dk::widen(h.get<2>()) == 3.f);
  // In place: back to fp32 master weights.
  auto back = dk::zeros_like(p, dk::device::cpu());
  dk::tree_cast(back, h);
  CHECK(dk::tree_reduce(back, dk::reduce::sum) == Approx(dk::tree_reduce(p, dk::reduce::sum)));
}

TEST_CASE("shaped leaves and zero-length leaves", "[tree_algorithms]") {
#if DEVICEKIT_HAS_MDSPAN
  using img_t = dk::shaped_array<float, dk::md::dextents<std::size_t, 2>>;
  std::tuple<img_t, std::vector<double>> t{img_t(dk::md::dextents<std::size_t, 2>(3, 4)), {}};
  dk::tree_fill(t, 2);
  CHECK(dk::tree_reduce(t, dk::reduce::sum) == 24.0);
  auto c = dk::tree_cast<dk::float16_t>(t);
  static_assert(std::is_same_v<std::tuple_element_t<0, decltype(c)>,
                               dk::shaped_array<dk::float16_t, dk::md::dextents<std::size_t, 2>>>);
  CHECK(std::get<0>(c).extent(1) == 4);
  CHECK(std::get<1>(c).size() == 0);
  CHECK(dk::tree_reduce(c, dk::reduce::max) == 2.0);
#endif
  std::vector<std::vector<float>> empty_leaves(3);
  dk::tree_fill(empty_leaves, 1.f);
  CHECK(dk::tree_reduce(empty_leaves, dk::reduce::sum) == 0.0);
  CHECK(dk::tree_reduce(empty_leaves, dk::reduce::max) == -std::numeric_limits<double>::infinity());
  CHECK(dk::tree_all_finite(empty_leaves));
}

TEST_CASE("host reductions: the largest element in every lane and in the tail", "[tree_algorithms]") {
  // The host loop reduces in four interleaved partial results plus a tail: the maximum is found
  // wherever it sits, and the sums match a plain loop, for every length around those steps.
  for (std::size_t n = 1; n <= 11; ++n) {
    for (std::size_t at = 0; at < n; ++at) {
      std::vector<float> leaf = ramp<float>(n, -5.f, 0.5f);
      leaf[at] = 100.f + static_cast<float>(at);
      double sum = 0;
      double sumsq = 0;
      for (float e : leaf) {
        sum += e;
        sumsq += static_cast<double>(e) * e;
      }
      const std::tuple<std::vector<float>, float> t{leaf, -1.f};
      CHECK(dk::tree_reduce(t, dk::reduce::max) == 100.0 + static_cast<double>(at));
      CHECK(dk::tree_reduce(t, dk::reduce::sum) == Approx(sum - 1.0));
      CHECK(dk::tree_reduce(t, dk::reduce::sumsq) == Approx(sumsq + 1.0));
    }
  }
}

TEST_CASE("trees of host containers are known to be on the cpu by their type", "[tree_algorithms]") {
  // Those trees skip the device walks; any devicekit leaf (whose device is known at run time
  // only) keeps them.
  STATIC_REQUIRE(dk::detail::leaves_on_host_by_type<std::vector<std::vector<float>>>());
  STATIC_REQUIRE(dk::detail::leaves_on_host_by_type<params>());
  STATIC_REQUIRE(dk::detail::leaves_on_host_by_type<std::tuple<std::array<std::vector<double>, 2>, int>>());
  STATIC_REQUIRE_FALSE(dk::detail::leaves_on_host_by_type<std::tuple<std::vector<float>, dk::device_array<float>>>());
  STATIC_REQUIRE_FALSE(dk::detail::leaves_on_host_by_type<std::vector<dk::device_array<float>>>());
  STATIC_REQUIRE_FALSE(dk::detail::leaves_on_host_by_type<std::tuple<user_buffer, std::vector<float>>>());
  // ... so such a leaf is still checked against the host trees beside it.
  std::vector<float> x{1, 2, 3};
  const std::tuple<user_buffer, std::vector<float>> with_user_leaf{{x.data(), 3}, {4, 5}};
  std::tuple<std::vector<float>, std::vector<float>> y{{0, 0, 0}, {0, 0}};
  CHECK_THROWS_AS(dk::tree_axpy(1.f, with_user_leaf, y), dk::device_mismatch);
  CHECK(std::get<0>(y) == std::vector<float>{0, 0, 0});
}

TEST_CASE("host leaf passes: one per leaf with elements, counted once per call", "[tree_algorithms]") {
  const std::uint64_t& passes = dk::detail::host_leaf_passes();  // this thread's
  std::vector<std::vector<float>> x{{1, 2}, {}, {3}};
  auto y = x;
  const auto before = passes;
  dk::tree_axpy(1.f, x, y);
  CHECK(passes - before == 2);
  CHECK(dk::tree_reduce(y, dk::reduce::sum) == 12.0);
  CHECK(passes - before == 4);
}

TEST_CASE("a 1,000-leaf tree", "[tree_algorithms]") {
  std::vector<std::vector<float>> g;
  double sumsq = 0;
  for (std::size_t l = 0; l < 1000; ++l) {
    g.push_back(ramp<float>(l % 17, static_cast<float>(l) * 0.001f, 0.5f));
    for (float e : g.back()) sumsq += static_cast<double>(e) * e;
  }
  CHECK(dk::tree_global_norm(g) == Approx(std::sqrt(sumsq)));
  // Gradient clipping to norm 1, the way clip_grad_norm_ scales: g *= max_norm / norm.
  const double norm = dk::tree_global_norm(g);
  dk::tree_transform(
      g, [](float e, float scale) { return e * scale; }, g, static_cast<float>(1.0 / norm));
  CHECK(dk::tree_global_norm(g) == Approx(1.0));
}

TEST_CASE("placed cpu trees and host trees mix on the cpu device", "[tree_algorithms]") {
  std::vector<float> host = ramp<float>(10, 0.f);
  auto placed = dk::place(host, dk::device::cpu());
  dk::tree_axpy(1.f, host, placed);
  for (std::size_t i = 0; i < host.size(); ++i) CHECK(placed.data()[i] == 2 * host[i]);
  const dk::stream cpu_stream;
  dk::tree_fill(cpu_stream, placed, 0.f);
  CHECK(dk::tree_reduce(cpu_stream, placed, dk::reduce::sumsq) == 0.0);
}

TEST_CASE("trees of different structure or devices are refused", "[tree_algorithms]") {
  std::vector<std::vector<float>> a{{1, 2}, {3}};
  std::vector<std::vector<float>> fewer{{1, 2}};
  std::vector<std::vector<float>> shorter{{1, 2}, {}};
  CHECK_THROWS_AS(dk::tree_transform(
                      a, [](float x) { return x; }, fewer),
                  dk::tree_structure_error);
  CHECK_THROWS_WITH(dk::tree_axpy(1.f, shorter, a), Catch::Contains("'[1]'") && Catch::Contains("1 elements"));

  // A leaf that claims another device: device_mismatch before anything runs.
  std::vector<float> x{1, 2, 3};
  auto on_gpu = dk::device_array<float>::view(x.data(), x.size(), dk::device::cuda(0));
  std::vector<float> y{0, 0, 0};
  CHECK_THROWS_AS(dk::tree_axpy(1.f, on_gpu, y), dk::device_mismatch);
  std::tuple<std::vector<float>, dk::device_array<float>> mixed{y, on_gpu};
  CHECK_THROWS_AS(dk::tree_fill(mixed, 1.f), dk::device_mismatch);
  CHECK(y == std::vector<float>{0, 0, 0});
}

TEST_CASE("a cuda tree in a translation unit without the kernels is a clear error", "[tree_algorithms]") {
  std::vector<float> x{1, 2, 3};
  auto on_gpu = dk::device_array<float>::view(x.data(), x.size(), dk::device::cuda(0));
  // The header docs/tree-algorithms.md documents, and no other path.
  CHECK_THROWS_WITH(dk::tree_fill(on_gpu, 1.f),
                    Catch::Contains("nvcc") && Catch::Contains("<devicekit/compute/kernels.cuh>"));
  CHECK_THROWS_WITH(dk::tree_fill(on_gpu, 1.f), !Catch::Contains("tree/algorithms.cuh"));
  CHECK_THROWS_AS(dk::tree_global_norm(on_gpu), dk::config_error);
  CHECK(x == std::vector<float>{1, 2, 3});
}

namespace tree_algorithms_test {
/// a * x + y, counting its calls (through a pointer: the job's functor is const).
struct counted_axpy {
  std::size_t* calls;
  float operator()(float x, float a, float y) const {
    ++*calls;
    return a * x + y;
  }
};
struct counted_widen {
  std::size_t* calls;
  double operator()(float x) const {
    ++*calls;
    return 2.0 * x;
  }
};
/// The first element of `v` at or after `from` whose address is a multiple of `align`.
template <class T>
T* aligned_at(std::vector<T>& v, std::size_t align) {
  std::size_t i = 0;
  while (reinterpret_cast<std::uintptr_t>(v.data() + i) % align != 0) ++i;
  return v.data() + i;
}
}  // namespace tree_algorithms_test

// The loop that each thread of compute/kernels.cuh runs over its block's chunk, here on the host
// for every thread of a block in turn: the vector path (every pointer aligned) and the unrolled
// scalar path must cover each element exactly once, whatever the length, the block size and the
// alignment of each pointer, and touch nothing outside the chunk.
TEST_CASE("a block's threads compute every element of a chunk exactly once", "[tree_algorithms]") {
  namespace dd = dk::detail;
  const std::vector<std::size_t> lengths = [] {
    std::vector<std::size_t> l;
    for (std::size_t n = 1; n <= 40; ++n) l.push_back(n);
    for (std::size_t n : {255, 256, 257, 1023, 1024, 1025, 4099}) l.push_back(n);
    return l;
  }();
  CHECK(dd::vector_aligned(static_cast<const float*>(nullptr)));  // a broadcast position
  SECTION("in place, as tree_axpy's y: out[i] = 0.5 * x[i] + out[i]") {
    std::size_t calls = 0;
    using job_t = dd::transform_job<counted_axpy, dd::tree_position, float, dd::tree_position>;
    const job_t job{counted_axpy{&calls}, {{dd::tree_position{}}, {0.5f}, {dd::tree_position{}}}};
    for (std::size_t threads : {1, 3, 32, 256}) {
      for (std::size_t n : lengths) {
        for (std::size_t x_shift : {0, 1, 2}) {
          for (std::size_t y_shift : {0, 3}) {
            std::vector<float> xs(n + 16, -7.f);
            std::vector<float> ys(n + 16, -9.f);
            float* x = tree_algorithms_test::aligned_at(xs, 16) + x_shift;
            float* y = tree_algorithms_test::aligned_at(ys, 16) + y_shift;
            for (std::size_t i = 0; i < n; ++i) {
              x[i] = static_cast<float>(1 + i % 7);  // never 0: computing twice would show
              y[i] = static_cast<float>(i);
            }
            const bool aligned = x_shift == 0 && y_shift == 0;
            CHECK(dd::vector_aligned(x) == (x_shift == 0));
            const dd::tree_chunk<4> chunk{{y, x, nullptr, y}, n};
            calls = 0;
            for (std::size_t t = 0; t < threads; ++t) {
              dd::transform_chunk_share<job_t, float, float, float, float>(job, chunk, std::index_sequence<0, 1, 2>{},
                                                                           t, threads);
            }
            INFO("threads " << threads << ", n " << n << ", aligned " << aligned);
            CHECK(calls == n);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < n; ++i) wrong += y[i] != 0.5f * x[i] + static_cast<float>(i) ? 1 : 0;
            CHECK(wrong == 0);
            CHECK(std::count(ys.begin(), ys.end(), -9.f) == static_cast<std::ptrdiff_t>(ys.size() - n));
          }
        }
      }
    }
  }
  SECTION("a double output from float inputs: each pointer aligned for its own type") {
    std::size_t calls = 0;
    using job_t = dd::transform_job<counted_widen, dd::tree_position>;
    const job_t job{counted_widen{&calls}, {{dd::tree_position{}}}};
    for (std::size_t threads : {7, 256}) {
      for (std::size_t n : lengths) {
        for (std::size_t out_shift : {0, 2}) {  // 2 doubles: 16-byte aligned, not 32
          std::vector<float> xs(n + 16);
          std::vector<double> outs(n + 16, -1.0);
          float* x = tree_algorithms_test::aligned_at(xs, 16);
          double* out = tree_algorithms_test::aligned_at(outs, 32) + out_shift;
          CHECK(dd::vector_aligned(out) == (out_shift == 0));
          for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i) + 0.25f;
          const dd::tree_chunk<2> chunk{{out, x}, n};
          calls = 0;
          for (std::size_t t = 0; t < threads; ++t) {
            dd::transform_chunk_share<job_t, double, float>(job, chunk, std::index_sequence<0>{}, t, threads);
          }
          INFO("threads " << threads << ", n " << n << ", out shifted " << out_shift);
          CHECK(calls == n);
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < n; ++i) wrong += out[i] != 2.0 * (static_cast<double>(i) + 0.25) ? 1 : 0;
          CHECK(wrong == 0);
          CHECK(std::count(outs.begin(), outs.end(), -1.0) == static_cast<std::ptrdiff_t>(outs.size() - n));
        }
      }
    }
  }
}
