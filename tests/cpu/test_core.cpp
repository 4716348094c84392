// core/: device parsing and printing, errors, settings from the environment, the CPU stream.
#include <catch2/catch.hpp>

#include <devicekit/core/capture.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/device_list.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/float_types.hpp>
#include <devicekit/core/graph.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/core/topology.hpp>
#include <devicekit/detect/detectors.hpp>

#include "test_support.hpp"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_set>

namespace dk = devicekit;

using devicekit::testing::scoped_env;

TEST_CASE("device parses and prints kind:ordinal", "[core][device]") {
  CHECK(dk::device::parse("cuda:1") == dk::device::cuda(1));
  CHECK(dk::device::parse("cpu:0") == dk::device::cpu());
  CHECK(dk::device::parse("cpu") == dk::device::cpu(0));
  CHECK(dk::device::parse("cuda") == dk::device::cuda(0));
  CHECK(dk::device::parse("gpu:3") == dk::device::cuda(3));
  CHECK(dk::device::cuda(12).str() == "cuda:12");
  std::ostringstream os;
  os << dk::device::cpu();
  CHECK(os.str() == "cpu:0");
  CHECK(dk::device::cpu() < dk::device::cuda(0));
  std::unordered_set<dk::device> set{dk::device::cpu(), dk::device::cuda(0), dk::device::cuda(0)};
  CHECK(set.size() == 2);
}

TEST_CASE("device rejects malformed text with the accepted forms", "[core][device]") {
  for (const char* bad : {"tpu:0", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "", ":0"}) {
    INFO(bad);
    try {
      (void)dk::device::parse(bad);
      FAIL("no exception");
    } catch (const dk::config_error& e) {
      const std::string msg = e.what();
      CHECK(msg.find("cannot parse device") != std::string::npos);
      CHECK(msg.find("'cuda:N'") != std::string::npos);
    }
  }
}

TEST_CASE("cuda_error names the call, the error and the call site", "[core][error]") {
  const dk::cuda_error e(2, "cudaMalloc(&p, n)", "cudaErrorMemoryAllocation", "out of memory");
  const std::string msg = e.what();
  CHECK(msg.find("cudaMalloc(&p, n) failed") != std::string::npos);
  CHECK(msg.find("cudaErrorMemoryAllocation (2)") != std::string::npos);
  CHECK(msg.find("test_core.cpp") != std::string::npos);
  CHECK(e.code() == 2);
  CHECK(e.where().line() > 0);
  CHECK_THROWS_AS(throw e, dk::error);
}

#if DEVICEKIT_HAS_CUDA
TEST_CASE("check_cuda throws for a failing runtime call", "[core][error]") {
  CHECK_NOTHROW(dk::check_cuda(cudaSuccess, "nothing"));
  try {
    DEVICEKIT_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL("no exception");
  } catch (const dk::cuda_error& e) {
    CHECK(e.error_name() == "cudaErrorInvalidValue");
    CHECK(e.call() == "cudaErrorInvalidValue");
    CHECK(std::string(e.what()).find("test_core.cpp") != std::string::npos);
  }
  // Without a driver every runtime call reports the initialisation failure, so the cleared
  // last-error slot can only be observed where a GPU is present.
  const auto caps = dk::cuda_detector{}.detect(dk::settings{});
  if (caps.gpu_count > 0) CHECK(cudaPeekAtLastError() == cudaSuccess);
}
#endif

TEST_CASE("device preference parses auto, cuda, cpu and rejects the rest with the list", "[core][settings]") {
  CHECK(dk::parse_device_preference("auto") == dk::device_preference::automatic);
  CHECK(dk::parse_device_preference("cuda") == dk::device_preference::cuda);
  CHECK(dk::parse_device_preference("gpu") == dk::device_preference::cuda);
  CHECK(dk::parse_device_preference("cpu") == dk::device_preference::cpu);
  try {
    (void)dk::parse_device_preference("tpu", "DEVICEKIT_PREFER");
    FAIL("no exception");
  } catch (const dk::config_error& e) {
    CHECK(std::string(e.what()) ==
          "DEVICEKIT_PREFER='tpu' is not a valid device preference; allowed values: auto, cuda, cpu");
  }
}

