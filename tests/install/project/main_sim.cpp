// A user's test program on simulated GPUs: devicekit::on_sim instead of the CUDA runtime.
#include <devicekit/cuda_sim/control.hpp>
#include <devicekit/devicekit.hpp>

#include <iostream>

int main() {
  devicekit::device_manager<> dm{devicekit::settings{}};
  std::cout << "consumer on simulated GPUs: " << dm.gpu_count() << " GPU(s), default " << dm.default_device() << "\n";
  return dm.gpu_count() == devicekit::cuda_sim::device_count() ? 0 : 1;
}
