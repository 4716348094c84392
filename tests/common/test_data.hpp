#pragma once
// Data and checks shared by the cpu, sim and gpu tests: a ramp of floats whose every element
// differs, and the device_mismatch a call throws.
#include <catch2/catch.hpp>

#include <devicekit/place/place.hpp>

#include <cstddef>
#include <optional>
#include <vector>

namespace devicekit::testing {

/// `n` floats counting up from `start`: every element differs, so a misplaced byte shows.
inline std::vector<float> ramp(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

/// The device_mismatch `f` throws, or nullopt (and a failed check) when it throws none.
template <class F>
std::optional<device_mismatch> mismatch_of(F&& f) {
  try {
    f();
  } catch (const device_mismatch& e) {
    return e;
  }
  FAIL_CHECK("no device_mismatch was thrown");
  return std::nullopt;
}

}  // namespace devicekit::testing