TEST_CASE("settings::from_environment reads DEVICEKIT_PREFER and DEVICEKIT_DEVICE", "[core][settings]") {
  {
    scoped_env prefer("DEVICEKIT_PREFER", nullptr);
    scoped_env dev("DEVICEKIT_DEVICE", nullptr);
    const auto s = dk::settings::from_environment();
    CHECK_FALSE(s.has_prefer());
    CHECK(s.get_prefer() == dk::device_preference::automatic);
    CHECK_FALSE(s.has_device());
  }
  {
    scoped_env prefer("DEVICEKIT_PREFER", "cpu");
    scoped_env dev("DEVICEKIT_DEVICE", "cuda:1");
    const auto s = dk::settings::from_environment();
    CHECK(s.get_prefer() == dk::device_preference::cpu);
    CHECK(s.get_device() == dk::device::cuda(1));
  }
  {
    scoped_env prefer("DEVICEKIT_PREFER", "tpu");
    CHECK_THROWS_WITH(dk::settings::from_environment(), Catch::Contains("allowed values: auto, cuda, cpu"));
  }
  {
    scoped_env dev("DEVICEKIT_DEVICE", "npu:0");
    CHECK_THROWS_WITH(dk::settings::from_environment(), Catch::StartsWith("DEVICEKIT_DEVICE: cannot parse"));
  }
}

TEST_CASE("settings start from the environment: code wins, unset fields are filled, the opt-out reads none",
          "[core][settings]") {
  scoped_env prefer("DEVICEKIT_PREFER", "cpu");
  scoped_env dev("DEVICEKIT_DEVICE", "cuda:1");
  scoped_env platforms("DEVICEKIT_PLATFORMS", "cuda,cpu");
  scoped_env allocator("DEVICEKIT_ALLOCATOR", "async");
  scoped_env reserve("DEVICEKIT_COLLECTIVE_MEMORY_SIZE", "1MiB");
  scoped_env nvml("DEVICEKIT_NVML_LIBRARY", "/env/libnvidia-ml.so.1");

  // settings{} holds only what code set; the environment is read when the settings are used.
  const dk::settings built;
  CHECK(built.reads_environment());
  CHECK_FALSE(built.has_device());
  const dk::settings effective = built.with_environment();
  CHECK_FALSE(effective.reads_environment());
  CHECK(effective.get_prefer() == dk::device_preference::cpu);
  CHECK(effective.get_device() == dk::device::cuda(1));
  CHECK(effective.get_platforms() == std::vector<dk::device_kind>{dk::device_kind::cuda, dk::device_kind::cpu});
  CHECK(effective.platforms_source() == "DEVICEKIT_PLATFORMS");
  CHECK(effective.get_allocator() == dk::allocator_kind::async);
  CHECK(effective.get_collective_memory_size() == (1ull << 20));
  CHECK(effective.get_nvml_library() == "/env/libnvidia-ml.so.1");
  CHECK(dk::settings::from_environment().get_device() == dk::device::cuda(1));
  CHECK_FALSE(dk::settings::from_environment().reads_environment());

  // What code set wins, field by field; the rest still comes from the environment.
  const auto mixed = dk::settings{}
                         .set_device(dk::device::cpu())
                         .set_platforms({dk::device_kind::cpu})
                         .set_collective_memory_size(0)
                         .with_environment();
  CHECK(mixed.get_device() == dk::device::cpu());
  CHECK(mixed.get_platforms() == std::vector<dk::device_kind>{dk::device_kind::cpu});
  CHECK(mixed.platforms_source() == "settings");
  CHECK(mixed.has_collective_memory_size());
  CHECK(mixed.get_collective_memory_size() == 0u);
  CHECK(mixed.get_prefer() == dk::device_preference::cpu);  // from DEVICEKIT_PREFER
  CHECK(mixed.get_allocator() == dk::allocator_kind::async);

  // The opt-out reads nothing, before or after with_environment.
  const auto none = dk::settings::without_environment().with_environment();
  CHECK_FALSE(none.reads_environment());
  CHECK_FALSE(none.has_prefer());
  CHECK_FALSE(none.has_device());
  CHECK_FALSE(none.has_platforms());
  CHECK_FALSE(none.has_allocator());
  CHECK_FALSE(none.has_collective_memory_size());
  CHECK_FALSE(none.has_nvml_library());
  // Reading twice changes nothing: the effective settings no longer read the environment.
  scoped_env later("DEVICEKIT_DEVICE", "cuda:0");
  CHECK(effective.with_environment().get_device() == dk::device::cuda(1));
}

