// The manager and its detectors over simulated GPUs: the topology it reports, nvml_detector against
// the simulated runtime (fake NVML: tests/nvml/fake_nvml.cpp), run-time platform lists, GPUs the
// runtime cannot use, and the CUDA calls detection makes (clock rates only when asked).
#include <catch2/catch.hpp>

#include "../cpu/test_support.hpp"
#include "sim_devicekit_support.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <sstream>
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

  // The runtime did not start, so a CUDA_* variable a later manager sets is not too late.
  CHECK_FALSE(dk::detail::cuda_start_environment().has_value());
  devicekit::testing::scoped_env order("CUDA_DEVICE_ORDER", nullptr);
  const dk::device_manager<chain> ordered(with_fake_nvml().set_environment_variable("CUDA_DEVICE_ORDER", "PCI_BUS_ID"));
  CHECK(ordered.report().environment_too_late.empty());
  CHECK(ordered.report().environment_applied == std::vector<std::string>{"CUDA_DEVICE_ORDER"});
}

// The simulated runtime starts (cudaGetDeviceCount succeeds): a CUDA_* variable that a manager's
// settings change afterwards comes too late, as on a GPU machine.
TEST_CASE("a CUDA_* variable set after the simulated runtime started is too late", "[sim][environment]") {
  devicekit::testing::scoped_env order("CUDA_DEVICE_ORDER", nullptr);
  (void)dk::device_manager<>{};
  const auto started = dk::detail::cuda_start_environment();
  REQUIRE(started.has_value());
  const auto it = started->find("CUDA_DEVICE_ORDER");
  const std::string wanted = it != started->end() && it->second == "PCI_BUS_ID" ? "FASTEST_FIRST" : "PCI_BUS_ID";
  const dk::device_manager<> dm(dk::settings{}.set_environment_variable("CUDA_DEVICE_ORDER", wanted));
  const auto r = dm.report();
  REQUIRE(r.environment_too_late.size() == 1);
  CHECK_THAT(r.environment_too_late.front(), Catch::StartsWith("CUDA_DEVICE_ORDER=" + wanted) &&
                                                 Catch::Contains("the CUDA runtime started with CUDA_DEVICE_ORDER"));
}

namespace {
// Every field detection fills, compared one by one (device_properties has no operator==).
void check_same_properties(const dk::device_properties& a, const dk::device_properties& b) {
  INFO(a.id.str());
  CHECK(a.id == b.id);
  CHECK(a.name == b.name);
  CHECK(a.uuid == b.uuid);
  CHECK(a.pci_bus_id == b.pci_bus_id);
  CHECK(a.pci_domain == b.pci_domain);
  CHECK(a.pci_bus == b.pci_bus);
  CHECK(a.pci_device == b.pci_device);
  CHECK(a.total_memory_bytes == b.total_memory_bytes);
  CHECK(a.cc == b.cc);
  CHECK(a.multiprocessor_count == b.multiprocessor_count);
  CHECK(a.memory_bus_width_bits == b.memory_bus_width_bits);
  CHECK(a.l2_cache_bytes == b.l2_cache_bytes);
  CHECK(a.async_engine_count == b.async_engine_count);
  CHECK(a.ecc_enabled == b.ecc_enabled);
  CHECK(a.max_threads_per_block == b.max_threads_per_block);
  CHECK(a.warp_size == b.warp_size);
  CHECK(a.integrated == b.integrated);
  CHECK(a.managed_memory == b.managed_memory);
  CHECK(a.concurrent_managed_access == b.concurrent_managed_access);
  CHECK(a.peer_access == b.peer_access);
  CHECK(a.hardware == b.hardware);
}
}  // namespace

// With the CUDA 13 runtime cudaGetDeviceProperties is a cached read (0.1 us), while reading the
// same properties attribute by attribute took 1.4 ms a device on an H100 and an H200
// (detect.attributes.vs_properties in benchmarks/results). Reading one device must make that one
// call and nothing else but the peer queries.
TEST_CASE("detection reads a device with one cudaGetDeviceProperties call and no attribute reads", "[sim][detect]") {
  const int n = sim::device_count();
  const char* const apis[] = {"cudaGetDeviceProperties", "cudaDeviceGetAttribute", "cudaGetDriverEntryPointByVersion",
                              "cuDeviceGetName",         "cuDeviceGetUuid",        "cuDeviceTotalMem",
                              "cudaDeviceCanAccessPeer"};
  std::vector<std::size_t> before;
  for (const char* api : apis) before.push_back(sim::api_calls(api));
  const auto all_before = sim::api_calls_total();
  const auto p = dk::query_device_properties(n - 1, n);
  std::vector<std::size_t> made;
  for (std::size_t i = 0; i < before.size(); ++i) made.push_back(sim::api_calls(apis[i]) - before[i]);
  CHECK(made == std::vector<std::size_t>{1, 0, 0, 0, 0, 0, static_cast<std::size_t>(n - 1)});
  CHECK(sim::api_calls_total() - all_before == static_cast<std::size_t>(n));
  CHECK(p.name == "NVIDIA H100 80GB HBM3");
  CHECK(p.hardware == dk::hardware_type::h100);

  // The attribute-by-attribute reading (the path of runtimes before CUDA 13) gives the same values.
  for (int i = 0; i < n; ++i) {
    check_same_properties(dk::query_device_properties(i, n), dk::detail::query_device_properties_by_attributes(i, n));
  }
}

