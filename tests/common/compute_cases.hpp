// Tree-algorithm cases that hold on every backend that runs the algorithms' work (the cpu device
// through Thrust's host systems, a GPU through compute/kernels.cuh), one body each;
// tests/common/cases.hpp says how a backend includes them. The simulator runs no kernels: its
// tests (tests/sim/test_sim_compute.cpp) check the host side with stand-in launches.
#pragma once

#include <catch2/catch.hpp>

#include <devicekit/place/place.hpp>
#include <devicekit/compute.hpp>

#include "cases.hpp"

#include <cstddef>
#include <limits>
#include <tuple>
#include <vector>

namespace dk = devicekit;

namespace compute_cases {

/// `n` elements start, start + step, ... narrowed to T.
template <class T>
std::vector<T> ramp(std::size_t n, float start, float step = 1.f) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = devicekit::narrow_to<T>(start + step * static_cast<float>(i));
  return v;
}

}  // namespace compute_cases

TEST_CASE(DEVICEKIT_CASE_NAME("tree_all_finite, tree_cast, tree_axpy and tree_fill on placed trees"),
          DEVICEKIT_CASE_TAGS("[tree_algorithms]")) {
  using compute_cases::ramp;
  const dk::device dev = DEVICEKIT_CASES_DEVICE();
  std::tuple<std::vector<float>, std::vector<float>, std::vector<float>> h{
      ramp<float>(300000, 0.f, 0.001f), ramp<float>(5, 1.f), {}};
  auto t = dk::place(h, dev);
  CHECK(dk::tree_all_finite(t));
  std::get<1>(h)[2] = std::numeric_limits<float>::infinity();
  auto bad = dk::place(h, dev);
  CHECK_FALSE(dk::tree_all_finite(bad));
  std::get<1>(h)[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(dk::tree_all_finite(dk::place(h, dev)));

  auto half = dk::tree_cast<dk::bfloat16_t>(t);
  auto hb = dk::to_host(half);
  for (std::size_t i = 0; i < std::get<0>(hb).size(); i += 997) {
    CHECK(dk::widen(std::get<0>(hb)[i]) == dk::widen(dk::narrow_to<dk::bfloat16_t>(std::get<0>(h)[i])));
  }
  auto y = dk::zeros_like(t, dev);
  dk::tree_fill(y, 1.f);
  dk::tree_axpy(2.f, t, y);
  auto hy = dk::to_host(y);
  for (std::size_t i = 0; i < std::get<0>(hy).size(); i += 991)
    CHECK(std::get<0>(hy)[i] == 1.f + 2.f * std::get<0>(h)[i]);
  CHECK(dk::tree_reduce(y, dk::reduce::max) == Approx(1.0 + 2.0 * std::get<0>(h).back()));
}