TEST_CASE("a bad environment value is a config_error naming it, unless code set that field", "[core][settings]") {
  {
    scoped_env dev("DEVICEKIT_DEVICE", "npu:0");
    CHECK_THROWS_WITH(dk::settings{}.with_environment(), Catch::StartsWith("DEVICEKIT_DEVICE: cannot parse"));
    // The program chose the device: the variable is not read, so its value cannot be wrong.
    CHECK(dk::settings{}.set_device(dk::device::cpu()).with_environment().get_device() == dk::device::cpu());
    CHECK_NOTHROW(dk::settings::without_environment().with_environment());
  }
  {
    scoped_env prefer("DEVICEKIT_PREFER", "tpu");
    // A bad value of a variable that is read still fails, whatever else code set.
    CHECK_THROWS_WITH(dk::settings{}.set_device(dk::device::cpu()).with_environment(),
                      Catch::Contains("DEVICEKIT_PREFER='tpu'"));
    CHECK_NOTHROW(dk::settings{}.set_prefer(dk::device_preference::automatic).with_environment());
  }
  {
    scoped_env platforms("DEVICEKIT_PLATFORMS", "cuda,fpga");
    CHECK_THROWS_WITH(dk::settings{}.with_environment(), Catch::Contains("'fpga' is not a platform"));
    CHECK_NOTHROW(dk::settings{}.set_platforms({dk::device_kind::cpu}).with_environment());
  }
  {
    scoped_env allocator("DEVICEKIT_ALLOCATOR", "bogus");
    scoped_env reserve("DEVICEKIT_COLLECTIVE_MEMORY_SIZE", "lots");
    CHECK_THROWS_WITH(dk::settings{}.set_allocator(dk::allocator_kind::pool).with_environment(),
                      Catch::Contains("DEVICEKIT_COLLECTIVE_MEMORY_SIZE='lots'"));
    CHECK_NOTHROW(dk::settings{}
                      .set_allocator(dk::allocator_kind::pool)
                      .set_collective_memory_size(1ull << 20)
                      .with_environment());
  }
}

TEST_CASE("settings apply environment variables before detection", "[core][settings]") {
  scoped_env order("DEVICEKIT_TEST_VARIABLE", nullptr);
  dk::settings s;
  s.set_environment_variable("DEVICEKIT_TEST_VARIABLE", "PCI_BUS_ID");
  const auto applied = s.apply_environment();
  REQUIRE(applied.size() == 1);
  CHECK(applied.front() == "DEVICEKIT_TEST_VARIABLE");
  CHECK(std::string(std::getenv("DEVICEKIT_TEST_VARIABLE")) == "PCI_BUS_ID");
}

TEST_CASE("a cpu stream is inline: always idle, synchronize is a no-op", "[core][stream]") {
  dk::stream s(dk::device::cpu());
  CHECK(s.native_handle() == nullptr);
  CHECK(s.idle());
  CHECK_NOTHROW(s.synchronize());
  dk::stream moved = std::move(s);
  CHECK(moved.get_device() == dk::device::cpu());
}

#if DEVICEKIT_HAS_CUDA
TEST_CASE("a cuda stream without a GPU is the config_error of a missing device, not a crash", "[core][stream]") {
  const auto caps = dk::cuda_detector{}.detect(dk::settings{});
  if (caps.gpu_count > 0) {
    dk::stream s(dk::device::cuda(0));
    CHECK(s.native_handle() != nullptr);
    s.synchronize();
    CHECK(s.idle());
  } else {
    CHECK_THROWS_AS(dk::stream(dk::device::cuda(0)), dk::config_error);
    CHECK_THROWS_WITH(dk::stream(dk::device::cuda(0)),
                      Catch::StartsWith("stream: cuda:0 does not exist: this process sees 0 CUDA devices"));
  }
}
#endif

