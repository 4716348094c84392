#pragma once
// Shared by the simulator's tests: a host function that holds a stream (a stand-in for a long
// kernel) and one that raises a flag (host functions make no CUDA call, as cudaLaunchHostFunc
// requires); checked calls and scoped CUDA objects.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
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

inline void ok(cudaError_t e) { REQUIRE(e == cudaSuccess); }

/// A CUDA object of one case: `make` creates it (checked); `release` frees it at the end of its
/// scope (checked).
template <class Handle>
class scoped {
 public:
  template <class Make>
  scoped(Make make, cudaError_t (*release)(Handle)) : release_(release) {
    ok(make(&h_));
  }
  ~scoped() { CHECK(release_(h_) == cudaSuccess); }
  scoped(const scoped&) = delete;
  scoped& operator=(const scoped&) = delete;
  operator Handle() const { return h_; }
  [[nodiscard]] Handle get() const { return h_; }

 private:
  Handle h_{};
  cudaError_t (*release_)(Handle);
};

/// A stream of the current device.
inline scoped<cudaStream_t> scoped_stream(unsigned flags = cudaStreamNonBlocking) {
  return {[flags](cudaStream_t* s) { return cudaStreamCreateWithFlags(s, flags); }, cudaStreamDestroy};
}

/// An event of the current device.
inline scoped<cudaEvent_t> scoped_event(unsigned flags) {
  return {[flags](cudaEvent_t* e) { return cudaEventCreateWithFlags(e, flags); }, cudaEventDestroy};
}

/// `bytes` of device memory on the current device (cudaMalloc).
inline scoped<void*> scoped_device_memory(std::size_t bytes) {
  return {[bytes](void** p) { return cudaMalloc(p, bytes); }, cudaFree};
}

/// `bytes` of pinned host memory (cudaMallocHost), every byte `fill`; the case frees it.
inline void* pinned_host(std::size_t bytes, int fill) {
  void* h = nullptr;
  ok(cudaMallocHost(&h, bytes));
  std::memset(h, fill, bytes);
  return h;
}

}  // namespace sim_test
