// manager.hpp and report/: the manager over stock and simulated hardware, the global manager,
// and the report as text and JSON.
#include <catch2/catch.hpp>

#include <devicekit/detect/compile_only.hpp>
#include <devicekit/manager.hpp>
#include <devicekit/report/json.hpp>

#include "test_support.hpp"

#include <sstream>

namespace dk = devicekit;

namespace {
using devicekit::testing::scoped_env;
using devicekit::testing::simulated_gpus;

using simulated_manager = dk::device_manager<dk::fixed_detector, dk::aggressive, dk::shard_batch>;
}  // namespace

TEST_CASE("a manager with stock policies is exactly as large as its state", "[manager]") {
  STATIC_REQUIRE(sizeof(dk::device_manager<>) == sizeof(dk::detail::manager_state));
  STATIC_REQUIRE(sizeof(dk::device_manager<dk::cpu_detector, dk::conservative, dk::schemes::replicate>) ==
                 sizeof(dk::detail::manager_state));
  STATIC_REQUIRE(sizeof(dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>,
                                           dk::custom_fraction<1, 2>, dk::shard_batch>) ==
                 sizeof(dk::detail::manager_state));
}

TEST_CASE("the default manager on this machine: GPU or CPU fallback with a reason", "[manager]") {
  dk::device_manager<> dm{dk::settings::without_environment()};
  CHECK(dm.device_count() >= 1);
  CHECK(dm.memory_fraction() == 0.75);
  CHECK(dm.cpu_devices() == std::vector<dk::device>{dk::device::cpu()});
  if (dm.has_gpu()) {
    CHECK(dm.default_device() == dk::device::cuda(0));
    CHECK(dm.fallback_reason().empty());
    CHECK(dm.gpu_devices().size() == static_cast<std::size_t>(dm.gpu_count()));
  } else {
    CHECK(dm.default_device() == dk::device::cpu());
    CHECK(dm.devices() == std::vector<dk::device>{dk::device::cpu()});
    CHECK(dm.gpu_devices().empty());
    CHECK(dm.gpu_count() == 0);
    CHECK_FALSE(dm.fallback_reason().empty());
  }
}

TEST_CASE("a simulated multi-GPU machine: devices, default device, properties", "[manager]") {
  simulated_manager dm{dk::settings::without_environment(), dk::fixed_detector{simulated_gpus(4)}};
  CHECK(dm.has_gpu());
  CHECK(dm.gpu_count() == 4);
  CHECK(dm.device_count() == 4);
  CHECK(dm.devices().size() == 4);
  CHECK(dm.gpu_devices().back() == dk::device::cuda(3));
  CHECK(dm.default_device() == dk::device::cuda(0));
  CHECK(dm.properties(dk::device::cuda(2)).hardware == dk::hardware_type::h100);
  CHECK(dm.capabilities().supports_distributed);
  CHECK(dm.memory_fraction() == 0.90);
  CHECK_THROWS_WITH(dm.properties(dk::device::cuda(9)), Catch::Contains("cuda:0, cuda:1, cuda:2, cuda:3"));

  simulated_manager second{dk::settings::without_environment().set_device(dk::device::cuda(2)),
                           dk::fixed_detector{simulated_gpus(4)}};
  CHECK(second.default_device() == dk::device::cuda(2));
  CHECK_THROWS_WITH((simulated_manager{dk::settings::without_environment().set_device(dk::device::cuda(7)),
                                       dk::fixed_detector{simulated_gpus(2)}}),
                    Catch::Contains("requested default device cuda:7 is not available; available: cuda:0, cuda:1"));
}

TEST_CASE("a custom detector that only gives counts still yields a device list", "[manager]") {
  dk::capabilities caps;
  caps.device_type = dk::device_kind::cuda;
  caps.device_count = 2;
  caps.total_memory_bytes = 160ull << 30;
  dk::device_manager<dk::fixed_detector> dm{dk::settings::without_environment(), dk::fixed_detector{caps}};
  REQUIRE(dm.devices().size() == 2);
  CHECK(dm.gpu_count() == 2);
  CHECK(dm.properties(dk::device::cuda(1)).total_memory_bytes == (80ull << 30));
}

