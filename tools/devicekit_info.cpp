// devicekit-info: what devices this machine has, or why it fell back to the CPU.
//   devicekit-info            text report
//   devicekit-info --json     the report as JSON
//   devicekit-info --verbose  every GPU property (the cpu device has none beyond the Host line)
// Each device's memory budget (total, headroom, fraction, budget) and pool stats are shown.
// The report also shows the routing in force (detector chain, platform list, preference, how the
// default device was chosen), recommendations for the hardware, and the NCCL/MPI engines.
// Detection: CUDA, else GPUs that only NVML sees (listed as unusable, with why), else the CPU.
// Exits 0 on a CPU fallback (that is an answer, not a failure); exits 2 on a bad flag or a bad
// environment value (DEVICEKIT_PREFER=tpu, DEVICEKIT_PLATFORMS=tpu), with the message on stderr.
#include <devicekit/devicekit.hpp>
#include <devicekit/report/json.hpp>

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"devicekit-info: report the devices devicekit detects (or why it falls back to the CPU)"};
  bool json = false;
  bool verbose = false;
  std::string prefer;
  std::string platforms;
  std::string strategy = "balanced";
  app.add_flag("--json", json, "print the report as JSON");
  app.add_flag("-v,--verbose", verbose, "print every GPU property (the CPU's are on the Host line already)");
  app.add_option("--prefer", prefer, "override DEVICEKIT_PREFER: auto, cuda or cpu");
  app.add_option("--platforms", platforms, "override DEVICEKIT_PLATFORMS: platform priority, e.g. cuda,cpu");
  app.add_option("--strategy", strategy, "memory strategy to report: conservative, balanced or aggressive")
      ->check(CLI::IsMember({"conservative", "balanced", "aggressive"}));
  app.footer(
      "Environment: DEVICEKIT_PREFER=auto|cuda|cpu, DEVICEKIT_DEVICE=cuda:N|cpu, DEVICEKIT_PLATFORMS=cuda,cpu "
      "(run-time platform priority), DEVICEKIT_NVML_LIBRARY=path (NVML library), CUDA_VISIBLE_DEVICES "
      "(empty hides every GPU).");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    if (rc != 0) std::cerr << "\n" << app.help();
    return rc == 0 ? 0 : 2;
  }

  namespace dk = devicekit;
  try {
    dk::settings config = dk::settings::from_environment();
    if (!prefer.empty()) config.set_prefer(dk::parse_device_preference(prefer, "--prefer"));
    if (!platforms.empty()) config.set_platforms(dk::parse_platform_list(platforms, "--platforms"));
    auto emit = [&](auto&& dm) {
      // Make each device's (empty) pool so that the report shows its stats next to the budget.
      for (const auto d : dm.devices()) {
        try {
          (void)dm.memory(d);
        } catch (const dk::error& e) {
          std::cerr << "devicekit-info: no memory pool on " << d << ": " << e.what() << "\n";
        }
      }
      if (json) {
        std::cout << dk::to_json(dm.report()).dump(2) << "\n";
      } else {
        dk::print_device_info(dm, std::cout, verbose);
      }
    };
    using detector = dk::first_available<dk::cuda_detector, dk::nvml_detector, dk::cpu_detector>;
    if (strategy == "conservative") {
      emit(dk::device_manager<detector, dk::conservative>(config));
    } else if (strategy == "aggressive") {
      emit(dk::device_manager<detector, dk::aggressive>(config));
    } else {
      emit(dk::device_manager<detector, dk::balanced>(config));
    }
  } catch (const dk::error& e) {
    std::cerr << "devicekit-info: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
