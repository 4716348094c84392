// Placement cases that hold on every backend, one body each, compiled into the cpu, sim and gpu
// executables; tests/common/cases.hpp says how a backend includes them.
#pragma once

#include <catch2/catch.hpp>

#include <devicekit/place/copy.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/prefetch.hpp>
#include <devicekit/tree/hana.hpp>

#include <boost/hana/define_struct.hpp>

#include "cases.hpp"
#include "test_data.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <tuple>
#include <type_traits>
#include <vector>

namespace dk = devicekit;

namespace place_cases {

/// Random values that are never zero, so a copy that did nothing cannot pass.
inline std::mt19937_64& rng() {
  static std::mt19937_64 g(20261122);
  return g;
}
template <class T>
T nonzero() {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(std::uniform_real_distribution<double>(0.5, 100.0)(rng()));
  } else {
    return static_cast<T>(std::uniform_int_distribution<int>(1, 120)(rng()));
  }
}
template <class T>
std::vector<T> random_vector(std::size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) x = nonzero<T>();
  return v;
}
template <class A>
void fill(A& a) {
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = nonzero<typename A::value_type>();
}

/// Whether `p` is memory of `dev`: device memory of that ordinal for a GPU, any host memory for the cpu.
inline bool resides_on(const void* p, dk::device dev) {
#if DEVICEKIT_HAS_CUDA
  if (dev.is_cuda()) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) return false;
    return attr.type == cudaMemoryTypeDevice && attr.device == dev.ordinal();
  }
#endif
  return p != nullptr && dev.is_cpu();
}

/// The elements of `a` as the work on `s` sees them: a copy queued on `s` for a GPU (so it is
/// ordered after whatever `s` waits for), a read after `s` for the cpu.
template <class T>
std::vector<T> read_on(const dk::device_array<T>& a, const dk::stream& s) {
  std::vector<T> out(a.size());
#if DEVICEKIT_HAS_CUDA
  if (a.device().is_cuda()) {
    REQUIRE(cudaMemcpyAsync(out.data(), a.data(), a.size_bytes(), cudaMemcpyDeviceToHost, s.native_handle()) ==
            cudaSuccess);
    s.synchronize();
    return out;
  }
#endif
  s.synchronize();
  std::copy(a.data(), a.data() + a.size(), out.begin());
  return out;
}

#if DEVICEKIT_HAS_MDSPAN
using img_t = dk::shaped_array<float, dk::md::extents<std::size_t, dk::md::dynamic_extent, 3, 5>>;
struct batch {
  BOOST_HANA_DEFINE_STRUCT(batch, (img_t, images), (std::vector<std::int64_t>, labels), (float, scale));
};
#endif

}  // namespace place_cases