TEST_CASE("capture on a cpu stream keeps the step, and each launch calls it", "[core][graph]") {
  const dk::stream s(dk::device::cpu());
  CHECK_FALSE(dk::capture_of(dk::stream_ref(s)).active);  // nothing captures on the host
  int runs = 0;
  dk::graph g = dk::capture(s, [&] { ++runs; });
  CHECK(runs == 0);  // recorded, not run, as on a GPU
  CHECK(g.runs_on_host());
  CHECK(static_cast<bool>(g));
  CHECK(g.memory_bytes() == 0);
  for (int i = 0; i < 3; ++i) g.launch(s);
  CHECK(runs == 3);
  CHECK(g.launches() == 3);
  dk::graph moved = std::move(g);
  CHECK_FALSE(static_cast<bool>(g));
  moved.launch(s);
  CHECK(runs == 4);
  CHECK_THROWS_AS(g.launch(s), dk::config_error);  // an empty graph says so
}

namespace {
/// A holder of graph memory with fixed figures, that counts its releases.
struct fake_holder : dk::detail::graph_memory_holder {
  std::size_t live = 0;
  std::size_t peak = 0;
  int released = 0;
  [[nodiscard]] std::size_t capture_live_bytes(unsigned long long) const noexcept override { return live; }
  [[nodiscard]] std::size_t capture_peak_bytes(unsigned long long) const noexcept override { return peak; }
  void release_capture(unsigned long long) noexcept override { ++released; }
};
}  // namespace

TEST_CASE("the graph memory ledger sums its holders by capture and releases them once", "[core][graph]") {
  auto& ledger = dk::detail::graph_memory_ledger::instance();
  fake_holder a;
  fake_holder b;
  a.live = 10;
  a.peak = 100;
  b.live = 1;
  b.peak = 7;
  constexpr unsigned long long id = 0xfeed0001ull;
  ledger.enlist(id, &a);
  ledger.enlist(id, &a);  // once per holder and capture
  ledger.enlist(id, &b);
  ledger.enlist(id + 1, &b);
  CHECK(ledger.live_bytes(id) == 11);
  CHECK(ledger.peak_bytes(id) == 107);
  int kept_freed = 0;
  ledger.keep_alive(id, std::shared_ptr<void>(&kept_freed, [](void* p) { ++*static_cast<int*>(p); }));
  CHECK(ledger.keeps_alive(id));
  CHECK_FALSE(ledger.keeps_alive(id + 1));
  ledger.release(id);
  CHECK(a.released == 1);
  CHECK(b.released == 1);
  CHECK(kept_freed == 1);
  CHECK(ledger.peak_bytes(id) == 0);
  CHECK(ledger.peak_bytes(id + 1) == 7);  // the other capture is untouched
  ledger.withdraw(&b);
  CHECK(ledger.peak_bytes(id + 1) == 0);
  ledger.release(id + 1);
  CHECK(b.released == 1);  // withdrawn: never called again
  ledger.withdraw(&a);
}

