// Thrust's and CUB's temporary memory from a devicekit pool (memory/thrust_policy.cuh,
// memory/cub_temp_storage.hpp): the algorithms' results, their scratch counted in the pool as the
// client "thrust/cub" while they run and given back after, on a stream of the test's own.
// Label gpu: skipped (exit 77) without a device.
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>
#include <devicekit/memory/cub_temp_storage.hpp>
#include <devicekit/memory/thrust_policy.cuh>

#include <cub/device/device_reduce.cuh>
#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cstdint>
#include <vector>

namespace dk = devicekit;

namespace {
std::uint64_t thrust_cub_bytes(const dk::device_memory& pool) {
  for (const auto& c : pool.client_stats()) {
    if (c.client == "thrust/cub") return c.bytes_in_use;
  }
  return 0;
}
std::uint64_t thrust_cub_allocs(const dk::device_memory& pool) {
  for (const auto& c : pool.client_stats()) {
    if (c.client == "thrust/cub") return c.num_allocs;
  }
  return 0;
}
}  // namespace

TEST_CASE("thrust::sort on exec_policy takes its scratch from the pool, as thrust/cub", "[gpu][thrust]") {
  const dk::device gpu = dk::device::cuda(0);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
  const dk::stream s(gpu);
  const int n = 1 << 20;
  thrust::device_vector<int> keys(n);
  thrust::sequence(keys.begin(), keys.end(), 0);
  thrust::sort(dk::exec_policy(pool, s), keys.begin(), keys.end(), thrust::greater<int>());
  s.synchronize();
  std::vector<int> back(4);
  thrust::copy(keys.begin(), keys.begin() + 4, back.begin());
  CHECK(back == std::vector<int>{n - 1, n - 2, n - 3, n - 4});
  CHECK(thrust_cub_allocs(pool) >= 1);  // sort's temporary storage came from the pool
  CHECK(thrust_cub_bytes(pool) == 0);   // and went back
  const long long sum = thrust::reduce(dk::exec_policy_nosync(pool, s), keys.begin(), keys.end(), 0LL);
  CHECK(sum == static_cast<long long>(n) * (n - 1) / 2);
  s.synchronize();
  CHECK(thrust_cub_bytes(pool) == 0);
  pool.check_consistency();
}

TEST_CASE("cub::DeviceReduce::Sum with cub_temp_storage from the pool", "[gpu][cub]") {
  const dk::device gpu = dk::device::cuda(0);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
  const dk::stream s(gpu);
  const int n = 1 << 16;
  thrust::device_vector<int> in(n, 3);
  thrust::device_vector<int> out(1);
  {
    dk::cub_temp_storage tmp(pool, s);
    const cudaError_t e = tmp.run([&](void* storage, std::size_t& bytes) {
      return cub::DeviceReduce::Sum(storage, bytes, thrust::raw_pointer_cast(in.data()),
                                    thrust::raw_pointer_cast(out.data()), n, s.native_handle());
    });
    REQUIRE(e == cudaSuccess);
    CHECK(tmp.size() > 0);
    CHECK(thrust_cub_bytes(pool) == tmp.size());
    s.synchronize();
  }
  CHECK(out[0] == 3 * n);
  CHECK(thrust_cub_bytes(pool) == 0);
  pool.check_consistency();
}