#if DEVICEKIT_HAS_MDSPAN
TEST_CASE(DEVICEKIT_CASE_NAME("every leaf type round-trips through the device with its data"),
          DEVICEKIT_CASE_TAGS("[place]")) {
  using namespace place_cases;
  const dk::device dev = DEVICEKIT_CASES_DEVICE();
  auto v = random_vector<float>(1000);
  auto d = random_vector<double>(77);
  std::array<std::uint8_t, 33> a{};
  for (auto& x : a) x = nonzero<std::uint8_t>();
  std::span<const double> sp(d);
  using e2 = dk::md::dextents<std::size_t, 2>;
  dk::shaped_array<int, e2> right(e2(7, 9));
  fill(right);
  dk::shaped_array<short, e2, dk::md::layout_left> left(e2(4, 6));
  fill(left);
  dk::shaped_array<float, e2, dk::md::layout_stride> strided(
      dk::md::layout_stride::mapping<e2>(e2(3, 4), dk::md::array<std::size_t, 2>{10, 2}));
  fill(strided);
  auto raw = random_vector<std::uint32_t>(12);
  dk::md::mdspan<std::uint32_t, dk::md::extents<std::size_t, 3, 4>> view(raw.data());
  batch b{img_t(img_t::extents_type(6)), random_vector<std::int64_t>(6), 3.5f};
  fill(b.images);

  const auto tree = std::make_tuple(v, a, sp, right, left, strided, view, std::int16_t{-9}, b);
  const auto placed = dk::place(tree, dev);
  CHECK(dk::device_of(placed) == dev);
  CHECK(resides_on(std::get<0>(placed).data(), dev));
  CHECK(resides_on(std::get<8>(placed).get<"labels">().data(), dev));
  const auto back = dk::to_host(placed);
  CHECK(std::get<0>(back) == v);
  CHECK(std::vector<std::uint8_t>(std::get<1>(back).begin(), std::get<1>(back).end()) ==
        std::vector<std::uint8_t>(a.begin(), a.end()));
  CHECK(std::get<2>(back) == d);
  CHECK(std::equal(right.data(), right.data() + right.size(), std::get<3>(back).data()));
  CHECK(std::equal(left.data(), left.data() + left.size(), std::get<4>(back).data()));
  CHECK(std::equal(strided.data(), strided.data() + strided.size(), std::get<5>(back).data()));
  CHECK(std::equal(raw.begin(), raw.end(), std::get<6>(back).data()));
  CHECK(std::get<7>(back) == -9);
  const batch& bb = std::get<8>(back);
  CHECK(bb.labels == b.labels);
  CHECK(bb.scale == 3.5f);
  CHECK(std::equal(b.images.data(), b.images.data() + b.images.size(), bb.images.data()));
}
#endif

TEST_CASE(DEVICEKIT_CASE_NAME("place on a caller's stream is ordered on that stream; the source may change after"),
          DEVICEKIT_CASE_TAGS("[place]")) {
  using namespace place_cases;
  const dk::device dev = DEVICEKIT_CASES_DEVICE();
  const dk::stream s(dev);
  auto src = random_vector<float>(1 << 16);
  const auto placed = dk::place(std::make_tuple(src), dev, s);
  src.assign(src.size(), 0.f);  // the source may change once place returns
  const auto check = read_on(std::get<0>(placed), s);
  CHECK(check[0] != 0.f);
  CHECK(check == std::get<0>(dk::to_host(placed)));
}

TEST_CASE(DEVICEKIT_CASE_NAME("prefetch delivers every tree, the consumer stream ordered after each copy"),
          DEVICEKIT_CASE_TAGS("[prefetch]")) {
  using namespace place_cases;
  const dk::device dev = DEVICEKIT_CASES_DEVICE();
  const dk::stream consumer(dev);
  std::vector<std::vector<float>> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(random_vector<float>(1 << 18));
  std::size_t k = 0;
  for (auto& placed : dk::prefetch(batches, dev, 2, consumer)) {
    CHECK(read_on(placed, consumer) == batches[k]);
    ++k;
  }
  CHECK(k == batches.size());
}

// The staged host copy writes the whole range its destinations span; a destination tree made of
// some leaves of a placed block must not have the leaves between them overwritten.
TEST_CASE(DEVICEKIT_CASE_NAME("copy into leaves picked from a placed block leaves the others alone"),
          DEVICEKIT_CASE_TAGS("[place][copy_into]")) {
  using namespace place_cases;
  const dk::device dev = DEVICEKIT_CASES_DEVICE();
  using devicekit::testing::ramp;
  const auto block = dk::place(std::make_tuple(ramp(1000, 0.f), ramp(1000, 100.f), ramp(1000, 200.f)), dev);
  auto outer = std::make_tuple(std::get<0>(block), std::get<2>(block));  // skips the middle leaf
  dk::copy(std::make_tuple(ramp(1000, -1.f), ramp(1000, -2.f)), outer);
  CHECK(dk::to_host(std::get<0>(block)) == ramp(1000, -1.f));
  CHECK(dk::to_host(std::get<1>(block)) == ramp(1000, 100.f));  // untouched
  CHECK(dk::to_host(std::get<2>(block)) == ramp(1000, -2.f));
}
