// The manager and its detectors over simulated GPUs: the topology it reports, nvml_detector against
// the simulated runtime (fake NVML: tests/nvml/fake_nvml.cpp), run-time platform lists, and GPUs
// the runtime cannot use.
#include <catch2/catch.hpp>

#include "../cpu/test_support.hpp"
#include "sim_devicekit_support.hpp"

#include <string>
#include <vector>

namespace {
std::string join_uuids(const std::vector<std::string>& uuids) {
  std::string s;
  for (const auto& u : uuids) s += (s.empty() ? "" : ";") + u;
  return s;
}
dk::settings with_fake_nvml() { return dk::settings{}.set_nvml_library(DEVICEKIT_TEST_FAKE_NVML); }
}  // namespace

TEST_CASE("the topology of the simulated GPUs names the CUDA platform and versions", "[sim][topology]") {
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  const manager dm{dk::settings{}};
  const auto topo = dm.topology(dk::process_context{});
  CHECK(topo.platform == "cuda");
  int driver = 0;
  int runtime = 0;
  REQUIRE(cudaDriverGetVersion(&driver) == cudaSuccess);
  REQUIRE(cudaRuntimeGetVersion(&runtime) == cudaSuccess);
  CHECK(topo.platform_version == "cuda driver " + std::to_string(driver / 1000) + "." +
                                     std::to_string(driver % 1000 / 10) + " runtime " + std::to_string(runtime / 1000) +
                                     "." + std::to_string(runtime % 1000 / 10));
  REQUIRE(topo.devices.size() == static_cast<std::size_t>(sim::device_count()));
  CHECK(topo.devices[0].device_kind == dm.properties(dk::device::cuda(0)).name);
  CHECK(topo.devices.is_fully_addressable());
  CHECK(dk::device_topology::deserialize(topo.serialize()) == topo);
}

// NVML lists every GPU of the machine in PCI order; the runtime only the visible ones, in its
// own order. The detector must report the runtime's devices under the runtime's ordinals.
TEST_CASE("nvml_detector reports the GPUs the runtime sees, under its ordinals", "[sim][nvml]") {
  const auto runtime = dk::cuda_detector{}.detect(dk::settings{});
  REQUIRE(runtime.gpu_count == sim::device_count());
  // NVML's list: the runtime's GPUs in reverse, plus one the runtime does not see.
  std::vector<std::string> uuids;
  for (auto it = runtime.devices.rbegin(); it != runtime.devices.rend(); ++it) uuids.push_back(it->uuid);
  uuids.push_back("GPU-0ff11e00-0000-0000-0000-000000000000");
  devicekit::testing::scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", std::to_string(uuids.size()).c_str());
  devicekit::testing::scoped_env ids("DEVICEKIT_FAKE_NVML_UUIDS", join_uuids(uuids).c_str());
  const auto caps = dk::nvml_detector{}.detect(with_fake_nvml());
  REQUIRE(caps.usable());
  CHECK(caps.fallback_reason.empty());
  CHECK(caps.gpu_count == runtime.gpu_count);
  REQUIRE(caps.devices.size() == runtime.devices.size());
  for (std::size_t i = 0; i < caps.devices.size(); ++i) {
    CHECK(caps.devices[i].id == runtime.devices[i].id);
    CHECK(caps.devices[i].uuid == runtime.devices[i].uuid);
    CHECK(caps.devices[i].usable());
  }
  // A manager over it places on the last GPU as over cuda_detector.
  dk::device_manager<dk::first_available<dk::nvml_detector, dk::cpu_detector>> dm(with_fake_nvml());
  CHECK(dm.has_gpu());
  const auto placed = dm.place(ramp(64, 3.f), dk::device::cuda(sim::device_count() - 1));
  CHECK(placed.size() == 64);

  // NVML GPUs that are none of the runtime's: not available, and the reason says so.
  devicekit::testing::scoped_env foreign("DEVICEKIT_FAKE_NVML_UUIDS", "GPU-0ff11e00-0000-0000-0000-000000000001");
  devicekit::testing::scoped_env one("DEVICEKIT_FAKE_NVML_GPUS", "1");
  const auto none = dk::nvml_detector{}.detect(with_fake_nvml());
  CHECK_FALSE(none.usable());
  CHECK_THAT(none.fallback_reason, Catch::Contains("none has the UUID of a GPU the CUDA runtime sees"));
}

TEST_CASE("a run-time platform list puts the CPU before simulated GPUs", "[sim][platforms]") {
  const auto caps = dk::first_available<dk::cuda_detector, dk::cpu_detector>{}.detect(
      dk::settings{}.set_platforms({dk::device_kind::cpu, dk::device_kind::cuda}));
  CHECK(caps.device_type == dk::device_kind::cpu);
  CHECK_THAT(caps.fallback_reason,
             Catch::Contains("cuda: found " + std::to_string(sim::device_count()) + " cuda device(s)"));
  dk::device_manager<> gpus_only(dk::settings{}.set_platforms({dk::device_kind::cuda}));
  CHECK(gpus_only.gpu_count() == sim::device_count());
}

// Run alone (CTest sim.devicekit.nvml_driver_mismatch) with cudaGetDeviceCount failing as under a
// driver older than the toolkit (cudaErrorInsufficientDriver): NVML still lists the GPUs; they
// are reported, and a manager refuses them before any CUDA call.
TEST_CASE("GPUs that NVML sees but the runtime cannot use are refused clearly", "[.][nvml_driver_mismatch]") {
  const auto runtime = dk::cuda_detector{}.detect(dk::settings{});
  REQUIRE(runtime.gpu_count == 0);
  CHECK_THAT(runtime.fallback_reason, Catch::Contains("cudaErrorInsufficientDriver"));
  devicekit::testing::scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", "2");
  using chain = dk::first_available<dk::cuda_detector, dk::nvml_detector, dk::cpu_detector>;
  dk::device_manager<chain> dm(with_fake_nvml());
  CHECK(dm.capabilities().detector == "nvml");
  CHECK(dm.device_count() == 2);
  CHECK_FALSE(dm.has_gpu());
  CHECK_THAT(dm.fallback_reason(), Catch::Contains("the CUDA runtime cannot use the 2 GPU(s) NVML found") &&
                                       Catch::Contains("cudaErrorInsufficientDriver"));
  CHECK_THROWS_WITH(dm.place(ramp(16, 0.f)),
                    Catch::Contains("cannot use cuda:0") && Catch::Contains("update the NVIDIA driver"));
  CHECK_THROWS_AS(dm.memory(dk::device::cuda(1)), dk::config_error);
  CHECK(sim::contexts_created(0) == 0);  // refused before any CUDA call
  const auto on_host = dm.place(ramp(16, 0.f), dk::device::cpu());
  CHECK(on_host.size() == 16);
}
