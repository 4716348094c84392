// Device-wide calls (core/device_ops.hpp) as far as the host can check them: the cpu answers and
// the errors for cpu devices and cuda ordinals this process does not see (on this machine, or a
// GPU machine: no process sees cuda:4096); and device_mismatch's expected/actual fields at each
// throw site that fake device leaves reach without a GPU. The CUDA paths are tested on simulated
// GPUs (tests/sim/test_sim_device_ops.cpp).
#include <catch2/catch.hpp>

#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/device_ops.hpp>
#include <devicekit/place/copy.hpp>
#include <devicekit/place/place.hpp>

#include "../common/test_data.hpp"

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <vector>

namespace dk = devicekit;
using Catch::Matchers::Contains;
using devicekit::testing::mismatch_of;

TEST_CASE("device-wide calls on a cpu device: synchronize does nothing, is_idle is true", "[core][device_ops]") {
  CHECK_NOTHROW(dk::synchronize(dk::device::cpu()));
  CHECK(dk::is_idle(dk::device::cpu()));
  // Work on the host runs inline: a cpu stream is idle at once, and so is the device.
  const dk::stream s;
  s.synchronize();
  CHECK(s.idle());
  CHECK(dk::is_idle(s.get_device()));
}

TEST_CASE("peer access is between two cuda devices: a cpu device is a config_error naming it", "[core][device_ops]") {
  const auto cpu = dk::device::cpu();
  const auto gpu = dk::device::cuda(0);
  CHECK_THROWS_AS((void)dk::can_access_peer(cpu, gpu), dk::config_error);
  CHECK_THROWS_WITH((void)dk::can_access_peer(cpu, gpu), Contains("can_access_peer(cpu:0, cuda:0)") &&
                                                             Contains("peer access is between two cuda devices") &&
                                                             Contains("cpu:0 is the host"));
  CHECK_THROWS_AS(dk::enable_peer_access(gpu, cpu), dk::config_error);
  CHECK_THROWS_WITH(dk::enable_peer_access(gpu, cpu), Contains("enable_peer_access(cuda:0, cpu:0)"));
  CHECK_THROWS_AS(dk::enable_peer_access(cpu, cpu), dk::config_error);
}

TEST_CASE("a cuda ordinal the process does not see is a config_error for every device-wide call",
          "[core][device_ops]") {
  const auto missing = dk::device::cuda(4096);
  const auto negative = dk::device(dk::device_kind::cuda, -1);
  // (Catch2 matchers combined with && hold references: each is built in the check itself.)
#if DEVICEKIT_HAS_CUDA
#  define WHY Contains("cuda:4096 does not exist: this process sees") && Contains("CUDA device")
#else
#  define WHY Contains("cuda:4096") && Contains("built without CUDA")
#endif
  CHECK_THROWS_AS(dk::synchronize(missing), dk::config_error);
  CHECK_THROWS_WITH(dk::synchronize(missing), Contains("synchronize") && WHY);
  CHECK_THROWS_AS((void)dk::is_idle(missing), dk::config_error);
  CHECK_THROWS_WITH((void)dk::is_idle(missing), Contains("is_idle") && WHY);
#undef WHY
  CHECK_THROWS_AS((void)dk::can_access_peer(missing, missing), dk::config_error);
  CHECK_THROWS_WITH((void)dk::can_access_peer(dk::device::cuda(0), missing),
                    Contains("can_access_peer(cuda:0, cuda:4096)"));
  CHECK_THROWS_AS(dk::enable_peer_access(missing, dk::device::cuda(0)), dk::config_error);
  CHECK_THROWS_AS(dk::synchronize(negative), dk::config_error);
  CHECK_THROWS_AS((void)dk::is_idle(negative), dk::config_error);
}

