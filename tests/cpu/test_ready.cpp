// place/ready.hpp on the host: the empty ready_event of trees in host memory (ready already,
// nothing to wait for), its ownership rules, and the refusals that come before any CUDA call (a
// stream of another device, a tree on several devices, one stream too few for per-device trees).
// The events of GPU trees are tested on the simulator (tests/sim/test_sim_ready.cpp).
#include <catch2/catch.hpp>

#include <devicekit/place/place.hpp>
#include <devicekit/place/ready.hpp>

#include <array>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dk = devicekit;

static_assert(!std::is_copy_constructible_v<dk::ready_event>);
static_assert(!std::is_copy_assignable_v<dk::ready_event>);
static_assert(std::is_nothrow_move_constructible_v<dk::ready_event>);
static_assert(std::is_nothrow_move_assignable_v<dk::ready_event>);

namespace {
void check_empty(const dk::ready_event& ev) {
  CHECK(ev.empty());
  CHECK(ev.native_handle() == nullptr);
  CHECK(ev.get_device() == dk::device::cpu());
  CHECK(ev.query());
  ev.synchronize();
  ev.wait(dk::stream_ref{});
  dk::wait_ready(dk::stream_ref{}, ev);
}
}  // namespace

TEST_CASE("ready_event: the empty event is ready and owns nothing", "[ready]") {
  dk::ready_event ev;
  check_empty(ev);
  dk::ready_event moved = std::move(ev);
  check_empty(moved);
  check_empty(ev);  // NOLINT(bugprone-use-after-move): a moved-from event is empty
  CHECK(moved.release() == nullptr);
  check_empty(moved);
  moved = dk::ready_event{};
  check_empty(moved);
}

TEST_CASE("record_ready: a tree in host memory gets the empty event", "[ready]") {
  const std::vector<float> host{1.f, 2.f, 3.f};
  check_empty(dk::record_ready(host, dk::stream_ref{}));
  const dk::stream inline_stream;
  auto placed = dk::place(std::make_tuple(host, 2.5), dk::device::cpu(), inline_stream);
  check_empty(dk::record_ready(placed, inline_stream));
  check_empty(dk::record_ready(std::make_tuple(1, 2.0), dk::stream_ref{}));  // no array leaves
#if DEVICEKIT_HAS_CUDA
  // Host data is ready whatever stream is named: nothing is recorded (no CUDA call is made).
  check_empty(dk::record_ready(host, dk::stream_ref(dk::device::cuda(0), nullptr)));
#endif
}

TEST_CASE("wait_ready: a null producer event is ready already", "[ready]") {
  dk::wait_ready(dk::stream_ref{}, dk::native_event_handle{});
#if !DEVICEKIT_HAS_CUDA
  int not_an_event = 0;
  CHECK_THROWS_WITH(dk::wait_ready(dk::stream_ref{}, &not_an_event),
                    Catch::Contains("wait_ready: devicekit was built without CUDA"));
#endif
}

TEST_CASE("record_ready: refusals before any CUDA call", "[ready]") {
  std::vector<float> memory(4);
  const auto on_gpu0 = dk::device_array<float>::view(memory.data(), memory.size(), dk::device::cuda(0));
  const auto on_gpu1 = dk::device_array<float>::view(memory.data(), memory.size(), dk::device::cuda(1));

  SECTION("a stream of another device than the tree") {
    try {
      (void)dk::record_ready(on_gpu0, dk::stream_ref{});
      FAIL("no device_mismatch");
    } catch (const dk::device_mismatch& e) {
      CHECK_THAT(e.what(), Catch::Contains("record_ready: the tree is on cuda:0 but the stream is on cpu:0"));
      CHECK(e.expected() == dk::device::cuda(0));
      CHECK(e.actual() == dk::device::cpu());
    }
  }
  SECTION("a tree whose leaves lie on two GPUs") {
    CHECK_THROWS_AS((void)dk::record_ready(std::make_tuple(on_gpu0, on_gpu1), dk::stream_ref{}), dk::device_mismatch);
    CHECK_THROWS_WITH((void)dk::record_ready(std::make_tuple(on_gpu0, on_gpu1), dk::stream_ref{}),
                      Catch::Contains("record_ready: the tree's leaves are on different devices"));
  }
  SECTION("per-device trees with one stream too few") {
    dk::per_device<std::vector<float>> two;
    two.devices = {dk::device::cpu(), dk::device::cpu()};
    two.trees = {memory, memory};
    CHECK_THROWS_AS((void)dk::record_ready(two, {dk::stream_ref{}}), dk::config_error);
    CHECK_THROWS_WITH((void)dk::record_ready(two, {dk::stream_ref{}}),
                      Catch::Contains("record_ready: 1 stream(s) for trees on 2 device(s)"));
    const auto events = dk::record_ready(two, {dk::stream_ref{}, dk::stream_ref{}});
    REQUIRE(events.size() == 2);
    for (const auto& ev : events) check_empty(ev);
  }
}

TEST_CASE("record_ready takes the streams for per-device trees as any range of streams", "[place][ready]") {
  const std::vector<float> memory(4, 1.f);
  dk::per_device<std::vector<float>> two;
  two.devices = {dk::device::cpu(), dk::device::cpu()};
  two.trees = {memory, memory};
  // The streams a program made, one per device, as they are: no conversion by hand.
  std::vector<dk::stream> made(2);
  const auto from_streams = dk::record_ready(two, made);
  REQUIRE(from_streams.size() == 2);
  for (const auto& ev : from_streams) check_empty(ev);
  const std::array<dk::stream_ref, 2> refs{};
  CHECK(dk::record_ready(two, refs).size() == 2);
  CHECK(dk::record_ready(two, std::span<const dk::stream_ref>(refs)).size() == 2);
  const std::vector<dk::stream_ref> as_refs(2);
  CHECK(dk::record_ready(two, as_refs).size() == 2);
  // One stream too few is refused whatever the range.
  made.pop_back();
  CHECK_THROWS_WITH((void)dk::record_ready(two, made), Catch::Contains("record_ready: 1 stream(s) for trees on 2"));
}
