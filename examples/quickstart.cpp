// quickstart: detect the devices, print the report, and carry on whether or not there is a GPU.
//
// Build: cmake --preset default && cmake --build --preset default --target quickstart
// Run:   ./build/examples/quickstart        (try DEVICEKIT_PREFER=cpu or CUDA_VISIBLE_DEVICES=)
#include <devicekit/devicekit.hpp>

#include <iostream>

namespace dk = devicekit;

int main() try {
  // Platform priority: CUDA if a GPU is usable, else the CPU; 75% of device memory.
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  manager dm;  // reads DEVICEKIT_PREFER / DEVICEKIT_DEVICE; never throws for a missing GPU

  dk::print_device_info(dm);

  if (dm.has_gpu()) {
    std::cout << "\nUsing " << dm.gpu_count() << " GPU(s); default " << dm.default_device() << " ("
              << dm.properties(dm.default_device()).name << ")\n";
  } else {
    std::cout << "\nNo GPU: running on " << dm.default_device() << ".\nWhy: " << dm.fallback_reason() << "\n";
  }

  // Hardware-aware batch sizing (seed tables): validate what the training loop would use.
  const auto hw = dm.properties(dm.default_device()).hardware;
  const auto check = dk::validate_batch_size(64, hw);
  std::cout << "Batch 64 on " << dk::to_string(hw) << ": " << (check.valid ? "ok" : "rejected") << " - "
            << check.message << "\n";
  std::cout << "Suggested strategy for a 150M-parameter model: " << dk::strategy_for_model_size(150'000'000).name
            << "\n";
  return 0;
} catch (const dk::error& e) {
  std::cerr << "quickstart: " << e.what() << "\n";
  return 2;
}