namespace {
/// A detector as docs/detection.md describes one: it names its GPUs and leaves their hardware
/// class alone, as a user's own detector does.
struct named_gpu_detector {
  static constexpr std::string_view name() noexcept { return "lab"; }
  [[nodiscard]] dk::capabilities detect() const {
    dk::capabilities caps;
    caps.device_type = dk::device_kind::cuda;
    for (int i = 0; i < 2; ++i) {
      dk::device_properties p;
      p.id = dk::device::cuda(i);
      p.name = "NVIDIA A100-SXM4-80GB";
      p.total_memory_bytes = 80ull << 30;
      p.cc = {8, 0};
      caps.devices.push_back(p);
    }
    caps.cc = dk::compute_capability{8, 0};
    caps.device_count = caps.gpu_count = 2;
    return caps;
  }
};
}  // namespace

TEST_CASE("a detector that leaves the hardware unknown gets the class its device names give", "[manager]") {
  const dk::device_manager<named_gpu_detector> dm{dk::settings::without_environment()};
  CHECK(dm.properties(dk::device::cuda(0)).hardware == dk::hardware_type::a100);
  CHECK(dm.properties(dk::device::cuda(1)).hardware == dk::hardware_type::a100);
  // Batch advice and the report use the A100's table row, not a stand-in.
  const auto advice = dk::recommend_for(dm.capabilities());
  CHECK(advice.hardware == dk::hardware_type::a100);
  CHECK(advice.batch.from_table);
  CHECK(advice.batch.optimal_batch_size == 256);
  CHECK(dm.report().default_hardware() == dk::hardware_type::a100);
  std::ostringstream text;
  dk::print_device_info(dm, text);
  CHECK_THAT(text.str(), Catch::Contains("256 per device for a100") && !Catch::Contains("stand-in"));

  // A class the detector gave stands, whatever the name says; a name no table row matches stays unknown.
  dk::capabilities given = simulated_gpus(2);
  given.devices[0].name = "NVIDIA A100-SXM4-80GB";  // classified h100 by the detector: kept
  given.devices[1].name = "Lab Accelerator 1";
  given.devices[1].hardware = dk::hardware_type::unknown;
  const dk::device_manager<dk::fixed_detector> fixed{dk::settings::without_environment(), dk::fixed_detector{given}};
  CHECK(fixed.properties(dk::device::cuda(0)).hardware == dk::hardware_type::h100);
  CHECK(fixed.properties(dk::device::cuda(1)).hardware == dk::hardware_type::unknown);
}

TEST_CASE("a detector list that finds nothing is a config_error with the reasons", "[manager]") {
  dk::capabilities nothing;
  nothing.fallback_reason = "the lab is closed";
  CHECK_THROWS_WITH(
      (dk::device_manager<dk::fixed_detector>{dk::settings::without_environment(), dk::fixed_detector{nothing}}),
      Catch::Contains("the lab is closed") && Catch::Contains("cpu_detector"));
}

TEST_CASE("a cuda preference that cannot be met falls back and says it was requested", "[manager]") {
  scoped_env hide("CUDA_VISIBLE_DEVICES", "");
  dk::device_manager<> dm{dk::settings::without_environment().set_prefer(dk::device_preference::cuda)};
  CHECK_FALSE(dm.has_gpu());
  CHECK_THAT(dm.fallback_reason(), Catch::StartsWith("CUDA was requested"));
}

