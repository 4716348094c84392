// nvcc compiles the umbrella header and launches a kernel on the manager's default GPU.
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>

namespace dk = devicekit;

__global__ void iota_kernel(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}

TEST_CASE("a kernel runs on the default GPU through a devicekit stream", "[gpu][kernel]") {
  dk::device_manager<> dm{dk::settings{}};
  REQUIRE(dm.has_gpu());
  dk::scoped_device on(dm.default_device().ordinal());
  dk::stream s(dm.default_device());
  constexpr int n = 4096;
  int* d = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
  iota_kernel<<<(n + 255) / 256, 256, 0, s.native_handle()>>>(d, n);
  DEVICEKIT_CUDA_CHECK(cudaGetLastError());
  std::vector<int> h(n, -1);
  DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s.native_handle()));
  s.synchronize();
  DEVICEKIT_CUDA_CHECK(cudaFree(d));
  for (int i = 0; i < n; ++i) REQUIRE(h[static_cast<std::size_t>(i)] == i);
}
