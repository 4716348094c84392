#include <devicekit/devicekit.hpp>

#include <cstdio>

__global__ void touch(int* p) { *p = 42; }

int main() {
  devicekit::device_manager<> dm{devicekit::settings{}};
  std::printf("consumer (.cu): default device %s\n", dm.default_device().str().c_str());
  if (dm.has_gpu()) {
    int* p = nullptr;
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&p, sizeof(int)));
    touch<<<1, 1>>>(p);
    int v = 0;
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
    DEVICEKIT_CUDA_CHECK(cudaFree(p));
    return v == 42 ? 0 : 1;
  }
  return 0;
}