TEST_CASE("the global manager is created once and re-initialised on request", "[manager][global]") {
  auto& first = dk::default_manager();
  CHECK(&first == &dk::default_manager());
  CHECK(dk::has_gpu() == first.has_gpu());
  CHECK(dk::default_device() == first.default_device());
  // Without force_reinit: the manager as it is for the settings it has, and an error naming what
  // differs for others (they would be ignored).
  CHECK(&dk::default_manager(dk::settings{}, false) == &first);
  CHECK(&dk::default_manager(first.config(), false) == &first);
  CHECK_THROWS_WITH(
      dk::default_manager(dk::settings::without_environment().set_prefer(dk::device_preference::cpu), false),
      Catch::StartsWith("default_manager: the global manager exists already") &&
          Catch::Contains("device preference 'cpu' (the global manager's: '" +
                          std::string(dk::to_string(first.config().get_prefer())) + "')") &&
          Catch::Contains("force_reinit = true"));
  CHECK(&dk::default_manager() == &first);
  auto& reinit = dk::default_manager(dk::settings::without_environment().set_prefer(dk::device_preference::cpu), true);
  CHECK(&reinit == &first);
  CHECK_FALSE(reinit.has_gpu());
  CHECK(reinit.default_device() == dk::device::cpu());
  dk::default_manager(dk::settings{}, true);  // leave it as the environment would have it
}

TEST_CASE("re-initialising the global manager can change its memory strategy", "[manager][global]") {
  const auto cpu_only = dk::settings::without_environment().set_prefer(dk::device_preference::cpu);
  // Any strategy policy, as it is: no dynamic_strategy{describe_strategy(...)} by hand.
  auto& dm = dk::default_manager(cpu_only, true, dk::aggressive{});
  CHECK(dm.memory_fraction() == 0.90);
  const std::uint64_t total = dm.budget(dk::device::cpu()).total_bytes;
  CHECK(dm.budget(dk::device::cpu()).budget_bytes ==
        dk::budget_for(dk::aggressive{}, dk::device_kind::cpu, total).budget_bytes);
  CHECK(dm.report().strategy.name == "aggressive");

  // The same object, re-initialised: the budget follows the new strategy.
  auto& again = dk::default_manager(cpu_only, true, dk::dynamic_strategy{dk::describe_strategy(dk::conservative{})});
  CHECK(&again == &dm);
  CHECK(dm.memory_fraction() == 0.60);
  CHECK(dm.budget(dk::device::cpu()).budget_bytes ==
        dk::budget_for(dk::conservative{}, dk::device_kind::cpu, total).budget_bytes);
  CHECK(dm.memory(dk::device::cpu()).stats().max_size == dm.budget(dk::device::cpu()).budget_bytes);

  // Without force_reinit nothing changes: another strategy is refused rather than ignored, the
  // same one is the manager as it is.
  CHECK_THROWS_WITH(dk::default_manager(cpu_only, false, dk::dynamic_strategy{dk::describe_strategy(dk::aggressive{})}),
                    Catch::Contains("memory strategy 'aggressive' (0.9) (the global manager's: 'conservative' (0.6))"));
  CHECK(dm.memory_fraction() == 0.60);
  CHECK(&dk::default_manager(cpu_only, false, dk::conservative{}) == &dm);

  // A manager_config (what generative_model_preset().manager() gives) re-initialises it too.
  const dk::manager_config cfg{cpu_only, dk::describe_strategy(dk::runtime_fraction_range::parse("0.1-0.5"))};
  dk::default_manager(cfg, true);
  CHECK(dm.memory_fraction() == 0.5);
  CHECK(dm.budget(dk::device::cpu()).start_fraction == 0.1);

  // Settings alone change the settings only: the strategy stays.
  dk::default_manager(cpu_only, true);
  CHECK(dm.memory_fraction() == 0.5);
  CHECK(dm.budget(dk::device::cpu()).start_fraction == 0.1);
  CHECK(dm.config().get_prefer() == dk::device_preference::cpu);

  // A strategy alone changes the strategy only: the settings stay (no GPU: cpu was asked for).
  dk::default_manager(dk::custom_fraction<1, 4>{}, true);
  CHECK(dm.memory_fraction() == 0.25);
  CHECK(dm.config().get_prefer() == dk::device_preference::cpu);
  CHECK_FALSE(dm.has_gpu());
  CHECK_THROWS_AS(dk::default_manager(dk::aggressive{}, false), dk::config_error);  // not ignored
  CHECK(dm.memory_fraction() == 0.25);
  CHECK(&dk::default_manager(dk::custom_fraction<1, 4>{}, false) == &dm);
  dk::default_manager(dk::balanced{}, true);
  CHECK(dm.memory_fraction() == 0.75);
  CHECK(dk::memory_stats(dk::device::cpu()) == dm.memory_stats(dk::device::cpu()));
  CHECK(dk::live_buffers(dk::device::cpu()).empty());
  dk::default_manager(dk::settings{}, true);  // leave it as the environment would have it
}

