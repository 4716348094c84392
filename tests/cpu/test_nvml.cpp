// detect/nvml.hpp: nvml_detector against a fake libnvidia-ml (tests/nvml/fake_nvml.cpp, loaded
// through DEVICEKIT_NVML_LIBRARY / settings::set_nvml_library), and against a missing or wrong
// library. On a machine without a usable CUDA runtime (CI) the GPUs NVML lists are reported as
// unusable and a manager refuses them; where the runtime works they must match its GPUs by UUID.
#include <catch2/catch.hpp>

#include <devicekit/detect/nvml.hpp>
#include <devicekit/manager.hpp>
#include <devicekit/report/report.hpp>

#include "test_support.hpp"

#include <dlfcn.h>

#include <string>
#include <vector>

namespace dk = devicekit;
using devicekit::testing::scoped_env;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

dk::settings with_fake() { return dk::settings{}.set_nvml_library(DEVICEKIT_TEST_FAKE_NVML); }

/// nvmlInit_v2 calls of the fake not yet matched by nvmlShutdown.
int live_nvml_inits() {
  void* lib = ::dlopen(DEVICEKIT_TEST_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  auto* fn = reinterpret_cast<int (*)()>(::dlsym(lib, "devicekit_fake_nvml_live_inits"));
  REQUIRE(fn != nullptr);
  const int n = fn();
  ::dlclose(lib);
  return n;
}

/// Whether the CUDA runtime of this process has GPUs (then NVML devices must match them).
bool runtime_has_gpus() { return dk::cuda_detector{}.detect(dk::settings{}).gpu_count > 0; }
}  // namespace

static_assert(dk::device_detector<dk::nvml_detector>);
static_assert(std::is_empty_v<dk::first_available<dk::cuda_detector, dk::nvml_detector, dk::cpu_detector>>);

TEST_CASE("nvml_detector: a missing library is 'not available' with what to do", "[detect][nvml]") {
  const auto caps = dk::nvml_detector{}.detect(dk::settings{}.set_nvml_library("/nonexistent/libnvidia-ml.so.1"));
  CHECK_FALSE(caps.usable());
  CHECK(caps.detector == "nvml");
  CHECK(contains(caps.fallback_reason, "NVML is not available: dlopen(\"/nonexistent/libnvidia-ml.so.1\") failed"));
  // The path was named: the reason says that the library named did not load, not to name one.
  CHECK(contains(caps.fallback_reason, "the library that settings::set_nvml_library names did not load"));
  CHECK_FALSE(contains(caps.fallback_reason, "set DEVICEKIT_NVML_LIBRARY to"));

  // The default lookup (libnvidia-ml.so.1): absent on a machine without a driver, and then
  // said the same way; present elsewhere.
  scoped_env unset("DEVICEKIT_NVML_LIBRARY", nullptr);
  const auto real = dk::nvml_detector{}.detect(dk::settings{});
  if (!real.usable()) CHECK_FALSE(real.fallback_reason.empty());
  if (::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD) == nullptr && !real.usable() &&
      contains(real.fallback_reason, "dlopen")) {
    CHECK(contains(real.fallback_reason, "libnvidia-ml.so.1"));
    CHECK(contains(real.fallback_reason, "install the driver, or set DEVICEKIT_NVML_LIBRARY to the path of"));
  }

  // The environment variable is read when the settings name no library.
  scoped_env missing("DEVICEKIT_NVML_LIBRARY", "/nonexistent/libfake-nvml.so");
  const auto named = dk::nvml_detector{}.detect(dk::settings{});
  CHECK(contains(named.fallback_reason, "/nonexistent/libfake-nvml.so"));
  CHECK(contains(named.fallback_reason, "the library that DEVICEKIT_NVML_LIBRARY names did not load"));
  CHECK_FALSE(contains(named.fallback_reason, "set DEVICEKIT_NVML_LIBRARY to"));
  CHECK(dk::settings::from_environment().get_nvml_library() == "/nonexistent/libfake-nvml.so");
}

TEST_CASE("nvml_detector: a library that is not NVML names the missing functions", "[detect][nvml]") {
  const auto caps = dk::nvml_detector{}.detect(dk::settings{}.set_nvml_library("libm.so.6"));
  CHECK_FALSE(caps.usable());
  CHECK(contains(caps.fallback_reason, "lacks nvmlInit_v2"));
  CHECK(contains(caps.fallback_reason, "nvmlDeviceGetCount_v2"));
}

TEST_CASE("nvml_detector: nvmlInit failure and zero GPUs are reasons, not exceptions", "[detect][nvml]") {
  {
    scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", "2");
    scoped_env init("DEVICEKIT_FAKE_NVML_INIT_ERROR", "9");  // NVML_ERROR_DRIVER_NOT_LOADED
    const auto caps = dk::nvml_detector{}.detect(with_fake());
    CHECK_FALSE(caps.usable());
    CHECK(contains(caps.fallback_reason, "nvmlInit_v2 failed: Driver Not Loaded (nvmlReturn_t 9)"));
    CHECK(contains(caps.fallback_reason, "kernel driver is not loaded"));
  }
  scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", "0");
  const auto none = dk::nvml_detector{}.detect(with_fake());
  CHECK_FALSE(none.usable());
  CHECK(none.fallback_reason == "NVML found 0 GPUs");
  CHECK(live_nvml_inits() == 0);  // nvmlShutdown after every nvmlInit_v2
}

