// quickstart_cuda: the same header from a .cu file, compiled by nvcc. Picks the default device,
// and runs a kernel there when it is a GPU; on the CPU it runs the same loop on the host. Every
// element of the result is compared with 3 * x + 2 worked out on the host: the program exits with
// status 1, naming the first wrong element, when one differs.
#include <devicekit/devicekit.hpp>

#include <cstdio>
#include <vector>

namespace dk = devicekit;

__global__ void saxpy(int n, float a, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main() try {
  dk::device_manager<> dm;
  const dk::device dev = dm.default_device();
  constexpr int n = 1 << 16;
  std::vector<float> x(n, 1.0f), y(n, 2.0f);
  if (dev.is_cuda()) {
    dk::scoped_device on(dev.ordinal());
    dk::stream s(dev);
    // Stream-ordered allocations from the manager's pool of the device (inside its budget).
    dk::device_memory& pool = dm.memory(dev);
    auto* dx = static_cast<float*>(pool.allocate(n * sizeof(float), s));
    auto* dy = static_cast<float*>(pool.allocate(n * sizeof(float), s));
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, s.native_handle()));
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, s.native_handle()));
    saxpy<<<(n + 255) / 256, 256, 0, s.native_handle()>>>(n, 3.0f, dx, dy);
    DEVICEKIT_CUDA_CHECK(cudaGetLastError());
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, s.native_handle()));
    pool.deallocate(dx, n * sizeof(float), s);
    pool.deallocate(dy, n * sizeof(float), s);
    s.synchronize();
  } else {
    for (int i = 0; i < n; ++i) y[i] = 3.0f * x[i] + y[i];
  }
  std::printf("saxpy on %s: y[0] = %.1f (expected 5.0)\n", dev.str().c_str(), static_cast<double>(y[0]));
  if (!dev.is_cuda()) std::printf("no GPU: %s\n", dm.fallback_reason().c_str());
  // 3 * 1 + 2 is exact in float, so every element must be exactly 5.
  for (int i = 0; i < n; ++i) {
    if (y[i] != 3.0f * x[i] + 2.0f) {
      std::printf("quickstart_cuda: FAILED: y[%d] = %g, expected %g\n", i, static_cast<double>(y[i]),
                  static_cast<double>(3.0f * x[i] + 2.0f));
      return 1;
    }
  }
  return 0;
} catch (const dk::error& e) {
  std::fprintf(stderr, "quickstart_cuda: %s\n", e.what());
  return 2;
}