TEST_CASE("clock rates are read when asked, and a report of the runtime's GPUs shows them", "[sim][detect]") {
  const int n = sim::device_count();
  int sm_khz = 0;
  int memory_khz = 0;
  REQUIRE(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, n - 1) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, n - 1) == cudaSuccess);
  REQUIRE(sm_khz > 0);
  const auto attrs = sim::api_calls("cudaDeviceGetAttribute");
  CHECK(dk::query_clock_rates(dk::device::cuda(n - 1)) == dk::clock_rates{sm_khz, memory_khz});
  CHECK(sim::api_calls("cudaDeviceGetAttribute") - attrs == 2);
  CHECK_THROWS_WITH(dk::query_clock_rates(dk::device::cpu()), Catch::Contains("cuda devices only"));
  CHECK_THROWS_WITH(dk::query_clock_rates(dk::device::cuda(n)), Catch::Contains("cudaErrorInvalidDevice"));

  const dk::device_manager<dk::cuda_detector> dm{dk::settings{}};
  const auto r = dm.report();
  for (int i = 0; i < n; ++i) {
    const auto* clk = r.clocks_of(dk::device::cuda(i));
    REQUIRE(clk != nullptr);
    CHECK(*clk == dk::query_clock_rates(dk::device::cuda(i)));
  }
  std::ostringstream text;
  dk::write_text(text, r, /*verbose=*/true);
  CHECK_THAT(text.str(), Catch::Contains("Clock Rate: " + std::to_string(sm_khz / 1000) + " MHz") &&
                             Catch::Contains("Memory Clock Rate: " + std::to_string(memory_khz / 1000) + " MHz"));

  // Described GPUs (fixed_detector) are not the runtime's: their report reads no clocks, even
  // where their ordinals exist in this process.
  const dk::device_manager<dk::fixed_detector> described{dk::settings{},
                                                         dk::fixed_detector{devicekit::testing::simulated_gpus(n)}};
  const auto attrs_before_report = sim::api_calls("cudaDeviceGetAttribute");
  const auto described_report = described.report();
  CHECK(described_report.clocks.empty());
  CHECK(sim::api_calls("cudaDeviceGetAttribute") == attrs_before_report);
  std::ostringstream described_text;
  dk::write_text(described_text, described_report, /*verbose=*/true);
  CHECK_THAT(described_text.str(), !Catch::Contains("Clock Rate"));
}

// --- what a manager's pools hand out may outlive the manager -------------------------------------

namespace {
using gpu_manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>>;

/// A program's pattern: a function makes a manager of its own and returns what it placed.
template <class Where>
auto placed_by_a_local_manager(const std::vector<float>& values, Where where) {
  gpu_manager dm{dk::settings::without_environment()};
  return dm.place(values, where);
}
}  // namespace

TEST_CASE("a tree a manager placed on a GPU may outlive the manager; the pool goes with the tree",
          "[sim][manager][lifetime]") {
  const int last = sim::device_count() - 1;
  const dk::device gpu = dk::device::cuda(last);
  const std::vector<float> values = ramp(std::size_t{1} << 16, 1.0f);
  const std::size_t before = sim::device_bytes_in_use(last);
  const std::size_t violations_before = sim::violations().size();

  SECTION("placed and finished") {
    {
      const auto placed = placed_by_a_local_manager(values, gpu);
      CHECK(sim::device_bytes_in_use(last) > before);  // the tree's chunk, kept
      CHECK(dk::to_host(placed) == values);
    }
    CHECK(sim::device_bytes_in_use(last) == before);  // the pool and its driver pool are gone
  }
  SECTION("placed on a stream, the manager gone and the tree dropped before the copy is waited for") {
    const dk::stream s(gpu);
    {
      const auto placed = placed_by_a_local_manager(values, dk::stream_ref(s));
      (void)placed;  // dropped at once: the block waits for its own copy before it goes back
    }
    CHECK(sim::device_bytes_in_use(last) == before);
    {
      const auto placed = placed_by_a_local_manager(values, dk::stream_ref(s));
      CHECK(dk::to_host(placed, dk::stream_ref(s)) == values);  // after the copy queued on s
    }
    CHECK(sim::device_bytes_in_use(last) == before);
  }
  SECTION("a buffer freed on its stream after the manager went") {
    const dk::stream s(gpu);
    // A unique_ptr, not std::optional: GCC 12 at -O2 takes optional's payload for uninitialised
    // in the destructor's inlined reset (-Wmaybe-uninitialized, a false positive).
    std::unique_ptr<dk::device_buffer<float>> buffer;
    {
      gpu_manager dm{dk::settings::without_environment()};
      buffer = std::make_unique<dk::device_buffer<float>>(values.size(), dm.memory(gpu), s);
      REQUIRE(cudaMemsetAsync(buffer->data(), 0, buffer->size_bytes(), s.native_handle()) == cudaSuccess);
    }
    CHECK(sim::device_bytes_in_use(last) > before);
    buffer.reset();  // stream-ordered: the block stays the pool's until s has done its work
    s.synchronize();
    // Kept while that free is pending; the next manager that goes takes in such pools.
    {
      gpu_manager next{dk::settings::without_environment()};
      (void)next.memory(gpu);
    }
    CHECK(sim::device_bytes_in_use(last) == before);
  }
  CHECK(sim::violations().size() == violations_before);
}
