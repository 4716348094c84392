// custom_detector: a detector is a plain struct with a `detect` member; no base class, no
// registration. This one reports the devices listed in a (made-up) cluster inventory: fixed
// capabilities, as a scheduler that assigns hardware would give them, and it falls back to the
// CPU when the inventory is empty. It checks that the manager reports what the inventory lists,
// and exits with status 1, saying what is wrong, when it does not.
#include <devicekit/devicekit.hpp>

#include <iostream>
#include <string>

namespace dk = devicekit;

struct inventory_detector {
  static constexpr std::string_view name() noexcept { return "inventory"; }
  int gpus = 4;

  dk::capabilities detect(const dk::settings&) const {
    dk::capabilities caps;
    if (gpus == 0) {
      caps.fallback_reason = "the inventory lists no GPUs";
      return caps;  // device_count 0: first_available moves on to the next detector
    }
    caps.device_type = dk::device_kind::cuda;
    caps.cc = dk::compute_capability{8, 0};
    caps.precision = dk::precision_for(*caps.cc);
    caps.supports_distributed = gpus > 1;
    for (int i = 0; i < gpus; ++i) {
      dk::device_properties p;
      p.id = dk::device::cuda(i);
      p.name = "NVIDIA A100-SXM4-80GB (inventory)";
      p.total_memory_bytes = 80ull << 30;
      p.cc = *caps.cc;
      p.hardware = dk::classify_hardware(p.name);
      caps.total_memory_bytes += p.total_memory_bytes;
      caps.devices.push_back(p);
    }
    caps.device_count = caps.gpu_count = gpus;
    return caps;
  }
};
static_assert(dk::device_detector<inventory_detector>);

int main() try {
  using manager = dk::device_manager<dk::first_available<inventory_detector, dk::cpu_detector>,
                                     dk::custom_fraction<4, 5>, dk::shard_batch>;
  manager dm{dk::settings{}};
  dk::print_device_info(dm);

  int failures = 0;
  const auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::cout << "custom_detector: FAILED: " << what << "\n";
      ++failures;
    }
  };
  // The manager's devices are the inventory's four GPUs, in order, with their 80 GiB each; the
  // first is the default.
  expect(dm.gpu_count() == 4 && dm.devices().size() == 4,
         std::to_string(dm.gpu_count()) + " GPUs of " + std::to_string(dm.devices().size()) + " devices, expected 4");
  for (std::size_t i = 0; i < dm.devices().size(); ++i) {
    const dk::device d = dm.devices()[i];
    expect(d == dk::device::cuda(static_cast<int>(i)) && dm.properties(d).total_memory_bytes == (80ull << 30),
           "device " + std::to_string(i) + " is " + d.str() + " with " +
               std::to_string(dm.properties(d).total_memory_bytes) + " bytes, expected cuda:" + std::to_string(i) +
               " with 80 GiB");
  }
  expect(dm.default_device() == dk::device::cuda(0),
         "default device " + dm.default_device().str() + ", expected cuda:0");

  // With an empty inventory the same manager type falls back to the CPU and says why.
  manager fallback{dk::settings{}, dk::first_available<inventory_detector, dk::cpu_detector>{inventory_detector{0},
                                                                                             dk::cpu_detector{}}};
  std::cout << "\nEmpty inventory: " << fallback.default_device() << " because " << fallback.fallback_reason() << "\n";
  expect(fallback.default_device() == dk::device::cpu() && !fallback.has_gpu(),
         "an empty inventory gave " + fallback.default_device().str() + ", expected cpu:0");
  expect(fallback.fallback_reason().find("the inventory lists no GPUs") != std::string::npos,
         "the fallback reason does not give the detector's: " + fallback.fallback_reason());

  // A detector list with no CPU fallback refuses to build a manager without devices.
  try {
    dk::device_manager<inventory_detector> none{dk::settings{}, inventory_detector{0}};
    expect(false, "a manager without devices was made, on " + none.default_device().str());
  } catch (const dk::config_error& e) {
    std::cout << "Without a CPU fallback: " << e.what() << "\n";
  }

  const auto hw = dm.properties(dk::device::cuda(0)).hardware;
  std::cout << "Recommended batch for " << dk::to_string(hw) << ": "
            << dk::batch_size_recommendation_for(hw).optimal_batch_size << "\n";
  return failures == 0 ? 0 : 1;
} catch (const dk::error& e) {
  std::cerr << "custom_detector: " << e.what() << "\n";
  return 2;
}
