// Built against devicekit::rmm: devicekit's RMM resource compiles with the RMM (and the CCCL it
// ships) that the package config found, and the program links and loads librmm.
#include <devicekit/rmm/resource.hpp>

#include <rmm/cuda_stream_view.hpp>

#include <cuda/memory_resource>

#include <cstdio>

static_assert(cuda::mr::resource_with<devicekit::rmm_resource, cuda::mr::device_accessible>,
              "devicekit::rmm_resource must be a device-accessible cuda::mr resource, as RMM takes them");

int main() {
  // Compiled in librmm, and needs no GPU: the default stream is the default stream.
  if (!rmm::cuda_stream_view{}.is_default()) {
    std::puts("consumer: rmm::cuda_stream_view{} is not the default stream");
    return 1;
  }
  std::puts("consumer: devicekit::rmm_resource is an RMM device resource; librmm loaded");
  return 0;
}
