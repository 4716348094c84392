// report/: the routing in force, the recommendations derived from the hardware and the engines,
// in the text report and in JSON.
#include <catch2/catch.hpp>

#include <devicekit/manager.hpp>
#include <devicekit/report/json.hpp>

#include "test_support.hpp"

#include <sstream>
#include <string>

namespace dk = devicekit;
using devicekit::testing::scoped_env;
using devicekit::testing::simulated_gpus;

namespace {
using gpu_chain = dk::first_available<dk::fixed_detector, dk::cpu_detector>;
using gpu_manager = dk::device_manager<gpu_chain>;

gpu_manager two_h100s(dk::settings s = dk::settings::without_environment()) {
  return gpu_manager{std::move(s), gpu_chain{dk::fixed_detector{simulated_gpus(2)}, dk::cpu_detector{}}};
}

std::string text_of(const dk::device_report& r) {
  std::ostringstream os;
  dk::write_text(os, r);
  return os.str();
}
}  // namespace

TEST_CASE("the report names the routing in force", "[report][routing]") {
  const auto plain = two_h100s().report();
  CHECK(plain.routing.detector == "first_available<fixed, cpu>");
  CHECK(plain.routing.platforms.empty());
  CHECK(plain.routing.mode() == "detector order first_available<fixed, cpu>");
  CHECK(plain.routing.default_device_choice == "the first device found");

  const auto listed = two_h100s(dk::settings::without_environment()
                                    .set_platforms({dk::device_kind::cpu, dk::device_kind::cuda})
                                    .set_device(dk::device::cpu()))
                          .report();
  CHECK(listed.caps.device_type == dk::device_kind::cpu);
  CHECK(listed.routing.platforms == std::vector<std::string>{"cpu", "cuda"});
  CHECK(listed.routing.platforms_source == "settings");
  CHECK(listed.routing.mode() == "platform list cpu,cuda (settings) over first_available<fixed, cpu>");
  CHECK(listed.routing.default_device_choice == "requested: cpu:0 (DEVICEKIT_DEVICE or settings)");
  const auto j = dk::to_json(listed);
  CHECK(j.at("routing").at("platforms") == nlohmann::json::array({"cpu", "cuda"}));
  CHECK(j.at("routing").at("platforms_source") == "settings");
  CHECK(j.at("routing").at("detector") == "first_available<fixed, cpu>");
  CHECK(j.at("routing").at("preference") == "auto");
  const auto text = text_of(listed);
  CHECK_THAT(text, Catch::Contains("Routing: platform list cpu,cuda (settings) over first_available<fixed, cpu>"));
  CHECK_THAT(text, Catch::Contains("Default Device Choice: requested: cpu:0"));

  scoped_env env("DEVICEKIT_PLATFORMS", "cuda");
  const auto from_env = two_h100s(dk::settings::from_environment()).report();
  CHECK(from_env.routing.platforms_source == "DEVICEKIT_PLATFORMS");
  CHECK(dk::to_json(from_env).at("routing").at("mode") ==
        "platform list cuda (DEVICEKIT_PLATFORMS) over first_available<fixed, cpu>");
}

TEST_CASE("recommendations follow the detected hardware", "[report][recommendations]") {
  const auto gpus = two_h100s().report();
  const auto advice = dk::recommend_for(gpus.caps);
  const auto h100 = dk::batch_size_recommendation_for(dk::hardware_type::h100);
  CHECK(advice.hardware == dk::hardware_type::h100);
  CHECK(advice.batch.optimal_batch_size == h100.optimal_batch_size);
  CHECK(advice.batch_multiplier == dk::batch_multiplier(dk::hardware_type::h100));
  CHECK(advice.precision == "bf16");  // sm_90 has bf16: preferred over fp16
  CHECK(advice.mixed_precision);
  CHECK(advice.memory_strategy == dk::generative_model_preset(true, true).strategy.name);
  const auto j = dk::to_json(gpus).at("recommendations");
  CHECK(j.at("batch_size").at("hardware") == "h100");
  CHECK(j.at("batch_size").at("optimal") == h100.optimal_batch_size);
  CHECK(j.at("precision") == "bf16");
  CHECK(j.at("memory_strategy_by_model_size").at("balanced_below_parameters") == 100'000'000);
  const auto text = text_of(gpus);
  CHECK_THAT(text, Catch::Contains("Recommendations:\n  Batch Size: " + std::to_string(h100.optimal_batch_size) +
                                   " per device for h100"));
  CHECK_THAT(text, Catch::Contains("  Precision: bf16 mixed precision"));

  // A V100 (sm_70: fp16, no bf16) next to an H100: the smaller GPU decides the batch, the
  // lowest compute capability the precision.
  auto mixed = simulated_gpus(2);
  mixed.devices[1].name = "Tesla V100-SXM2-16GB";
  mixed.devices[1].hardware = dk::hardware_type::v100;
  mixed.devices[1].total_memory_bytes = 16ull << 30;
  mixed.cc = dk::compute_capability{7, 0};
  mixed.precision = dk::precision_for(*mixed.cc);
  const auto v = dk::recommend_for(mixed);
  CHECK(v.hardware == dk::hardware_type::v100);
  CHECK(v.precision == "fp16");

  const auto cpu = dk::device_manager<dk::cpu_detector>{dk::settings::without_environment()}.report();
  const auto c = dk::recommend_for(cpu.caps);
  CHECK(c.hardware == dk::hardware_type::cpu);
  CHECK(c.precision == "fp32");
  CHECK_FALSE(c.mixed_precision);
  CHECK_THAT(text_of(cpu), Catch::Contains("  Precision: fp32 (no native reduced precision)"));
}

