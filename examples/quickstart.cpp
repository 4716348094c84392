// quickstart: detect the devices, print the report, and carry on whether or not there is a GPU.
// It checks what it relies on (the default device, the memory budget, the strategy rule) and
// exits with status 1, saying what is wrong, when any differs.
//
// Build: cmake --preset default && cmake --build --preset default --target quickstart
// Run:   ./build/examples/quickstart        (try DEVICEKIT_PREFER=cpu or CUDA_VISIBLE_DEVICES=)
#include <devicekit/devicekit.hpp>

#include <cmath>
#include <iostream>
#include <string>

namespace dk = devicekit;

int main() try {
  // Platform priority: CUDA if a GPU is usable, else the CPU; 75% of device memory.
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  manager dm;  // reads DEVICEKIT_PREFER / DEVICEKIT_DEVICE; never throws for a missing GPU

  dk::print_device_info(dm);

  int failures = 0;
  const auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::cout << "quickstart: FAILED: " << what << "\n";
      ++failures;
    }
  };
  // CUDA comes first in the priority list: the default device is a GPU exactly when there is one,
  // and gpu_count() counts the GPUs among devices().
  std::size_t listed_gpus = 0;
  for (const auto& d : dm.devices()) listed_gpus += d.is_cuda() ? 1 : 0;
  expect(dm.default_device().is_cuda() == dm.has_gpu(),
         "default device " + dm.default_device().str() + " with has_gpu() " + std::to_string(dm.has_gpu()));
  expect(listed_gpus == static_cast<std::size_t>(dm.gpu_count()),
         std::to_string(listed_gpus) + " GPUs listed, gpu_count() " + std::to_string(dm.gpu_count()));

  if (dm.has_gpu()) {
    std::cout << "\nUsing " << dm.gpu_count() << " GPU(s); default " << dm.default_device() << " ("
              << dm.properties(dm.default_device()).name << ")\n";
  } else {
    std::cout << "\nNo GPU: running on " << dm.default_device() << ".\nWhy: " << dm.fallback_reason() << "\n";
  }

  // Hardware-aware batch sizing (the batch-size table of each hardware class): validate what the
  // training loop would use.
  const auto hw = dm.properties(dm.default_device()).hardware;
  const auto check = dk::validate_batch_size(64, hw);
  std::cout << "Batch 64 on " << dk::to_string(hw) << ": " << (check.valid ? "ok" : "rejected") << " - "
            << check.message << "\n";
  const std::string suggested = dk::strategy_for_model_size(150'000'000).name;
  std::cout << "Suggested strategy for a 150M-parameter model: " << suggested << "\n";
  // The rule of thumb: aggressive from 100M parameters on.
  expect(suggested == "aggressive", "suggested '" + suggested + "' for 150M parameters, expected 'aggressive'");

  // The balanced strategy's budget: 75% of the device's memory, less the headroom kept for the
  // CUDA context, at most what a GPU had available when the manager measured it (other processes
  // may hold some), less any reserve for collectives: worked out here from the device's size.
  const dk::device dev = dm.default_device();
  const dk::memory_budget b = dm.budget(dev);
  const std::uint64_t total = dm.properties(dev).total_memory_bytes;
  double expected =
      std::max(std::floor(0.75 * static_cast<double>(total)) - static_cast<double>(b.headroom_bytes), 0.0);
  if (b.available_bytes) expected = std::min(expected, static_cast<double>(*b.available_bytes));
  expected = std::max(expected - static_cast<double>(b.collective_reserve_bytes), 0.0);
  std::cout << "Budget on " << dev << ": " << b.budget_bytes << " bytes of " << total << "\n";
  expect(b.total_bytes == total,
         "budget of " + std::to_string(b.total_bytes) + " total bytes, the device has " + std::to_string(total));
  expect(static_cast<double>(b.budget_bytes) == expected,
         "budget " + std::to_string(b.budget_bytes) + " bytes, expected " + std::to_string(expected));
  return failures == 0 ? 0 : 1;
} catch (const dk::error& e) {
  std::cerr << "quickstart: " << e.what() << "\n";
  return 2;
}
