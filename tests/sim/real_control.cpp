// The simulator's control API over the real CUDA runtime, so that the simulator's own rule tests
// (test_sim_runtime.cpp) also run on a real GPU (CTest gpu.gpu_sim_rules): every rule they assert
// that a GPU can show must hold there too. What only the simulator can observe (contexts,
// violations, fault injection, byte counts) is tagged [sim_only] in the tests and left out.
#include <devicekit/cuda_sim/control.hpp>

namespace devicekit::cuda_sim {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}
int contexts_created(int) { return -1; }
std::size_t device_bytes_in_use(int) { return 0; }
std::vector<std::string> violations() { return {}; }
void expect_violations(std::size_t) {}
void fail_call(const std::string&, int, cudaError_t) {}
void nccl_async_error_after(int, int, int) {}
void nccl_hang_after(int, int) {}
std::size_t spinning_host_waits() { return 0; }
void device_access(const void*, std::size_t, bool) {}
std::size_t races_detected() { return 0; }
std::size_t graph_launches() { return 0; }
std::size_t graphs_alive() { return 0; }
std::size_t api_calls(const std::string&) { return 0; }
std::size_t api_calls_total() { return 0; }

}  // namespace devicekit::cuda_sim

extern "C" void devicekit_cuda_sim_host_access(const void*, std::size_t, int) {}
