#pragma once
// Shared by the simulator's tests: a host function that holds a stream (a stand-in for a long
// kernel) and one that raises a flag. Host functions make no CUDA call, as cudaLaunchHostFunc
// requires.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace sim_test {

/// Holds its stream until the test opens it; gives up after 10 s so that a broken test cannot hang.
struct gate {
  std::atomic<bool> open{false};
  static void CUDART_CB hold(void* p) {
    auto* g = static_cast<gate*>(p);
    const auto t0 = std::chrono::steady_clock::now();
    while (!g->open.load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

inline void CUDART_CB set_flag(void* p) { static_cast<std::atomic<int>*>(p)->store(1); }

}  // namespace sim_test
