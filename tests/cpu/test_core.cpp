// core/: device parsing and printing, errors, settings from the environment, the CPU stream.
#include <catch2/catch.hpp>

#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/detect/detectors.hpp>

#include "test_support.hpp"

#include <cstdlib>
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
TEST_CASE("a cuda stream without a GPU fails with a cuda_error, not a crash", "[core][stream]") {
  const auto caps = dk::cuda_detector{}.detect(dk::settings{});
  if (caps.gpu_count > 0) {
    dk::stream s(dk::device::cuda(0));
    CHECK(s.native_handle() != nullptr);
    s.synchronize();
    CHECK(s.idle());
  } else {
    CHECK_THROWS_AS(dk::stream(dk::device::cuda(0)), dk::cuda_error);
  }
}
#endif

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