TEST_CASE("settings given to a manager start from the environment, code wins, the opt-out reads none",
          "[manager][settings]") {
  using two_gpus = dk::device_manager<dk::fixed_detector>;
  {
    scoped_env device("DEVICEKIT_DEVICE", "cuda:1");
    scoped_env allocator("DEVICEKIT_ALLOCATOR", "async");
    scoped_env prefer("DEVICEKIT_PREFER", nullptr);
    scoped_env platforms("DEVICEKIT_PLATFORMS", nullptr);
    scoped_env reserve("DEVICEKIT_COLLECTIVE_MEMORY_SIZE", nullptr);

    // As docs/detection.md writes it (settings to pass a detector, a platform list): the
    // environment fills what the code left unset, and config() shows the effective settings.
    const two_gpus built{dk::settings{}.set_platforms({dk::device_kind::cuda}), dk::fixed_detector{simulated_gpus(2)}};
    CHECK(built.default_device() == dk::device::cuda(1));
    CHECK(built.allocator() == dk::allocator_kind::async);
    CHECK(built.config().get_device() == dk::device::cuda(1));
    CHECK(built.config().platforms_source() == "settings");
    CHECK_FALSE(built.config().reads_environment());

    // What the code set wins.
    const two_gpus chosen{dk::settings{}.set_device(dk::device::cuda(0)).set_allocator(dk::allocator_kind::pool),
                          dk::fixed_detector{simulated_gpus(2)}};
    CHECK(chosen.default_device() == dk::device::cuda(0));
    CHECK(chosen.allocator() == dk::allocator_kind::pool);

    // The opt-out: nothing from the environment.
    const two_gpus none{dk::settings::without_environment(), dk::fixed_detector{simulated_gpus(2)}};
    CHECK(none.default_device() == dk::device::cuda(0));
    CHECK_FALSE(none.config().has_device());
    CHECK(none.allocator() == dk::allocator_kind::pool);

    // A bad value is a config_error naming the variable, unless the code set that field.
    {
      scoped_env bad("DEVICEKIT_DEVICE", "npu:0");
      CHECK_THROWS_WITH((two_gpus{dk::settings{}, dk::fixed_detector{simulated_gpus(2)}}),
                        Catch::StartsWith("DEVICEKIT_DEVICE: cannot parse"));
      const two_gpus set{dk::settings{}.set_device(dk::device::cuda(1)), dk::fixed_detector{simulated_gpus(2)}};
      CHECK(set.default_device() == dk::device::cuda(1));
    }

    // The global manager takes settings the same way.
    {
      scoped_env cpu("DEVICEKIT_PREFER", "cpu");
      scoped_env any_device("DEVICEKIT_DEVICE", nullptr);
      scoped_env any_allocator("DEVICEKIT_ALLOCATOR", nullptr);
      CHECK(dk::default_manager(dk::settings{}, true).config().get_prefer() == dk::device_preference::cpu);
      CHECK_FALSE(dk::default_manager(dk::settings::without_environment(), true).config().has_prefer());
    }
  }
  dk::default_manager(dk::settings{}, true);  // leave it as the environment would have it
}

