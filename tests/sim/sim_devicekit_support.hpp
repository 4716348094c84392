#pragma once
// Shared by the simulator tests of devicekit's CUDA paths: a small device pool, what a driver pool
// grants a peer, a call timed on a thread of its own, large trees, and streams made outside
// devicekit; and the names those tests use unqualified.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>
#include <devicekit/devicekit.hpp>

#include "../common/pools.hpp"
#include "../common/test_data.hpp"
#include "sim_test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

namespace sim_test {

/// What `accessor` may do with the memory of `r`'s driver pool.
inline cudaMemAccessFlags pool_access(const devicekit::cuda_device_resource& r, int accessor) {
  cudaMemLocation where{};
  where.type = cudaMemLocationTypeDevice;
  where.id = accessor;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  REQUIRE(cudaMemPoolGetAccess(&flags, r.native_pool(), &where) == cudaSuccess);
  return flags;
}

using devicekit::testing::small_pool;

/// Every simulated GPU, in order.
inline std::vector<devicekit::device> all_gpus() {
  std::vector<devicekit::device> out;
  for (int i = 0; i < devicekit::cuda_sim::device_count(); ++i) out.push_back(devicekit::device::cuda(i));
  return out;
}

/// Whether every simulated GPU can access every other (DEVICEKIT_SIM_PEER).
inline bool all_peers() {
  const int n = devicekit::cuda_sim::device_count();
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      int can = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || can == 0)) return false;
    }
  }
  return true;
}

/// What `f` throws as capture_error, or "" when it throws nothing.
template <class F>
std::string capture_refusal(F&& f) {
  try {
    f();
  } catch (const devicekit::capture_error& e) {
    return e.what();
  }
  return {};
}

/// Runs `f` on a thread of its own and reports whether it returned within `limit`; the thread is
/// joined either way (the caller opens whatever held it), so a failing check cannot hang.
class timed_call {
 public:
  template <class F>
  explicit timed_call(F f)
      : worker_([this, f]() mutable {
          f();
          done_ = true;
        }) {}
  timed_call(const timed_call&) = delete;
  timed_call& operator=(const timed_call&) = delete;
  ~timed_call() { worker_.join(); }
  [[nodiscard]] bool finished_within(std::chrono::milliseconds limit) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (!done_.load() && std::chrono::steady_clock::now() - t0 < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done_.load();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread worker_;
};

/// A tree of `leaves` float leaves with `floats_each` elements, different values in each.
inline std::vector<std::vector<float>> big_tree(std::size_t leaves, std::size_t floats_each) {
  std::vector<std::vector<float>> t;
  for (std::size_t i = 0; i < leaves; ++i) {
    t.push_back(devicekit::testing::ramp(floats_each, static_cast<float>(i) * 1e6f));
  }
  return t;
}

/// A stream made outside devicekit (as PyTorch or the program would), on `ordinal`.
inline cudaStream_t foreign_stream_on(int ordinal) {
  const devicekit::scoped_device on(ordinal);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  return s;
}

/// The calling thread's current CUDA device.
inline int current_device() {
  int d = -1;
  REQUIRE(cudaGetDevice(&d) == cudaSuccess);
  return d;
}

}  // namespace sim_test

namespace dk = devicekit;
namespace sim = devicekit::cuda_sim;
using devicekit::testing::mismatch_of;
using devicekit::testing::ramp;
using sim_test::all_gpus;
using sim_test::all_peers;
using sim_test::big_tree;
using sim_test::capture_refusal;
using sim_test::current_device;
using sim_test::foreign_stream_on;
using sim_test::gate;
using sim_test::pool_access;
using sim_test::set_flag;
using sim_test::small_pool;
using sim_test::timed_call;
