// A cuBLAS handle's workspace from a devicekit pool on a real GPU (memory/cublas_workspace.hpp):
// a GEMM runs with it, its bytes are the client "cublas" in the pool, and they go back after.
// Label gpu: skipped (exit 77) without a device.
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>
#include <devicekit/memory/cublas_workspace.hpp>

#include <cublas_v2.h>

#include <cstdint>
#include <vector>

namespace dk = devicekit;

TEST_CASE("cublasSgemm with its workspace from the pool", "[gpu][cublas]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::scoped_device on(0);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
  const dk::stream s(gpu);
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(h, s.native_handle()) == CUBLAS_STATUS_SUCCESS);
  const int n = 256;
  std::vector<float> a(static_cast<std::size_t>(n) * n, 1.f), b(a.size(), 2.f), c(a.size(), 0.f);
  float* d = static_cast<float*>(pool.allocate(3 * a.size() * sizeof(float), s));
  DEVICEKIT_CUDA_CHECK(
      cudaMemcpyAsync(d, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice, s.native_handle()));
  DEVICEKIT_CUDA_CHECK(
      cudaMemcpyAsync(d + a.size(), b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice, s.native_handle()));
  {
    const dk::cublas_workspace ws(h, pool);
    std::uint64_t counted = 0;
    for (const auto& cl : pool.client_stats()) {
      if (cl.client == "cublas") counted = cl.bytes_in_use;
    }
    CHECK(counted == dk::cublas_workspace::default_bytes);
    const float one = 1.f, zero = 0.f;
    REQUIRE(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, d, n, d + a.size(), n, &zero, d + 2 * a.size(),
                        n) == CUBLAS_STATUS_SUCCESS);
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(c.data(), d + 2 * a.size(), c.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                         s.native_handle()));
    s.synchronize();
  }
  CHECK(c.front() == 2.f * n);
  CHECK(c.back() == 2.f * n);
  for (const auto& cl : pool.client_stats()) {
    if (cl.client == "cublas") CHECK(cl.bytes_in_use == 0);
  }
  pool.deallocate(d, 3 * a.size() * sizeof(float), s);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  s.synchronize();
  pool.check_consistency();
}
