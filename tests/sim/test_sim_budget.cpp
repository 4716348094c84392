// Budgets on simulated GPUs of every size: the simulator charges a context what devicekit budgets
// for one (devicekit/memory/context_headroom.hpp), and free memory never wraps. The cases tagged
// [small_gpu] allocate all free memory and run only under DEVICEKIT_SIM_GPU0=memory=256MiB, 512MiB
// and 1GiB (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <devicekit/memory/context_headroom.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

std::uint64_t total_of(int device) {
  cudaDeviceProp p{};
  REQUIRE(cudaGetDeviceProperties(&p, device) == cudaSuccess);
  return p.totalGlobalMem;
}

std::uint64_t free_now() {
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  REQUIRE(free_bytes <= total);
  return free_bytes;
}

}  // namespace

TEST_CASE("free memory is total less the context and what is allocated, never below zero",
          "[.][sim][memory][budget][small_gpu]") {
  const std::uint64_t total = total_of(0);
  const std::uint64_t context = dk::cuda_context_headroom_bytes(total);
  REQUIRE(context < total);
  const std::uint64_t in_use = sim::device_bytes_in_use(0);
  CHECK(free_now() == total - context - in_use);

  // Everything that is free can be taken, and then nothing more.
  const std::uint64_t all = free_now();
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, static_cast<std::size_t>(all)) == cudaSuccess);
  CHECK(free_now() == 0);
  void* q = nullptr;
  CHECK(cudaMalloc(&q, 1) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(free_now() == all);

  // A size that would wrap the simulator's sums is refused, not served.
  CHECK(cudaMalloc(&q, std::numeric_limits<std::size_t>::max() - 100) == cudaErrorMemoryAllocation);
  CHECK(q == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(free_now() == all);
}