TEST_CASE("allocator kinds and byte sizes parse, with messages that list what is allowed", "[core][settings][memory]") {
  CHECK(dk::parse_allocator_kind("pool") == dk::allocator_kind::pool);
  CHECK(dk::parse_allocator_kind("bfc") == dk::allocator_kind::pool);
  CHECK(dk::parse_allocator_kind("async") == dk::allocator_kind::async);
  CHECK(dk::parse_allocator_kind("cuda_async") == dk::allocator_kind::async);
  CHECK(dk::parse_allocator_kind("platform") == dk::allocator_kind::platform);
  CHECK(dk::to_string(dk::allocator_kind::async) == "async");
  CHECK_THROWS_WITH(dk::parse_allocator_kind("arena", "DEVICEKIT_ALLOCATOR"),
                    Catch::Contains("DEVICEKIT_ALLOCATOR='arena'") && Catch::Contains("pool") &&
                        Catch::Contains("async") && Catch::Contains("platform"));

  CHECK(dk::parse_byte_size("4096") == 4096u);
  CHECK(dk::parse_byte_size("256MiB") == (256ull << 20));
  CHECK(dk::parse_byte_size("2G") == (2ull << 30));
  CHECK(dk::parse_byte_size("3KiB") == 3072u);
  CHECK_THROWS_WITH(dk::parse_byte_size("12 apples", "DEVICEKIT_COLLECTIVE_MEMORY_SIZE"),
                    Catch::Contains("DEVICEKIT_COLLECTIVE_MEMORY_SIZE='12 apples'") && Catch::Contains("256MiB"));
  CHECK_THROWS_AS(dk::parse_byte_size(""), dk::config_error);
  CHECK_THROWS_AS(dk::parse_byte_size("-5"), dk::config_error);
  CHECK_THROWS_AS(dk::parse_byte_size("99999999999999999999GiB"), dk::config_error);
}

TEST_CASE("settings read the allocator and the collective reserve from the environment", "[core][settings][memory]") {
  {
    const dk::settings plain = dk::settings{};
    CHECK_FALSE(plain.has_allocator());
    CHECK(plain.get_allocator() == dk::allocator_kind::pool);
    CHECK(plain.get_collective_memory_size() == 0u);
  }
  {
    scoped_env allocator("DEVICEKIT_ALLOCATOR", "platform");
    scoped_env reserve("DEVICEKIT_COLLECTIVE_MEMORY_SIZE", "64MiB");
    const auto s = dk::settings::from_environment();
    CHECK(s.has_allocator());
    CHECK(s.get_allocator() == dk::allocator_kind::platform);
    CHECK(s.get_collective_memory_size() == (64ull << 20));
  }
  {
    scoped_env allocator("DEVICEKIT_ALLOCATOR", "bogus");
    CHECK_THROWS_WITH(dk::settings::from_environment(), Catch::Contains("DEVICEKIT_ALLOCATOR='bogus'"));
  }
  {
    scoped_env reserve("DEVICEKIT_COLLECTIVE_MEMORY_SIZE", "lots");
    CHECK_THROWS_WITH(dk::settings::from_environment(), Catch::Contains("DEVICEKIT_COLLECTIVE_MEMORY_SIZE='lots'"));
  }
}

