#include <devicekit/devicekit.hpp>
#include <devicekit/compute.hpp>

#include <cstdio>
#include <vector>

__global__ void touch(int* p) { *p = 42; }

int main() {
  devicekit::device_manager<> dm{devicekit::settings{}};
  std::printf("consumer (.cu): default device %s\n", dm.default_device().str().c_str());
  // A __host__ __device__ lambda compiles only with --extended-lambda, which devicekit::devicekit
  // passes to nvcc: this checks that the installed target carries it.
  std::vector<float> v{1.f, 2.f};
  devicekit::tree_transform(
      v, [] __host__ __device__(float x) { return 2.f * x; }, v);
  if (v[1] != 4.f) return 2;
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