TEST_CASE("device_mismatch carries the expected and actual devices as values", "[place][mismatch]") {
  const dk::device_mismatch plain("text only");
  CHECK_FALSE(plain.expected().has_value());
  CHECK_FALSE(plain.actual().has_value());
  CHECK(std::string(plain.what()) == "text only");
  const dk::device_mismatch both("x", dk::device::cuda(1), dk::device::cpu());
  CHECK(both.expected() == dk::device::cuda(1));
  CHECK(both.actual() == dk::device::cpu());
  const dk::error& base = both;  // caught as devicekit::error, the fields are still there
  CHECK(dynamic_cast<const dk::device_mismatch&>(base).actual() == dk::device::cpu());

  // Views of (fake) device memory: every check comes before any copy, so it runs without a GPU.
  float dummy[4] = {};
  const std::tuple<dk::device_array<float>, dk::device_array<float>> split{
      dk::device_array<float>::view(dummy, 4, dk::device::cuda(0)),
      dk::device_array<float>::view(dummy, 4, dk::device::cuda(1))};

  SECTION("leaves of one tree on two devices: the first leaf's device, then the other's") {
    for (const auto& e : {mismatch_of([&] { (void)dk::device_of(split); }),
                          mismatch_of([&] { (void)dk::place(split, dk::device::cpu()); }),
                          mismatch_of([&] { (void)dk::to_host(split); })}) {
      REQUIRE(e.has_value());
      CHECK(e->expected() == dk::device::cuda(0));
      CHECK(e->actual() == dk::device::cuda(1));
    }
  }
  SECTION("two trees on two devices: the first tree's device, then the other's") {
    const auto a = std::make_tuple(dk::device_array<float>::view(dummy, 4, dk::device::cuda(0)));
    const auto b = std::make_tuple(7, dk::device_array<float>::view(dummy, 4, dk::device::cuda(2)));
    const auto e = mismatch_of([&] { (void)dk::same_device(std::make_tuple(1), a, b); });
    REQUIRE(e.has_value());
    CHECK(e->expected() == dk::device::cuda(0));
    CHECK(e->actual() == dk::device::cuda(2));
    CHECK_THAT(e->what(), Contains("tree 2 is on cuda:0") && Contains("tree 3 is on cuda:2"));
  }
  SECTION("a stream of another device: the target device, then the stream's") {
    // A destination placed before (a view standing in for it): its device is where the copy goes.
    const dk::stream cpu_stream;
    auto on_gpu3 = std::make_tuple(dk::device_array<float>::view(dummy, 4, dk::device::cuda(3)));
    const auto e = mismatch_of([&] { dk::copy(std::make_tuple(std::vector<float>(4, 1.f)), on_gpu3, cpu_stream); });
    REQUIRE(e.has_value());
    CHECK(e->expected() == dk::device::cuda(3));
    CHECK(e->actual() == dk::device::cpu());
    CHECK_THAT(e->what(), Contains("the stream is on cpu:0 but the target device is cuda:3"));
    CHECK(dummy[0] == 0.f);
  }
  SECTION("place_view of device leaves: the host, then the leaves' device") {
    std::tuple<dk::device_array<float>> on_gpu{dk::device_array<float>::view(dummy, 4, dk::device::cuda(5))};
    const auto e = mismatch_of([&] { (void)dk::place_view(on_gpu); });
    REQUIRE(e.has_value());
    CHECK(e->expected() == dk::device::cpu());
    CHECK(e->actual() == dk::device::cuda(5));
  }
}

TEST_CASE("a default stream_ref is the cpu inline stream; a cpu stream converts to it", "[core][stream_ref]") {
  const dk::stream_ref inline_ref;
  CHECK(inline_ref.get_device() == dk::device::cpu(0));
  CHECK(inline_ref.native_handle() == nullptr);
  CHECK(inline_ref.idle());
  inline_ref.synchronize();  // nothing is queued on the cpu: returns at once
  const dk::stream cpu_stream;
  const dk::stream_ref from_stream = cpu_stream;
  CHECK(from_stream == inline_ref);
  STATIC_REQUIRE_FALSE(std::is_convertible_v<int, dk::stream_ref>);
}

TEST_CASE("placement on the cpu takes a stream_ref, and refuses one of a cuda device", "[place][stream_ref]") {
  const std::vector<double> source{1.0, 2.0, 3.0};
  auto placed = dk::place(source, dk::device::cpu(0), dk::stream_ref{});
  CHECK(dk::to_host(placed) == source);
#if DEVICEKIT_HAS_CUDA
  // A reference with an explicit device is trusted without a runtime call, so this runs without
  // a GPU; the placement is refused before any CUDA work: a mismatch where the process has
  // cuda:0, the error of a device it does not have otherwise (core/detail/device_exists.hpp).
  const dk::stream_ref gpu_stream(dk::device::cuda(0), nullptr);
  if (dk::detail::device_exists(dk::device::cuda(0))) {
    const auto e = mismatch_of([&] { (void)dk::place(source, dk::device::cpu(0), gpu_stream); });
    REQUIRE(e);
    CHECK(e->expected() == dk::device::cpu(0));
    CHECK(e->actual() == dk::device::cuda(0));
  } else {
    CHECK_THROWS_WITH((void)dk::place(source, dk::device::cpu(0), gpu_stream),
                      Catch::StartsWith("place: cuda:0 does not exist: this process sees 0 CUDA devices"));
  }
#endif
}