TEST_CASE("the report lists the engines, built or not", "[report][engines]") {
  const auto engines = dk::query_engines();
  REQUIRE(engines.size() == 2);
  CHECK(engines[0].name == "nccl");
  CHECK(engines[1].name == "mpi");
  CHECK(engines[0].built == static_cast<bool>(DEVICEKIT_HAS_NCCL));
  CHECK(engines[1].built == static_cast<bool>(DEVICEKIT_HAS_MPI));
  for (const auto& e : engines) {
    INFO(e.name << ": " << e.status);
    if (e.built) {
      CHECK_FALSE(e.header_version.empty());
      CHECK_THAT(e.status, Catch::Contains(e.library_version.empty() ? "library not linked" : e.library_version));
    } else {
      CHECK_THAT(e.status, Catch::StartsWith("not built"));
      CHECK(e.header_version.empty());
    }
  }
#if DEVICEKIT_HAS_NCCL
  CHECK(engines[0].header_version ==
        std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH));
#endif
  const auto r = two_h100s().report();
  const auto j = dk::to_json(r).at("engines");
  CHECK(j.at("nccl").at("status") == engines[0].status);
  CHECK(j.at("mpi").at("built") == engines[1].built);
  const auto text = text_of(r);
  CHECK_THAT(text, Catch::Contains("Engines:\n  NCCL: " + engines[0].status + "\n  MPI: " + engines[1].status));
}