TEST_CASE("nvml_detector: hidden GPUs and a cpu preference are honoured", "[detect][nvml]") {
  scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", "2");
  CHECK(contains(dk::nvml_detector{}.detect(with_fake().set_prefer(dk::device_preference::cpu)).fallback_reason,
                 "the CPU was requested"));
  {
    scoped_env hide("CUDA_VISIBLE_DEVICES", "");
    CHECK(contains(dk::nvml_detector{}.detect(with_fake()).fallback_reason, "CUDA_VISIBLE_DEVICES"));
  }
  CHECK_FALSE(dk::run_detector(dk::nvml_detector{}, with_fake().set_platforms({dk::device_kind::cpu})).usable());
}

TEST_CASE("nvml_detector: GPUs the CUDA runtime cannot use are listed as unusable", "[detect][nvml]") {
  scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", "2");
  scoped_env names("DEVICEKIT_FAKE_NVML_NAMES", "NVIDIA H100 80GB HBM3;NVIDIA A100-SXM4-40GB");
  scoped_env memory("DEVICEKIT_FAKE_NVML_MEMORY_MIB", "40960");
  scoped_env cc("DEVICEKIT_FAKE_NVML_CC", "8.0");
  const auto caps = dk::nvml_detector{}.detect(with_fake());
  CHECK(live_nvml_inits() == 0);
  if (runtime_has_gpus()) {
    // A real runtime: the fake's UUIDs are not its GPUs', so nothing may be reported.
    CHECK_FALSE(caps.usable());
    CHECK(contains(caps.fallback_reason, "none has the UUID of a GPU the CUDA runtime sees"));
    return;
  }
  REQUIRE(caps.usable());
  CHECK(caps.device_type == dk::device_kind::cuda);
  CHECK(caps.device_count == 2);
  CHECK(caps.gpu_count == 0);  // none the runtime can use
  CHECK_FALSE(caps.supports_distributed);
  CHECK(contains(caps.fallback_reason, "the CUDA runtime cannot use the 2 GPU(s) NVML found"));
  REQUIRE(caps.devices.size() == 2);
  const auto& a = caps.devices[0];
  const auto& b = caps.devices[1];
  CHECK(a.id == dk::device::cuda(0));
  CHECK(b.id == dk::device::cuda(1));
  CHECK(a.name == "NVIDIA H100 80GB HBM3");
  CHECK(b.name == "NVIDIA A100-SXM4-40GB");
  CHECK(a.hardware == dk::hardware_type::h100);
  CHECK(b.hardware == dk::hardware_type::a100);
  CHECK(a.total_memory_bytes == 40960ull << 20);
  CHECK(caps.total_memory_bytes == 2 * (40960ull << 20));
  CHECK(a.cc == dk::compute_capability{8, 0});
  CHECK(caps.cc == dk::compute_capability{8, 0});
  CHECK(caps.precision.bf16);
  CHECK(a.uuid == "GPU-fa4e0000-0000-0000-0000-000000000000");
  CHECK(b.pci_bus_id == "00000000:1A:00.0");
  CHECK_FALSE(a.usable());
  CHECK(contains(a.unusable_reason, "found by NVML, but the CUDA runtime cannot use it"));
  if (caps.cuda_runtime_version > 0 || DEVICEKIT_HAS_CUDA) CHECK(caps.driver_version == 13000);  // from NVML

  // Advice is for what can run the work: the host, not the unusable GPUs.
  CHECK(dk::batch_hardware(caps) == dk::hardware_type::cpu);
  CHECK(dk::recommend_for(caps).precision == "fp32");

  // A lost GPU is left out, the others are kept.
  scoped_env lost("DEVICEKIT_FAKE_NVML_LOST", "0");
  const auto one = dk::nvml_detector{}.detect(with_fake());
  REQUIRE(one.devices.size() == 1);
  CHECK(one.devices[0].id == dk::device::cuda(1));
}

TEST_CASE("nvml_detector in a chain, and a manager that refuses its unusable GPUs", "[detect][nvml][manager]") {
  using chain = dk::first_available<dk::cuda_detector, dk::nvml_detector, dk::cpu_detector>;
  {
    scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", "0");
    const auto caps = chain{}.detect(with_fake());
    if (!runtime_has_gpus()) {
      CHECK(caps.device_type == dk::device_kind::cpu);
      CHECK(contains(caps.fallback_reason, "nvml: NVML found 0 GPUs"));
      CHECK(contains(caps.fallback_reason, "cuda: "));
    }
  }
  if (runtime_has_gpus()) return;  // the rest needs GPUs that only NVML sees

  scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", "2");
  const auto caps = chain{}.detect(with_fake());
  CHECK(caps.detector == "nvml");
  CHECK(caps.device_count == 2);

  dk::device_manager<dk::first_available<dk::nvml_detector, dk::cpu_detector>> dm(with_fake());
  CHECK_FALSE(dm.has_gpu());
  CHECK(dm.gpu_count() == 0);
  CHECK(dm.device_count() == 2);
  CHECK(dm.default_device() == dk::device::cuda(0));
  CHECK(dm.budget(dk::device::cuda(1)).total_bytes == 81559ull << 20);  // no CUDA call: allowed
  const std::vector<float> data(16, 1.0f);
  CHECK_THROWS_WITH(dm.place(data), Catch::Contains("cannot use cuda:0 (NVIDIA H100 80GB HBM3)") &&
                                        Catch::Contains("the CUDA runtime cannot use it") &&
                                        Catch::Contains("DEVICEKIT_PREFER=cpu"));
  CHECK_THROWS_AS(dm.place(data, dk::device::cuda(1)), dk::config_error);
  CHECK_THROWS_AS(dm.memory(dk::device::cuda(1)), dk::config_error);
  CHECK_THROWS_AS(dm.replicate(data), dk::config_error);
  // The host stays usable.
  const auto on_host = dm.place(data, dk::device::cpu());
  CHECK(on_host.size() == data.size());
  const auto report = dm.report();
  CHECK(report.caps.devices.size() == 2);
}