TEST_CASE("the text report shows what print_device_info has always shown", "[report]") {
  simulated_manager dm{dk::settings::without_environment(), dk::fixed_detector{simulated_gpus(2)}};
  std::ostringstream os;
  dk::print_device_info(dm, os, true);
  const std::string text = os.str();
  for (const char* line :
       {"Backend: cuda", "Device Type: cuda", "Device Count: 2", "GPU Count: 2", "Memory Strategy: aggressive",
        "Memory Fraction: 0.90", "Default Device: cuda:0", "Compute Capability: 9.0", "Distribution: shard_batch",
        "cuda:1  NVIDIA H100 80GB HBM3", "UUID: GPU-", "Peer Access: cuda:1", "$0.50/h"}) {
    INFO(line);
    CHECK(text.find(line) != std::string::npos);
  }
  CHECK(text.find("Fallback:") == std::string::npos);
}

TEST_CASE("the JSON report has the documented fields", "[report][json]") {
  simulated_manager gpu{dk::settings::without_environment(), dk::fixed_detector{simulated_gpus(2)}};
  const auto j = dk::to_json(gpu.report(dk::cost_table{}.set(dk::hardware_type::h100, 2.5)));
  CHECK(j.at("backend") == "cuda");
  CHECK(j.at("device_type") == "cuda");
  CHECK(j.at("device_count") == 2);
  CHECK(j.at("gpu_count") == 2);
  CHECK(j.at("default_device") == "cuda:0");
  CHECK(j.at("fallback_reason").is_null());
  CHECK(j.at("memory_strategy") == "aggressive");
  CHECK(j.at("memory_fraction") == 0.90);
  CHECK(j.at("compute_capability") == "9.0");
  CHECK(j.contains("cuda_runtime_version"));
  CHECK(j.contains("driver_version"));
  REQUIRE(j.at("devices").size() == 2);
  const auto& d1 = j.at("devices").at(1);
  CHECK(d1.at("id") == "cuda:1");
  CHECK(d1.at("kind") == "cuda");
  CHECK(d1.at("name") == "NVIDIA H100 80GB HBM3");
  CHECK(d1.at("total_memory_bytes") == (80ull << 30));
  CHECK(d1.at("cost_per_hour_usd") == 2.5);
  CHECK(d1.at("peer_access") == nlohmann::json::array({"cuda:0"}));
  CHECK(j.at("batch_size").at("critical") == 298);

  dk::device_manager<dk::cpu_detector> cpu{dk::settings::without_environment()};
  const auto c = dk::to_json(cpu.report());
  CHECK(c.at("device_type") == "cpu");
  CHECK(c.at("gpu_count") == 0);
  CHECK(c.at("devices").at(0).at("id") == "cpu:0");
  CHECK(c.at("compute_capability").is_null());
}

// --- every byte from a devicekit pool ----------------------------------------------------------------

TEST_CASE("memory kinds have jaxlib's names", "[manager][memory_kind]") {
  CHECK(dk::to_string(dk::memory_kind::device) == "device");
  CHECK(dk::to_string(dk::memory_kind::pinned_host) == "pinned_host");
  CHECK(dk::to_string(dk::memory_kind::host) == "host");
  CHECK(dk::parse_memory_kind("pinned_host") == dk::memory_kind::pinned_host);
  CHECK(dk::parse_memory_kind("unpinned_host") == dk::memory_kind::host);
  CHECK_THROWS_WITH(dk::parse_memory_kind("hbm"), Catch::Contains("device, pinned_host, host"));
}