TEST_CASE("the process context comes from the launcher, one process without one", "[core][device_list]") {
  {
    scoped_env a("OMPI_COMM_WORLD_RANK", nullptr), b("PMI_RANK", nullptr), c("MV2_COMM_WORLD_RANK", nullptr),
        d("SLURM_PROCID", nullptr), e("RANK", nullptr);
    const auto p = dk::process_context::from_environment();
    CHECK(p.process_index == 0);
    CHECK(p.process_count == 1);
    CHECK(p.source.empty());
  }
  {
    scoped_env rank("OMPI_COMM_WORLD_RANK", "2"), size("OMPI_COMM_WORLD_SIZE", "4");
    const auto p = dk::process_context::from_environment();
    CHECK(p.process_index == 2);
    CHECK(p.process_count == 4);
    CHECK(p.source == "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  }
  {
    scoped_env rank("OMPI_COMM_WORLD_RANK", "4"), size("OMPI_COMM_WORLD_SIZE", "4");
    CHECK_THROWS_WITH(dk::process_context::from_environment(),
                      Catch::Contains("process index 4 of 4") && Catch::Contains("OMPI_COMM_WORLD_RANK"));
  }
  {
    scoped_env rank("OMPI_COMM_WORLD_RANK", "x"), size("OMPI_COMM_WORLD_SIZE", "4");
    CHECK_THROWS_WITH(dk::process_context::from_environment(), Catch::Contains("OMPI_COMM_WORLD_RANK='x'"));
  }
}

TEST_CASE("device lists: addressable devices, process indices, global lists", "[core][device_list]") {
  const std::vector<dk::device> two{dk::device::cuda(0), dk::device::cuda(1)};
  const auto single = dk::device_list::local(two, {}, {"NVIDIA H100 80GB HBM3"});
  CHECK(single.size() == 2);
  CHECK(single.is_fully_addressable());
  CHECK(single.process_indices() == std::vector<int>{0});
  CHECK(single[1].local_hardware_id == 1);
  CHECK(single[0].device_kind == "NVIDIA H100 80GB HBM3");
  CHECK(single[1].device_kind.empty());
  CHECK(single.addressable_devices().size() == 2);

  const auto rank0 = dk::device_list::local(two, dk::process_context::make(0, 2));
  const auto rank1 = dk::device_list::local(two, dk::process_context::make(1, 2));
  CHECK(rank1[0].id == 2);  // jaxlib's numbering: process 1's first device follows process 0's
  CHECK(rank1[0].host_id == 1);
  const auto global = dk::device_list::gather({rank1, rank0});  // seen from process 1
  REQUIRE(global.size() == 4);
  CHECK(global.current_process() == 1);
  CHECK_FALSE(global.is_fully_addressable());
  CHECK(global.process_indices() == std::vector<int>{0, 1});
  const auto mine = global.local_devices();
  REQUIRE(mine.size() == 2);
  CHECK(mine[0].process_index == 1);
  CHECK(mine[0].id == 2);
  CHECK(global.by_id(3).local == dk::device::cuda(1));
  CHECK(global.by_id(3).process_index == 1);
  CHECK_THROWS_WITH(global.by_id(7), Catch::Contains("no device has global id 7"));

  CHECK_THROWS_WITH(dk::device_list::gather({rank0}), Catch::Contains("no list from process 1 of 2"));
  CHECK_THROWS_WITH(dk::device_list::gather({rank0, rank0}), Catch::Contains("two lists come from process 0"));
  CHECK_THROWS_WITH(dk::device_list::gather({rank0, single}), Catch::Contains("disagree on the process count"));
  std::vector<dk::process_device> dup(2);
  dup[1].local = dk::device::cpu(1);
  CHECK_THROWS_WITH((dk::device_list{dup, 0, 1}), Catch::Contains("global id 0 is used twice"));
  dup[1].id = 1;
  dup[1].process_index = 3;
  CHECK_THROWS_WITH((dk::device_list{dup, 0, 1}), Catch::Contains("names process 3"));
}

TEST_CASE("device lists answer jaxlib's memory kind queries and check a memory kind", "[core][device_list]") {
  using K = dk::memory_kind;
  const std::string h100 = "NVIDIA H100 80GB HBM3";
  const auto gpus = dk::device_list::local({dk::device::cuda(0), dk::device::cuda(1)}, {}, {h100, h100});
  CHECK(gpus.memory_kinds() == std::vector<K>{K::device, K::pinned_host, K::host});
  CHECK(gpus.default_memory_kind() == K::device);
  CHECK(gpus.device_kind() == h100);
  const auto host = dk::device_list::local({dk::device::cpu()}, {}, {"AMD EPYC 9654"});
  CHECK(host.memory_kinds() == std::vector<K>{K::device, K::host});
  CHECK(host.device_kind() == "AMD EPYC 9654");
  // Mixed: the kinds every addressable device has; no one device kind.
  const auto mixed = dk::device_list::local({dk::device::cuda(0), dk::device::cpu()}, {}, {h100, "AMD EPYC 9654"});
  CHECK(mixed.memory_kinds() == std::vector<K>{K::device, K::host});
  CHECK_THROWS_AS((void)mixed.device_kind(), dk::config_error);
  CHECK_THROWS_WITH((void)mixed.device_kind(),
                    Catch::Contains("different kinds") && Catch::Contains(h100) && Catch::Contains("AMD EPYC 9654"));
  CHECK_THROWS_WITH((void)dk::device_list{}.device_kind(), Catch::Contains("no devices"));

  // check_and_canonicalize_memory_kind: None gives the default; names are canonicalised.
  CHECK(dk::check_and_canonicalize_memory_kind(std::nullopt, gpus) == K::device);
  CHECK(dk::check_and_canonicalize_memory_kind(K::pinned_host, gpus) == K::pinned_host);
  CHECK(dk::check_and_canonicalize_memory_kind("pinned_host", gpus) == K::pinned_host);
  CHECK(dk::check_and_canonicalize_memory_kind("unpinned_host", gpus) == K::host);
  CHECK(dk::check_and_canonicalize_memory_kind(std::optional<std::string_view>(), host) == K::device);
  // A kind the devices do not have, and a name that is no kind: errors listing the valid ones.
  CHECK_THROWS_AS((void)dk::check_and_canonicalize_memory_kind(K::pinned_host, host), dk::config_error);
  CHECK_THROWS_WITH((void)dk::check_and_canonicalize_memory_kind(K::pinned_host, host),
                    Catch::Contains("'pinned_host' is not addressable by device cpu:0") &&
                        Catch::Contains("can address: device, host"));
  CHECK_THROWS_WITH(
      (void)dk::check_and_canonicalize_memory_kind("hbm", gpus),
      Catch::Contains("'hbm' is not a memory kind") && Catch::Contains("can address: device, pinned_host, host"));

  // Seen from a process that owns none of the devices: nothing to ask (jaxlib: an empty tuple and
  // None), and any kind is taken as given.
  const auto others =
      dk::device_list::gather({dk::device_list::local({dk::device::cpu()}, dk::process_context::make(1, 2)),
                               dk::device_list::local({dk::device::cuda(0)}, dk::process_context::make(0, 2), {h100})});
  const dk::device_list theirs(std::vector<dk::process_device>{others.by_id(0)}, 1, 2);
  CHECK(theirs.addressable_devices().empty());
  CHECK(theirs.memory_kinds().empty());
  CHECK_FALSE(theirs.default_memory_kind().has_value());
  CHECK_FALSE(dk::check_and_canonicalize_memory_kind(std::nullopt, theirs).has_value());
  CHECK(dk::check_and_canonicalize_memory_kind(K::pinned_host, theirs) == K::pinned_host);
  CHECK(theirs.device_kind() == h100);
}

TEST_CASE("a topology serializes to stable JSON and reads back", "[core][topology]") {
  const auto host = dk::topology_for_devices(std::vector<dk::device>{dk::device::cpu()}, dk::process_context{});
  CHECK(host.platform == "cpu");
  CHECK(host.platform_version == "cpu");
  CHECK(host.serialize() ==
        "{\"platform\": \"cpu\", \"platform_version\": \"cpu\", \"process_index\": 0, \"process_count\": 1, "
        "\"devices\": [{\"id\": 0, \"device\": \"cpu:0\", \"process_index\": 0, \"host_id\": 0, "
        "\"local_hardware_id\": -1, \"device_kind\": \"\"}]}");
  CHECK(dk::device_topology::deserialize(host.serialize()) == host);

  dk::device_topology t;
  t.platform = "cuda";
  t.platform_version = "cuda driver 13.0 runtime 13.0";
  t.devices = dk::device_list::gather(
      {dk::device_list::local({dk::device::cuda(0)}, dk::process_context::make(0, 2), {"A \"quoted\" GPU"}),
       dk::device_list::local({dk::device::cuda(0)}, dk::process_context::make(1, 2))});
  const std::string text = t.serialize();
  const auto back = dk::device_topology::deserialize(text);
  CHECK(back == t);
  CHECK(back.serialize() == text);
  CHECK(back.devices[0].device_kind == "A \"quoted\" GPU");
  CHECK(back.devices.process_indices() == std::vector<int>{0, 1});

  CHECK_THROWS_WITH(dk::device_topology::deserialize("{\"platform\": 3}"),
                    Catch::Contains("cannot parse device topology at character") && Catch::Contains("expected '\"'"));
  CHECK_THROWS_WITH(dk::device_topology::deserialize("{\"colour\": \"red\"}"), Catch::Contains("not 'colour'"));
  CHECK_THROWS_AS(dk::device_topology::deserialize(text + "x"), dk::config_error);
  CHECK_THROWS_WITH(dk::topology_for_devices(dk::device_list::local({dk::device::cpu(), dk::device::cuda(0)})),
                    Catch::Contains("mixes cpu and cuda"));
}

// The software formats stand in for CUDA's types on builds without CUDA: they must give the same
// bits. Checked against CUDA's own conversions (host-compiled cuda_fp16.h, cuda_bf16.h,
// cuda_fp8.h) for every bit pattern and for floats around every rounding boundary.
#if DEVICEKIT_HAS_CUDA_FLOAT_TYPES
namespace {

template <class Format, class Cuda, class Bits>
void check_format_against_cuda(int pattern_count) {
  for (int i = 0; i < pattern_count; ++i) {
    const auto bits = static_cast<Bits>(i);
    const auto c = std::bit_cast<Cuda>(bits);
    const float expected = static_cast<float>(c);
    const float got = Format::decode(bits);
    INFO("bits " << i);
    if (std::isnan(expected)) {
      CHECK(std::isnan(got));
      continue;
    }
    CHECK(got == expected);
    // Encoding the value, and the values just beside it and halfway to the next, rounds as CUDA does.
    for (const float probe : {expected, std::nextafter(expected, 1e30f), std::nextafter(expected, -1e30f),
                              expected * 1.0625f, expected * 0.9375f, -expected}) {
      const auto cuda_bits = std::bit_cast<Bits>(Cuda(probe));
      INFO("encode " << probe);
      CHECK(Format::encode(probe) == cuda_bits);
    }
  }
}

}  // namespace

TEST_CASE("devicekit's software half, bfloat16 and fp8 formats give CUDA's bits", "[core][float_types]") {
  check_format_against_cuda<dk::detail::float16_format, __half, std::uint16_t>(1 << 16);
  check_format_against_cuda<dk::detail::bfloat16_format, __nv_bfloat16, std::uint16_t>(1 << 16);
  check_format_against_cuda<dk::detail::float8_e4m3_format, __nv_fp8_e4m3, std::uint8_t>(1 << 8);
  check_format_against_cuda<dk::detail::float8_e5m2_format, __nv_fp8_e5m2, std::uint8_t>(1 << 8);
  // Overflow: fp16 and bf16 go to infinity, the fp8 types saturate (CUDA's __NV_SATFINITE).
  CHECK(std::isinf(dk::detail::float16_format::decode(dk::detail::float16_format::encode(1e6f))));
  CHECK(dk::detail::float8_e4m3_format::decode(dk::detail::float8_e4m3_format::encode(1e6f)) == 448.f);
  CHECK(dk::detail::float8_e5m2_format::decode(dk::detail::float8_e5m2_format::encode(-1e9f)) == -57344.f);
}
#endif

TEST_CASE("reduced-precision floats are leaf elements and widen exactly", "[core][float_types]") {
  STATIC_REQUIRE(dk::leaf_element<dk::float16_t>);
  STATIC_REQUIRE(dk::leaf_element<const dk::bfloat16_t>);
  STATIC_REQUIRE(dk::leaf_element<dk::float8_e4m3_t>);
  STATIC_REQUIRE(dk::leaf_element<int>);
  STATIC_REQUIRE(!dk::leaf_element<std::string>);
  STATIC_REQUIRE(dk::is_floating_element_v<dk::float8_e5m2_t>);
  STATIC_REQUIRE(!dk::is_floating_element_v<int>);
  STATIC_REQUIRE(std::is_same_v<decltype(dk::widen(dk::bfloat16_t{})), float>);
  CHECK(dk::widen(dk::narrow_to<dk::float16_t>(0.333333f)) == 0.333251953125f);  // binary16 nearest
  CHECK(dk::widen(dk::narrow_to<dk::bfloat16_t>(1.00390625f)) == 1.f);           // tie: to even
  CHECK(dk::widen(dk::narrow_to<dk::float8_e4m3_t>(1000.0)) == 448.f);
  CHECK(dk::narrow_to<int>(2.75) == 2);
}
