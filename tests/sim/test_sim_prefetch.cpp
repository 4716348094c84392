// prefetch on simulated GPUs: what the consumer stream still reads when the view goes. The rules
// every backend shares are in tests/common/place_cases.hpp.
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

// A prefetch view destroyed while the consumer stream still reads the batch it holds gives that
// batch back in the consumer's stream order: given back at once, a caching pool would hand it out
// again and new work would overwrite it under the consumer's pending reads.
TEST_CASE("a prefetch view destroyed early keeps the current batch until the consumer is past it", "[sim][prefetch]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(gpu.ordinal()), small_pool()};
  const dk::stream consumer(gpu);
  const dk::stream other(gpu);
  std::vector<std::vector<float>> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(ramp(1 << 16, static_cast<float>(100 * i)));
  // Pinned, so that the copy out of the batch is asynchronous (into pageable memory it would
  // return only once done).
  float* seen = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&seen), (1 << 16) * sizeof(float)) == cudaSuccess);
  gate g;
  std::atomic<int> overwritten{0};
  {
    auto view = dk::prefetch(batches, gpu, 2, pool, consumer.native_handle());
    auto it = view.begin();
    // The consumer's "kernel" is held; the copy out of the batch waits behind it.
    REQUIRE(cudaLaunchHostFunc(consumer.native_handle(), gate::hold, &g) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(seen, (*it).data(), (*it).size_bytes(), cudaMemcpyDeviceToHost, consumer.native_handle()) ==
            cudaSuccess);
    // The consumer is let go once the other stream's overwrite below has run (what happens when
    // the view frees the batch at once), or after 200 ms (when it waits for the consumer first).
    std::thread([&g, &overwritten] {
      const auto t0 = std::chrono::steady_clock::now();
      while (!overwritten.load() && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      g.open = true;
    }).detach();
  }  // the view goes while the consumer has not read the batch yet
  // New work on another stream takes what the pool has free (the view's three batches) and
  // overwrites it.
  std::vector<void*> taken;
  for (int i = 0; i < 3; ++i) {
    taken.push_back(pool.allocate((1 << 16) * sizeof(float), other));
    REQUIRE(cudaMemsetAsync(taken.back(), 0xEE, (1 << 16) * sizeof(float), other.native_handle()) == cudaSuccess);
  }
  REQUIRE(cudaLaunchHostFunc(other.native_handle(), set_flag, &overwritten) == cudaSuccess);
  consumer.synchronize();
  other.synchronize();
  CHECK(std::vector<float>(seen, seen + (1 << 16)) == batches[0]);
  for (void* p : taken) pool.deallocate(p, (1 << 16) * sizeof(float), other);
  REQUIRE(cudaFreeHost(seen) == cudaSuccess);
}