TEST_CASE("the process's memory registry hands out one pool per device and kind", "[manager][registry]") {
  dk::device_memory& host = dk::default_memory(dk::device::cpu());
  CHECK(&host == &dk::default_memory(dk::device::cpu()));
  CHECK(&host == &dk::default_memory(dk::device::cpu(), dk::memory_kind::host));
  CHECK(&host == &dk::default_memory(dk::device::cpu(3)));                          // every cpu ordinal is the host
  CHECK(&host == &dk::default_memory(dk::device::cuda(0), dk::memory_kind::host));  // host memory is the host's
  CHECK(host.get_device() == dk::device::cpu());
  CHECK(&host == &dk::default_placement_resource(dk::device::cpu()));
  void* p = host.allocate(1000);
  CHECK(host.live_allocations().size() >= 1);
  host.deallocate(p, 1000);
}

TEST_CASE("pinned_host memory without a usable GPU is refused with what to do instead", "[manager][memory_kind]") {
  scoped_env hide("CUDA_VISIBLE_DEVICES", "");
  dk::device_manager<> dm{dk::settings::without_environment().set_prefer(dk::device_preference::cpu)};
  CHECK_THROWS_AS(dm.memory(dk::device::cpu(), dk::memory_kind::pinned_host), dk::config_error);
  CHECK_THROWS_WITH(dm.memory(dk::device::cpu(), dk::memory_kind::pinned_host), Catch::Contains("memory_kind::host"));
  CHECK(&dm.memory(dk::device::cpu(), dk::memory_kind::host) == &dm.memory(dk::device::cpu()));
  CHECK(&dm.memory(dk::device::cpu(), dk::memory_kind::device) == &dm.memory(dk::device::cpu()));
  // A user's manager keeps pools of its own; the process's are another.
  CHECK(&dm.memory(dk::device::cpu()) != &dk::default_memory(dk::device::cpu()));
#if DEVICEKIT_HAS_CUDA
  // No driver on a CPU-only machine: the process's pinned pool refuses too (on a GPU machine it works).
  int count = 0;
  const bool usable_gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  if (!usable_gpu) {
    CHECK_THROWS_WITH(dk::default_memory(dk::device::cpu(), dk::memory_kind::pinned_host),
                      Catch::Contains("memory_kind::host"));
  }
#else
  CHECK_THROWS_WITH(dk::default_memory(dk::device::cpu(), dk::memory_kind::pinned_host), Catch::Contains("needs CUDA"));
#endif
}

TEST_CASE("the global manager's pools are the process's; re-initialising replaces them",
          "[manager][global][registry]") {
  const auto cpu_only = dk::settings::without_environment().set_prefer(dk::device_preference::cpu);
  auto& dm = dk::default_manager(cpu_only, true);
  dk::device_memory& first = dm.memory(dk::device::cpu());
  CHECK(&first == &dk::default_memory(dk::device::cpu()));
  CHECK(&first == &dk::default_placement_resource(dk::device::cpu()));
  CHECK(first.stats().max_size == dm.budget(dk::device::cpu()).budget_bytes);  // the manager's strategy
  void* kept = first.allocate(4096);

  // Another strategy: a new pool of the new budget becomes the process's; the old one stays alive
  // for what was allocated from it.
  dk::default_manager(cpu_only, true, dk::dynamic_strategy{dk::describe_strategy(dk::conservative{})});
  dk::device_memory& second = dm.memory(dk::device::cpu());
  CHECK(&second != &first);
  CHECK(&second == &dk::default_memory(dk::device::cpu()));
  CHECK(second.stats().max_size == dm.budget(dk::device::cpu()).budget_bytes);
  CHECK(dm.memory_stats(dk::device::cpu()).bytes_in_use >= 4096);  // the retired pool still counts
  first.deallocate(kept, 4096);
  CHECK(&dm.memory(dk::device::cpu()) == &second);  // same configuration: same pool

  // Placement without a resource now allocates from it, and the stats see it.
  const auto before = dk::memory_stats(dk::device::cpu(), dk::memory_kind::host);
  {
    const auto placed = dk::place(std::vector<float>(1024, 1.f), dk::device::cpu());
    CHECK(dk::memory_stats(dk::device::cpu(), dk::memory_kind::host).bytes_in_use >= before.bytes_in_use + 4096);
  }
  CHECK(dk::memory_stats(dk::device::cpu(), dk::memory_kind::host).bytes_in_use == before.bytes_in_use);
  dk::default_manager(dk::settings{}, true);  // leave it as the environment would have it
}

