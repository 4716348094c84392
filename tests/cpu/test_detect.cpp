// detect/: detectors and their concept, fallback reasons, the hardware tables.
#include <catch2/catch.hpp>

#include <devicekit/detect/batch_size.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/memory/strategy.hpp>

#include "test_support.hpp"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {
struct no_detect {};
struct wrong_return {
  int detect() const { return 0; }
};
struct argless {
  dk::capabilities detect() const { return {}; }
};
struct never_finds {
  static constexpr std::string_view name() { return "never"; }
  dk::capabilities detect(const dk::settings&) const {
    dk::capabilities c;
    c.fallback_reason = "nothing here";
    return c;
  }
};
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

static_assert(dk::device_detector<dk::cuda_detector>);
static_assert(dk::device_detector<dk::cpu_detector>);
static_assert(dk::device_detector<dk::fixed_detector>);
static_assert(dk::device_detector<dk::first_available<dk::cuda_detector, dk::cpu_detector>>);
static_assert(dk::device_detector<argless>);
static_assert(!dk::device_detector<no_detect>);
static_assert(!dk::device_detector<wrong_return>);
static_assert(std::is_empty_v<dk::first_available<dk::cuda_detector, dk::cpu_detector>>);

// The formatters write hex digits by hand; printf's conversions are the reference.
TEST_CASE("UUIDs and PCI bus ids are formatted as nvidia-smi prints them", "[detect][format]") {
  const unsigned char fixed[16] = {0x5d, 0x6e, 0x7f, 0x80, 0x91, 0xa2, 0xb3, 0xc4,
                                   0xd5, 0xe6, 0xf7, 0x08, 0x19, 0x2a, 0x3b, 0x00};
  CHECK(dk::format_gpu_uuid(fixed) == "GPU-5d6e7f80-91a2-b3c4-d5e6-f708192a3b00");
  CHECK(dk::format_pci_bus_id(0, 0x19, 0) == "00000000:19:00.0");
  CHECK(dk::format_pci_bus_id(1, 0x1ab, 0x1f) == "00000001:1AB:1F.0");  // widths are minimums, as %02X's
  std::mt19937 rng(7);
  for (int round = 0; round < 1000; ++round) {
    unsigned char b[16];
    for (auto& byte : b) byte = static_cast<unsigned char>(rng());
    char want[64];
    std::snprintf(want, sizeof want, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    REQUIRE(dk::format_gpu_uuid(b) == want);
    const int domain = static_cast<int>(rng());
    const int bus = static_cast<int>(rng() % 512);
    const int dev = static_cast<int>(rng() % 64);
    std::snprintf(want, sizeof want, "%08X:%02X:%02X.0", static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                  static_cast<unsigned>(dev));
    REQUIRE(dk::format_pci_bus_id(domain, bus, dev) == want);
  }
}

TEST_CASE("cpu_detector reports the host as cpu:0", "[detect][cpu]") {
  const auto caps = dk::cpu_detector{}.detect(dk::settings{});
  CHECK(caps.device_type == dk::device_kind::cpu);
  CHECK(caps.device_count == 1);
  CHECK(caps.gpu_count == 0);
  REQUIRE(caps.devices.size() == 1);
  CHECK(caps.devices[0].id == dk::device::cpu());
  CHECK(caps.devices[0].hardware == dk::hardware_type::cpu);
  CHECK(caps.host.logical_cores >= 1);
  CHECK(caps.host.total_memory_bytes > (64ull << 20));
  CHECK(caps.total_memory_bytes == caps.host.total_memory_bytes);
  CHECK_FALSE(caps.host.model_name.empty());
}

TEST_CASE("cuda_detector: no GPU is zero devices and a reason, never an exception", "[detect][cuda]") {
  const auto caps = dk::cuda_detector{}.detect(dk::settings{});
  if (caps.gpu_count == 0) {
    CHECK(caps.device_count == 0);
    CHECK_FALSE(caps.fallback_reason.empty());
    if (caps.driver_version == 0 && DEVICEKIT_HAS_CUDA) {
      // This machine has the toolkit but no driver: the reason must say so.
      CHECK(contains(caps.fallback_reason, "driver"));
    }
  } else {
    CHECK(caps.fallback_reason.empty());
    CHECK(caps.devices.size() == static_cast<std::size_t>(caps.gpu_count));
    CHECK(caps.cc.has_value());
  }
}

TEST_CASE("CUDA_VISIBLE_DEVICES set to empty means CPU fallback with that reason", "[detect][cuda]") {
  const auto caps = [] {
    devicekit::testing::scoped_env hide("CUDA_VISIBLE_DEVICES", "");
    return dk::first_available<dk::cuda_detector, dk::cpu_detector>{}.detect(dk::settings{});
  }();
  CHECK(caps.device_type == dk::device_kind::cpu);
  // Built without CUDA, that reason comes first: the environment is not even looked at.
  CHECK(contains(caps.fallback_reason, DEVICEKIT_HAS_CUDA ? "CUDA_VISIBLE_DEVICES is set to an empty string"
                                                          : "devicekit was built without CUDA"));
}

TEST_CASE("a cpu preference skips CUDA and says so", "[detect][cuda]") {
  const auto caps = dk::first_available<dk::cuda_detector, dk::cpu_detector>{}.detect(
      dk::settings{}.set_prefer(dk::device_preference::cpu));
  CHECK(caps.device_type == dk::device_kind::cpu);
  CHECK(contains(caps.fallback_reason,
                 DEVICEKIT_HAS_CUDA ? "the CPU was requested" : "devicekit was built without CUDA"));
}

TEST_CASE("first_available keeps the first detector that finds a device", "[detect][priority]") {
  dk::capabilities two_gpus;
  two_gpus.device_type = dk::device_kind::cuda;
  two_gpus.device_count = 2;
  two_gpus.gpu_count = 2;
  const auto found = dk::first_available<dk::fixed_detector, dk::cpu_detector>{
      dk::fixed_detector{two_gpus},
      dk::cpu_detector{}}.detect(dk::settings{});
  CHECK(found.device_type == dk::device_kind::cuda);
  CHECK(found.device_count == 2);
  CHECK(found.fallback_reason.empty());
  CHECK(found.detector == "fixed");

  const auto fallback = dk::first_available<never_finds, never_finds, dk::cpu_detector>{}.detect(dk::settings{});
  CHECK(fallback.device_type == dk::device_kind::cpu);
  CHECK(fallback.fallback_reason == "never: nothing here; never: nothing here");

  const auto none = dk::first_available<never_finds>{}.detect(dk::settings{});
  CHECK_FALSE(none.usable());
}

TEST_CASE("run_detector accepts detect() without settings and names custom detectors", "[detect]") {
  const auto caps = dk::run_detector(argless{}, dk::settings{});
  CHECK(caps.detector == "custom");
}

TEST_CASE("compute capability decides mixed precision support", "[detect][precision]") {
  CHECK(dk::precision_for({7, 0}) == dk::precision_support{true, false, false});
  CHECK(dk::precision_for({8, 0}) == dk::precision_support{true, true, false});
  CHECK(dk::precision_for({8, 9}) == dk::precision_support{true, true, true});
  CHECK(dk::precision_for({9, 0}) == dk::precision_support{true, true, true});
  CHECK(dk::precision_for({5, 2}) == dk::precision_support{false, false, false});
  CHECK(dk::compute_capability{9, 0}.str() == "9.0");
  CHECK(dk::format_cuda_version(13000) == "13.0");
  CHECK(dk::format_cuda_version(12040) == "12.4");
  CHECK(dk::format_cuda_version(0) == "none");
}

TEST_CASE("hardware is classified from the driver's device name", "[detect][hardware]") {
  CHECK(dk::classify_hardware("NVIDIA H200") == dk::hardware_type::h200);
  CHECK(dk::classify_hardware("NVIDIA H100 80GB HBM3") == dk::hardware_type::h100);
  CHECK(dk::classify_hardware("NVIDIA A100-SXM4-80GB") == dk::hardware_type::a100);
  CHECK(dk::classify_hardware("Tesla V100-SXM2-16GB") == dk::hardware_type::v100);
  CHECK(dk::classify_hardware("NVIDIA L40S") == dk::hardware_type::l40s);
  CHECK(dk::classify_hardware("NVIDIA GeForce RTX 4090") == dk::hardware_type::rtx);
  CHECK(dk::classify_hardware("NVIDIA RTX A6000") == dk::hardware_type::rtx);
  CHECK(dk::classify_hardware("Tesla T4") == dk::hardware_type::unknown);
  CHECK(dk::classify_hardware("AMD EPYC", dk::device_kind::cpu) == dk::hardware_type::cpu);
  CHECK(dk::to_string(dk::hardware_type::tpu_v5e) == "tpu_v5e");
}

TEST_CASE("batch-size recommendations are the table's exact values", "[detect][hardware]") {
  struct row {
    dk::hardware_type hw;
    int min, optimal, critical;
  };
  const row table[] = {{dk::hardware_type::tpu_v5e, 64, 256, 240}, {dk::hardware_type::tpu_v5p, 128, 512, 480},
                       {dk::hardware_type::tpu_v4, 64, 256, 192},  {dk::hardware_type::h100, 64, 320, 298},
                       {dk::hardware_type::a100, 32, 256, 240},    {dk::hardware_type::v100, 16, 128, 96},
                       {dk::hardware_type::cpu, 1, 32, 16}};
  for (const auto& r : table) {
    INFO(dk::to_string(r.hw));
    const auto rec = dk::batch_size_recommendation_for(r.hw);
    CHECK(rec.min_batch_size == r.min);
    CHECK(rec.optimal_batch_size == r.optimal);
    CHECK(rec.critical_batch_size == r.critical);
    CHECK(rec.from_table);
  }
  CHECK_FALSE(dk::batch_size_recommendation_for(dk::hardware_type::unknown).from_table);
  CHECK(dk::batch_size_recommendation_for(dk::hardware_type::h200).critical_batch_size == 298);
}

TEST_CASE("validate_batch_size rejects, warns and accepts", "[detect][hardware]") {
  CHECK_FALSE(dk::validate_batch_size(0, dk::hardware_type::h100).valid);
  CHECK_FALSE(dk::validate_batch_size(-4, dk::hardware_type::h100).valid);
  const auto small = dk::validate_batch_size(32, dk::hardware_type::h100);
  CHECK_FALSE(small.valid);
  CHECK(contains(small.message, "below the minimum 64"));
  const auto sub = dk::validate_batch_size(128, dk::hardware_type::h100);
  CHECK(sub.valid);
  CHECK(contains(sub.message, "below the critical batch size 298"));
  const auto quiet = dk::validate_batch_size(128, dk::hardware_type::h100, false);
  CHECK(quiet.valid);
  CHECK_FALSE(contains(quiet.message, "critical"));
  CHECK(dk::validate_batch_size(320, dk::hardware_type::h100).valid);
  CHECK(dk::validate_batch_size(1, dk::hardware_type::cpu).valid);
}

TEST_CASE("batch multipliers: GPU 4x, CPU 1x, TPU 128x, rounded to a power of two", "[detect][hardware]") {
  CHECK(dk::round_to_power_of_two(1) == 1);
  CHECK(dk::round_to_power_of_two(3) == 4);
  CHECK(dk::round_to_power_of_two(5) == 4);
  CHECK(dk::round_to_power_of_two(6) == 8);
  CHECK(dk::round_to_power_of_two(12) == 16);
  CHECK(dk::round_to_power_of_two(0) == 1);
  CHECK(dk::batch_config_for(dk::hardware_type::h100, 3).batch_size == 16);  // 12 -> 16
  CHECK(dk::batch_config_for(dk::hardware_type::cpu, 3).batch_size == 4);    // 3 -> 4
  CHECK(dk::batch_config_for(dk::hardware_type::tpu_v4, 1).batch_size == 128);
  CHECK(dk::batch_config_for(dk::hardware_type::tpu_v4, 2).batch_size == 256);
  CHECK(dk::batch_config_for(dk::hardware_type::a100, 1).multiplier == 4);
  CHECK(dk::batch_config_for(dk::hardware_type::a100, 1).max_batch_size == 256);
}

TEST_CASE("the TPU batch factor and the TPU switch configure the hardware table", "[detect][hardware]") {
  dk::hardware_table_config c;
  CHECK(c.tpu_batch_factor == 128);
  CHECK(c.allow_tpu);
  c.tpu_batch_factor = 64;
  CHECK(dk::batch_multiplier(dk::hardware_type::tpu_v5e, c) == 64);
  CHECK(dk::batch_multiplier(dk::hardware_type::h100, c) == 4);
  CHECK(dk::batch_config_for(dk::hardware_type::tpu_v4, 2, c).batch_size == 128);
  c.allow_tpu = false;
  CHECK_THROWS_WITH(dk::batch_config_for(dk::hardware_type::tpu_v4, 1, c),
                    Catch::Contains("TPU rows are switched off") && Catch::Contains("tpu_v4"));
  CHECK_THROWS_AS(dk::batch_size_recommendation_for(dk::hardware_type::tpu_v5p, c), dk::config_error);
  CHECK(dk::batch_size_recommendation_for(dk::hardware_type::a100, c).optimal_batch_size == 256);
  {
    devicekit::testing::scoped_env factor("DEVICEKIT_TPU_BATCH_FACTOR", "256");
    devicekit::testing::scoped_env allow("DEVICEKIT_ALLOW_TPU", "false");
    const auto env = dk::hardware_table_config::from_environment();
    CHECK(env.tpu_batch_factor == 256);
    CHECK_FALSE(env.allow_tpu);
  }
  {
    devicekit::testing::scoped_env factor("DEVICEKIT_TPU_BATCH_FACTOR", "0");
    CHECK_THROWS_WITH(dk::hardware_table_config::from_environment(),
                      Catch::StartsWith("DEVICEKIT_TPU_BATCH_FACTOR: '0' is not a positive integer"));
  }
  {
    devicekit::testing::scoped_env allow("DEVICEKIT_ALLOW_TPU", "maybe");
    CHECK_THROWS_AS(dk::hardware_table_config::from_environment(), dk::config_error);
  }
}

TEST_CASE("cost per device-hour has defaults and overrides", "[detect][hardware]") {
  dk::cost_table costs;
  CHECK(costs.per_hour(dk::hardware_type::cpu) == 0.0);
  CHECK(costs.per_hour(dk::hardware_type::h100) == 0.5);
  CHECK(costs.per_hour(dk::hardware_type::tpu_v5e) == 2.0);
  costs.set(dk::hardware_type::h100, 2.49);
  CHECK(costs.per_hour(dk::hardware_type::h100) == 2.49);
  CHECK(costs.per_hour(dk::hardware_type::a100) == 0.5);
}

TEST_CASE("memory strategies: stock fractions, model-size guideline, runtime validation", "[memory][strategy]") {
  static_assert(dk::memory_strategy<dk::conservative>);
  static_assert(dk::memory_strategy<dk::runtime_fraction>);
  static_assert(dk::custom_fraction<4, 5>::fraction() == 0.8);
  static_assert(std::is_empty_v<dk::balanced>);
  CHECK(dk::conservative::fraction() == 0.60);
  CHECK(dk::balanced::fraction() == 0.75);
  CHECK(dk::aggressive::fraction() == 0.90);
  CHECK(dk::strategy_for_model_size(999'999).name == "conservative");
  CHECK(dk::strategy_for_model_size(1'000'000).name == "balanced");
  CHECK(dk::strategy_for_model_size(99'999'999).name == "balanced");
  CHECK(dk::strategy_for_model_size(100'000'000).name == "aggressive");
  CHECK(dk::runtime_fraction(1.0).fraction() == 1.0);
  CHECK_THROWS_WITH(dk::runtime_fraction(0.0), Catch::Contains("must lie in (0, 1]"));
  CHECK_THROWS_AS(dk::runtime_fraction(1.5), dk::config_error);
  CHECK_THROWS_AS(dk::runtime_fraction(-0.1), dk::config_error);
  CHECK_THROWS_AS(dk::runtime_fraction(std::nan("")), dk::config_error);
}

// --- run-time platform priority (settings::set_platforms, DEVICEKIT_PLATFORMS) ------------------

TEST_CASE("platform lists parse, and bad ones name the valid platforms", "[detect][platforms]") {
  using K = dk::device_kind;
  CHECK(dk::parse_platform_list("cuda,cpu") == std::vector<K>{K::cuda, K::cpu});
  CHECK(dk::parse_platform_list(" cpu , gpu ") == std::vector<K>{K::cpu, K::cuda});
  CHECK(dk::parse_platform_list("cpu") == std::vector<K>{K::cpu});
  CHECK(dk::format_platform_list({K::cuda, K::cpu}) == "cuda,cpu");
  CHECK_THROWS_WITH(dk::parse_platform_list("tpu,cpu", "DEVICEKIT_PLATFORMS"),
                    Catch::Contains("DEVICEKIT_PLATFORMS='tpu,cpu'") && Catch::Contains("'tpu' is not a platform") &&
                        Catch::Contains("cuda (or gpu), cpu"));
  CHECK_THROWS_WITH(dk::parse_platform_list(""), Catch::Contains("empty"));
  CHECK_THROWS_WITH(dk::parse_platform_list("cuda,,cpu"), Catch::Contains("empty entry"));
  CHECK_THROWS_WITH(dk::parse_platform_list("cpu,cpu"), Catch::Contains("listed twice"));
  CHECK_THROWS_AS(dk::settings{}.set_platforms({}), dk::config_error);
  CHECK_THROWS_AS(dk::settings{}.set_platforms({K::cuda, K::cuda}), dk::config_error);

  {
    devicekit::testing::scoped_env env("DEVICEKIT_PLATFORMS", "cpu,cuda");
    const auto s = dk::settings::from_environment();
    CHECK(s.has_platforms());
    CHECK(s.get_platforms() == std::vector<K>{K::cpu, K::cuda});
    CHECK(s.platforms_source() == "DEVICEKIT_PLATFORMS");
  }
  {
    devicekit::testing::scoped_env env("DEVICEKIT_PLATFORMS", "cuda,fpga");
    CHECK_THROWS_WITH(dk::settings::from_environment(), Catch::Contains("'fpga' is not a platform"));
  }
  const dk::settings none;
  CHECK_FALSE(none.has_platforms());
  CHECK(none.allows_platform(K::cuda));
  CHECK(none.allows_platform(K::cpu));
}

TEST_CASE("a run-time platform list reorders and filters the compile-time chain", "[detect][platforms]") {
  const auto two_gpus = devicekit::testing::simulated_gpus(2);
  using chain = dk::first_available<dk::fixed_detector, dk::cpu_detector>;
  const chain detector{dk::fixed_detector{two_gpus}, dk::cpu_detector{}};

  // Without a list the compile-time order decides: the GPUs.
  CHECK(detector.detect(dk::settings{}).device_type == dk::device_kind::cuda);

  // cpu first: the CPU wins although the chain lists the GPU detector first, and the reason says
  // that the list chose it.
  const auto cpu_first = detector.detect(dk::settings{}.set_platforms({dk::device_kind::cpu, dk::device_kind::cuda}));
  CHECK(cpu_first.device_type == dk::device_kind::cpu);
  CHECK(contains(cpu_first.fallback_reason, "found 2 cuda device(s)"));
  CHECK(contains(cpu_first.fallback_reason, "puts cpu first"));

  // cuda only: the GPUs, no fallback reason.
  const auto cuda_only = detector.detect(dk::settings{}.set_platforms({dk::device_kind::cuda}));
  CHECK(cuda_only.device_type == dk::device_kind::cuda);
  CHECK(cuda_only.device_count == 2);
  CHECK(cuda_only.fallback_reason.empty());

  // A list that excludes every platform found: not usable, and the reason names the list.
  const auto excluded = dk::first_available<never_finds, dk::cpu_detector>{}.detect(
      dk::settings{}.set_platforms({dk::device_kind::cuda}));
  CHECK_FALSE(excluded.usable());
  CHECK(contains(excluded.fallback_reason, "never: nothing here"));
  CHECK(contains(excluded.fallback_reason, "cpu: found 1 cpu device(s), but the platform list cuda"));

  // A single detector is filtered too.
  const auto single = dk::run_detector(dk::cpu_detector{}, dk::settings{}.set_platforms({dk::device_kind::cuda}));
  CHECK_FALSE(single.usable());
  CHECK(single.devices.empty());

  // The environment's list is named as such.
  devicekit::testing::scoped_env env("DEVICEKIT_PLATFORMS", "cuda");
  const auto from_env = dk::run_detector(dk::cpu_detector{}, dk::settings::from_environment());
  CHECK(contains(from_env.fallback_reason, "DEVICEKIT_PLATFORMS=cuda excludes platform 'cpu'"));
}

TEST_CASE("detector chains describe themselves for the report", "[detect][platforms]") {
  CHECK(dk::describe_detector<dk::first_available<dk::cuda_detector, dk::cpu_detector>>() ==
        "first_available<cuda, cpu>");
  CHECK(dk::describe_detector<dk::cuda_detector>() == "cuda");
  CHECK(dk::describe_detector<argless>() == "custom");
  CHECK(dk::describe_detector<dk::first_available<never_finds, dk::fixed_detector>>() ==
        "first_available<never, fixed>");
}

// --- batch sizes from the detected hardware and the memory budget ------------------------------

TEST_CASE("max_memory_batch_size: (budget - fixed) / per-sample bytes, checked", "[detect][batch]") {
  CHECK(dk::max_memory_batch_size(1000, 10) == 100);
  CHECK(dk::max_memory_batch_size(1009, 10) == 100);  // rounds down: a partial sample does not fit
  CHECK(dk::max_memory_batch_size(1000, 10, 500) == 50);
  CHECK(dk::max_memory_batch_size(1000, 10, 1000) == 0);
  CHECK(dk::max_memory_batch_size(1000, 10, 5000) == 0);
  CHECK(dk::max_memory_batch_size(9, 10) == 0);
  CHECK(dk::max_memory_batch_size(std::numeric_limits<std::uint64_t>::max(), 1) ==
        std::numeric_limits<std::int64_t>::max());
  CHECK_THROWS_WITH(dk::max_memory_batch_size(1000, 0), Catch::Contains("per_sample_bytes is 0"));
  CHECK_THROWS_AS(dk::max_memory_batch_size(1000, 0), dk::config_error);
}

TEST_CASE("recommend_batch_size uses the detected hardware when given none", "[detect][batch]") {
  // Mixed GPUs: the one with the least memory decides.
  auto caps = devicekit::testing::simulated_gpus(2);
  caps.devices[1].name = "Tesla V100-SXM2-16GB";
  caps.devices[1].hardware = dk::classify_hardware(caps.devices[1].name);
  caps.devices[1].total_memory_bytes = 16ull << 30;
  CHECK(dk::batch_hardware(caps) == dk::hardware_type::v100);
  CHECK(dk::recommend_batch_size(caps).optimal_batch_size ==
        dk::batch_size_recommendation_for(dk::hardware_type::v100).optimal_batch_size);
  CHECK(dk::batch_hardware(devicekit::testing::simulated_gpus(1)) == dk::hardware_type::h100);

  const auto cpu = dk::cpu_detector{}.detect(dk::settings{});
  CHECK(dk::batch_hardware(cpu) == dk::hardware_type::cpu);

  // The memory estimate lands in the recommendation and validate_batch_size then enforces it.
  const auto rec =
      dk::recommend_batch_size(devicekit::testing::simulated_gpus(1), 64ull << 30, 256ull << 20, 4ull << 30);
  REQUIRE(rec.max_memory_batch_size.has_value());
  CHECK(*rec.max_memory_batch_size == 240);  // (64 GiB - 4 GiB) / 256 MiB
  CHECK(rec.hardware == dk::hardware_type::h100);
  CHECK(dk::validate_batch_size(240, rec).valid);
  const auto too_big = dk::validate_batch_size(256, rec);
  CHECK_FALSE(too_big.valid);
  CHECK(contains(too_big.message, "exceeds the memory estimate 240 for h100"));
  CHECK(dk::validate_batch_size(256, dk::hardware_type::h100).valid);  // the table row has no estimate
  CHECK(dk::recommend_batch_size(cpu, std::numeric_limits<std::uint64_t>::max(), 1).max_memory_batch_size ==
        std::numeric_limits<int>::max());

  // With nothing given, the process's own hardware: on this machine whatever the default chain
  // finds, and DEVICEKIT_PLATFORMS=cpu makes that the CPU row.
  {
    devicekit::testing::scoped_env env("DEVICEKIT_PLATFORMS", "cpu");
    CHECK(dk::recommend_batch_size().optimal_batch_size ==
          dk::batch_size_recommendation_for(dk::hardware_type::cpu).optimal_batch_size);
  }
  const auto detected = dk::first_available<dk::cuda_detector, dk::cpu_detector>{}.detect(dk::settings{});
  CHECK(dk::recommend_batch_size().critical_batch_size ==
        dk::batch_size_recommendation_for(dk::batch_hardware(detected)).critical_batch_size);
  {
    // GPUs hidden and the CPU excluded: nothing to recommend for, said as such.
    devicekit::testing::scoped_env hide("CUDA_VISIBLE_DEVICES", "");
    devicekit::testing::scoped_env only("DEVICEKIT_PLATFORMS", "cuda");
    CHECK_THROWS_WITH(dk::recommend_batch_size(),
                      Catch::Contains("no device was detected") && Catch::Contains("DEVICEKIT_PLATFORMS=cuda"));
  }
}