// The CUDA runtime reads its variables once, when it starts: a manager whose settings change one
// afterwards says so (report and warning) rather than listing it as set. Without a usable driver
// the runtime never starts, and nothing comes too late.
TEST_CASE("a CUDA_* setting made after the runtime started is reported as too late", "[report][environment]") {
  scoped_env order("CUDA_DEVICE_ORDER", nullptr);
  scoped_env other("DEVICEKIT_TEST_VARIABLE", nullptr);
  (void)dk::device_manager<>{};  // default detection: the CUDA probe runs (once per process)
  const auto started = dk::detail::cuda_start_environment();
  dk::settings s;
  s.set_environment_variable("DEVICEKIT_TEST_VARIABLE", "1");
#if DEVICEKIT_HAS_CUDA
  if (dk::detail::cached_cuda_probe().failure.find("cudaErrorInsufficientDriver") != std::string::npos) {
    // No driver: the runtime did not start, so it started with no value to keep.
    CHECK_FALSE(started.has_value());
    s.set_environment_variable("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    const auto r = two_h100s(s).report();
    CHECK(r.environment_too_late.empty());
    CHECK(r.environment_applied == std::vector<std::string>{"CUDA_DEVICE_ORDER", "DEVICEKIT_TEST_VARIABLE"});
    CHECK_THAT(text_of(r), !Catch::Contains("Environment Too Late"));
    return;
  }
  REQUIRE(started.has_value());
  const auto it = started->find("CUDA_DEVICE_ORDER");
  const bool was_pci = it != started->end() && it->second == "PCI_BUS_ID";
  const std::string wanted = was_pci ? "FASTEST_FIRST" : "PCI_BUS_ID";
  s.set_environment_variable("CUDA_DEVICE_ORDER", wanted);
  const auto r = two_h100s(s).report();
  CHECK(r.environment_applied == std::vector<std::string>{"DEVICEKIT_TEST_VARIABLE"});
  REQUIRE(r.environment_too_late.size() == 1);
  CHECK_THAT(r.environment_too_late.front(), Catch::StartsWith("CUDA_DEVICE_ORDER=" + wanted) &&
                                                 Catch::Contains("the CUDA runtime started with CUDA_DEVICE_ORDER"));
  CHECK_THAT(text_of(r), Catch::Contains("Environment Too Late") && Catch::Contains("CUDA_DEVICE_ORDER=" + wanted));
  CHECK(dk::to_json(r)["environment_too_late"].size() == 1);

  // The value the runtime started with is in effect: setting it again is not too late.
  dk::settings same;
  if (it != started->end()) {
    same.set_environment_variable("CUDA_DEVICE_ORDER", it->second);
    const auto again = two_h100s(same).report();
    CHECK(again.environment_too_late.empty());
    CHECK(again.environment_applied == std::vector<std::string>{"CUDA_DEVICE_ORDER"});
  }
#else
  REQUIRE_FALSE(started.has_value());  // no runtime to start: nothing comes too late
  s.set_environment_variable("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  const auto r = two_h100s(s).report();
  CHECK(r.environment_too_late.empty());
  CHECK(r.environment_applied.size() == 2);
#endif
}

TEST_CASE("the report aggregates the platforms and device kinds present", "[report]") {
  auto caps = simulated_gpus(3);
  caps.devices[2].name = "NVIDIA A100-SXM4-80GB";
  const auto r =
      gpu_manager{dk::settings::without_environment(), gpu_chain{dk::fixed_detector{caps}, dk::cpu_detector{}}}
          .report();
  CHECK(r.platforms() == std::vector<std::string>{"cuda"});
  CHECK(r.device_kinds() == std::vector<std::string>{caps.devices[0].name, "NVIDIA A100-SXM4-80GB"});
  const std::string text = text_of(r);
  CHECK_THAT(text, Catch::Contains("Platforms: cuda\n") &&
                       Catch::Contains("Device Kinds: " + caps.devices[0].name + ", NVIDIA A100-SXM4-80GB\n"));
  CHECK(dk::to_json(r).at("device_kinds").size() == 2);

  const auto host = dk::device_manager<dk::cpu_detector>{}.report();
  CHECK(host.platforms() == std::vector<std::string>{"cpu"});
  CHECK(dk::to_json(host).at("platforms") == nlohmann::json::array({"cpu"}));
}

TEST_CASE("the report shows when a budget was capped to what the device had available", "[report][memory]") {
  dk::device_report r = two_h100s().report();
  const dk::memory_budget share = r.memory.at(0).budget;
  CHECK_FALSE(share.available_bytes.has_value());  // a described device: nothing measured
  auto j = dk::to_json(r).at("devices").at(0).at("memory");
  CHECK(j.at("available_bytes").is_null());
  CHECK(j.at("capped_to_available") == false);
  CHECK_THAT(text_of(r), Catch::Contains("budget 59.5 GiB = 0.75 x 80.0 GiB - 512.0 MiB headroom;"));

  r.memory.at(0).budget = dk::cap_to_available(share, 10ull << 30);
  j = dk::to_json(r).at("devices").at(0).at("memory");
  CHECK(j.at("available_bytes") == (10ull << 30));
  CHECK(j.at("capped_to_available") == true);
  CHECK(j.at("budget_bytes") == (10ull << 30));
  CHECK_THAT(text_of(r),
             Catch::Contains("budget 10.0 GiB = min(0.75 x 80.0 GiB - 512.0 MiB headroom, 10.0 GiB available);"));

  r.memory.at(0).budget = dk::cap_to_available(share, 70ull << 30);  // measured, with room to spare
  j = dk::to_json(r).at("devices").at(0).at("memory");
  CHECK(j.at("available_bytes") == (70ull << 30));
  CHECK(j.at("capped_to_available") == false);
  CHECK_THAT(text_of(r), Catch::Contains("budget 59.5 GiB = 0.75 x 80.0 GiB - 512.0 MiB headroom;"));
}

// A reserve for collectives comes off the budget after the cap: the report's equation says so,
// and its JSON gives the reserve.
TEST_CASE("the report's budget shows the reserve kept for collectives", "[report][memory]") {
  dk::device_report r = two_h100s().report();
  auto j = dk::to_json(r).at("devices").at(0).at("memory");
  CHECK(j.at("collective_reserve_bytes") == 0);
  CHECK_THAT(text_of(r), !Catch::Contains("kept for collectives"));

  r.memory.at(0).budget = dk::reserve_for_collectives(r.memory.at(0).budget, 1ull << 30, "cuda:0");
  j = dk::to_json(r).at("devices").at(0).at("memory");
  CHECK(j.at("collective_reserve_bytes") == (1ull << 30));
  CHECK(j.at("budget_bytes") == (58ull << 30) + (512ull << 20));
  CHECK_THAT(text_of(r), Catch::Contains("budget 58.5 GiB = 0.75 x 80.0 GiB - 512.0 MiB headroom - 1.0 GiB kept for "
                                         "collectives;"));
}