TEST_CASE("the default device follows the local rank as the communicators' assign_device does", "[manager]") {
  {
    scoped_env rank("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    simulated_manager dm{dk::settings::without_environment(), dk::fixed_detector{simulated_gpus(2)}};
    CHECK(dm.default_device() == dk::device::cuda(1));  // 3 % 2
    CHECK(dm.default_device() == dk::assign_device(dm.devices(), dk::settings::without_environment()));
  }
  simulated_manager one{dk::settings::without_environment(), dk::fixed_detector{simulated_gpus(2)}};
  if (!dk::local_rank_from_environment()) CHECK(one.default_device() == dk::device::cuda(0));  // one process: unchanged
  simulated_manager asked{dk::settings::without_environment().set_device(dk::device::cuda(1)),
                          dk::fixed_detector{simulated_gpus(2)}};
  CHECK(asked.default_device() == dk::device::cuda(1));
  CHECK_THROWS_WITH((simulated_manager{dk::settings::without_environment().set_device(dk::device::cuda(5)),
                                       dk::fixed_detector{simulated_gpus(2)}}),
                    Catch::Contains("requested default device cuda:5 is not available"));
}

TEST_CASE("the report shows the staging pool and each device's scratch", "[manager][report][registry]") {
  simulated_manager dm{dk::settings::without_environment(), dk::fixed_detector{simulated_gpus(2)}};
  auto r = dm.report();
  REQUIRE(r.memory_of(dk::device::cuda(0)) != nullptr);
  CHECK(r.memory_of(dk::device::cuda(0))->scratch_allocations ==
        dk::scratch_memory_stats(dk::device::cuda(0)).allocations);
  // Figures as a process with staging and scratch in use would have them.
  r.staging = dk::pool_stats{};
  r.staging->allocated_bytes = std::size_t{3} << 20;
  r.staging->reserved_bytes = std::size_t{8} << 20;
  auto* m = const_cast<dk::device_memory_info*>(r.memory_of(dk::device::cuda(0)));
  m->scratch_in_use_bytes = std::size_t{1} << 20;
  m->scratch_peak_bytes = std::size_t{2} << 20;
  m->scratch_allocations = 7;
  std::ostringstream os;
  dk::write_text(os, r);
  CHECK(os.str().find("Pinned Staging: 3.0 MiB in use") != std::string::npos);
  CHECK(os.str().find("scratch: 1.0 MiB in use (peak 2.0 MiB, 7 allocations)") != std::string::npos);
  const auto j = dk::to_json(r);
  CHECK(j.at("staging").at("reserved_bytes") == (std::size_t{8} << 20));
  CHECK(j.at("devices").at(0).at("memory").at("scratch").at("allocations") == 7);
}

TEST_CASE("a device's memories as jaxlib lists them: kinds, default, spaces, who reaches them",
          "[manager][memory_kind]") {
  using K = dk::memory_kind;
  simulated_manager dm{dk::settings::without_environment(), dk::fixed_detector{simulated_gpus(2)}};
  const dk::device gpu0 = dk::device::cuda(0);
  const dk::device cpu = dk::device::cpu();
  CHECK(dk::default_memory_kind(dm, gpu0) == K::device);
#if DEVICEKIT_HAS_CUDA
  CHECK(dk::memory_kinds(dm, gpu0) == std::vector<K>{K::device, K::pinned_host, K::host});
  CHECK(dk::memory_kinds(dm, cpu) == std::vector<K>{K::device, K::pinned_host, K::host});
  const auto spaces = dk::addressable_memories(dm, gpu0);
  REQUIRE(spaces.size() == 3);
  CHECK(spaces[1] == dk::memory_space{gpu0, K::pinned_host});
  CHECK(spaces[1].str() == "cuda:0/pinned_host");
  CHECK(dk::addressable_by_devices(dm, spaces[1]) == std::vector<dk::device>{gpu0});
#endif
  CHECK(dk::addressable_by_devices(dm, {gpu0, K::device}) == std::vector<dk::device>{gpu0});
  // One host pool for the process: every device places into the same host space.
  CHECK(dk::addressable_by_devices(dm, {dk::device::cuda(1), K::host}) ==
        std::vector<dk::device>{gpu0, dk::device::cuda(1), cpu});

  // A CPU-only manager: no GPU to pin memory for, so no pinned_host space.
  dk::device_manager<dk::cpu_detector> host_only;
  CHECK(dk::memory_kinds(host_only, cpu) == std::vector<K>{K::device, K::host});
  CHECK_THROWS_WITH(dk::addressable_by_devices(host_only, {cpu, K::pinned_host}),
                    Catch::Contains("cpu:0 has no memory kind pinned_host"));
  CHECK_THROWS_AS(dk::memory_kinds(dm, dk::device::cuda(5)), dk::config_error);
}

// A described machine (jaxlib's compile-only devices): 8 H100s from a saved topology, planned
// for on a machine that has none of them.
TEST_CASE("compile-only devices: plans, shard layouts and budgets, but no memory", "[manager][compile_only]") {
  std::vector<dk::device> eight;
  for (int i = 0; i < 8; ++i) eight.push_back(dk::device::cuda(i));
  const dk::device_topology saved{
      "cuda", "cuda driver 13.0 runtime 13.0",
      dk::device_list::local(eight, {}, std::vector<std::string>(8, "NVIDIA H100 80GB HBM3"))};
  const auto topology = dk::device_topology::deserialize(saved.serialize());
  using described_manager = dk::device_manager<dk::compile_only_detector, dk::balanced, dk::shard_batch>;
  described_manager dm{dk::settings::without_environment(),
                       dk::compile_only_detector::from_topology(topology, 80ull << 30)};

  CHECK(dm.devices() == eight);
  CHECK(dm.capabilities().detector == "compile_only");
  CHECK(dm.properties(dk::device::cuda(3)).hardware == dk::hardware_type::h100);
  CHECK(dm.properties(dk::device::cuda(3)).compile_only);
  const auto b = dm.budget(dk::device::cuda(7));
  CHECK(b.total_bytes == 80ull << 30);
  CHECK(b.budget_bytes > 0);
  CHECK(b.budget_bytes < b.total_bytes);

  dk::tree_summary rows;
  rows.batch = 100;
  rows.leaf_count = 2;
  rows.total_bytes = 100 * 4096;
  const auto plan = dm.plan(rows);
  REQUIRE(plan.shares.size() == 8);
  CHECK(plan.shares[0].count == 13);  // 100 rows over 8: 13, 13, 13, 13, 12, 12, 12, 12
  CHECK(plan.shares[7].count == 12);
  std::ostringstream report;
  dk::print_device_info(dm, report);
  CHECK_THAT(report.str(), Catch::Contains("Device Count: 8") && Catch::Contains("NVIDIA H100 80GB HBM3"));

  CHECK_THROWS_WITH(dm.memory(dk::device::cuda(0)),
                    Catch::Contains("cuda:0") && Catch::Contains("compile-only device"));
  CHECK_THROWS_AS(dm.place(std::vector<float>(4, 1.0f)), dk::config_error);

  dk::device_topology host_only;
  CHECK_THROWS_WITH(dk::compile_only_detector::from_topology(host_only, 1), Catch::Contains("no GPU"));
  CHECK_THROWS_WITH(dk::compile_only_detector::from_topology(topology, 0), Catch::Contains("memory_bytes is 0"));
}
