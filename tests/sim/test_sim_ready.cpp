// Ready events on simulated GPUs (place/ready.hpp), checked by the simulator's race detector: code
// outside devicekit that waits for a placed tree's event on its own stream reads the tree in
// order, and without the wait its read is a reported race; devicekit's work on a stream that
// waits for an external producer's event reads what the producer wrote, and without the wait that
// read is a reported race too. Each devicekit stream is held by a gate while the other side queues
// its work, so only the event can order the two.
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool detector_off() {
  const char* v = std::getenv("DEVICEKIT_SIM_RACECHECK");
  return v != nullptr && std::string(v) == "0";
}

constexpr std::size_t n = 1 << 12;
constexpr std::size_t bytes = n * sizeof(float);

/// Pinned host memory for `n` floats (asynchronous copies), freed with the object.
struct pinned_floats {
  float* p = static_cast<float*>(sim_test::pinned_host(bytes, 0));
  pinned_floats() = default;
  pinned_floats(const pinned_floats&) = delete;
  pinned_floats& operator=(const pinned_floats&) = delete;
  ~pinned_floats() { CHECK(cudaFreeHost(p) == cudaSuccess); }
  [[nodiscard]] std::vector<float> values() const { return {p, p + n}; }
};

/// A non-blocking stream of `ordinal` made outside devicekit, destroyed with the object.
struct their_stream {
  cudaStream_t s;
  explicit their_stream(int ordinal) : s(foreign_stream_on(ordinal)) {}
  their_stream(const their_stream&) = delete;
  their_stream& operator=(const their_stream&) = delete;
  ~their_stream() { CHECK(cudaStreamDestroy(s) == cudaSuccess); }
};

/// Declares the races a case provokes; the violations so far, for races_since.
std::size_t expect_races(std::size_t count) {
  sim::expect_violations(count);
  return sim::violations().size();
}

/// The violations since `before`, which must be `count` stream-order races.
void check_races_since(std::size_t before, std::size_t count) {
  const auto v = sim::violations();
  REQUIRE(v.size() == before + count);
  for (std::size_t i = before; i < v.size(); ++i) {
    INFO(v[i]);
    CHECK(v[i].find("stream-order race") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("ready events: a consumer stream that waits for record_ready reads the placed tree in order",
          "[sim][ready]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream s(gpu);
  const auto values = ramp(n, 7.f);
  gate g;
  REQUIRE(cudaLaunchHostFunc(s.native_handle(), gate::hold, &g) == cudaSuccess);
  auto placed = dk::place(values, gpu, s);  // queued behind the gate
  dk::ready_event ev = dk::record_ready(placed, s);
  REQUIRE_FALSE(ev.empty());
  CHECK(ev.get_device() == gpu);
  CHECK_FALSE(ev.query());  // the copy cannot have run: its stream is held

  their_stream theirs(gpu.ordinal());
  pinned_floats out;
  const auto violations_before = sim::violations().size();
  const auto races_before = sim::races_detected();
  SECTION("cudaStreamWaitEvent on the native handle") {
    REQUIRE(cudaStreamWaitEvent(theirs.s, ev.native_handle(), 0) == cudaSuccess);
  }
  SECTION("ready_event::wait") { ev.wait(dk::stream_ref(gpu, theirs.s)); }
  REQUIRE(cudaMemcpyAsync(out.p, placed.data(), bytes, cudaMemcpyDeviceToHost, theirs.s) == cudaSuccess);
  CHECK(sim::races_detected() == races_before);
  g.open = true;
  REQUIRE(cudaStreamSynchronize(theirs.s) == cudaSuccess);
  CHECK(ev.query());
  CHECK(out.values() == values);
  CHECK(sim::violations().size() == violations_before);
  s.synchronize();
}

TEST_CASE("ready events: a consumer stream that does not wait races with the placement", "[sim][ready]") {
  if (detector_off()) return;
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream s(gpu);
  gate g;
  REQUIRE(cudaLaunchHostFunc(s.native_handle(), gate::hold, &g) == cudaSuccess);
  auto placed = dk::place(ramp(n, 7.f), gpu, s);
  const dk::ready_event ev = dk::record_ready(placed, s);  // recorded, but nobody waits for it
  their_stream theirs(gpu.ordinal());
  pinned_floats out;
  const auto before = expect_races(1);
  const auto races_before = sim::races_detected();
  REQUIRE(cudaMemcpyAsync(out.p, placed.data(), bytes, cudaMemcpyDeviceToHost, theirs.s) == cudaSuccess);
  CHECK(sim::races_detected() == races_before + 1);  // reported when queued
  check_races_since(before, 1);
  g.open = true;
  REQUIRE(cudaStreamSynchronize(theirs.s) == cudaSuccess);
  s.synchronize();
}

TEST_CASE("ready events: devicekit's work after wait_ready reads what an external producer wrote", "[sim][ready]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::scoped_device on(gpu.ordinal());
  auto produced = sim_test::scoped_device_memory(bytes);
  const auto view = dk::device_array<float>::view(static_cast<float*>(produced.get()), n, gpu);
  their_stream theirs(gpu.ordinal());
  auto producer_done = sim_test::scoped_event(cudaEventDisableTiming);
  pinned_floats in;
  const auto values = ramp(n, -3.f);
  std::memcpy(in.p, values.data(), bytes);

  // The producer: its copy into device memory is held behind a gate on its own stream, then an
  // event is recorded after it.
  gate g;
  REQUIRE(cudaLaunchHostFunc(theirs.s, gate::hold, &g) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(produced.get(), in.p, bytes, cudaMemcpyHostToDevice, theirs.s) == cudaSuccess);
  REQUIRE(cudaEventRecord(producer_done, theirs.s) == cudaSuccess);

  const dk::stream s(gpu);
  const auto violations_before = sim::violations().size();
  const auto races_before = sim::races_detected();
  dk::wait_ready(s, producer_done.get());
  auto copied = dk::place(view, gpu, s);  // a device-to-device copy on s
  CHECK(sim::races_detected() == races_before);
  g.open = true;
  CHECK(dk::to_host(copied, s) == values);
  CHECK(sim::violations().size() == violations_before);
  REQUIRE(cudaStreamSynchronize(theirs.s) == cudaSuccess);
}

TEST_CASE("ready events: devicekit's work without wait_ready races with the producer", "[sim][ready]") {
  if (detector_off()) return;
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::scoped_device on(gpu.ordinal());
  auto produced = sim_test::scoped_device_memory(bytes);
  const auto view = dk::device_array<float>::view(static_cast<float*>(produced.get()), n, gpu);
  their_stream theirs(gpu.ordinal());
  gate g;
  REQUIRE(cudaLaunchHostFunc(theirs.s, gate::hold, &g) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(produced.get(), 0x11, bytes, theirs.s) == cudaSuccess);

  const dk::stream s(gpu);
  const auto before = expect_races(1);
  auto copied = dk::place(view, gpu, s);  // not ordered after the producer's write
  check_races_since(before, 1);
  g.open = true;
  REQUIRE(cudaStreamSynchronize(theirs.s) == cudaSuccess);
  s.synchronize();
}

// A tree on one GPU, a consumer stream on another: cudaStreamWaitEvent takes an event of another
// device, and the consumer copies the tree to its own device in order.
TEST_CASE("ready events: a consumer on another device waits for the event", "[sim][ready][multi]") {
  const dk::device gpu0 = dk::device::cuda(0);
  const dk::device gpu1 = dk::device::cuda(1);
  const dk::stream s(gpu1);
  const auto values = ramp(n, 11.f);
  gate g;
  REQUIRE(cudaLaunchHostFunc(s.native_handle(), gate::hold, &g) == cudaSuccess);
  auto placed = dk::place(values, gpu1, s);
  const dk::ready_event ev = dk::record_ready(placed, s);
  CHECK(ev.get_device() == gpu1);
  CHECK_THROWS_AS((void)dk::record_ready(placed, dk::stream(gpu0)), dk::device_mismatch);

  const dk::scoped_device on(gpu0.ordinal());
  their_stream theirs(gpu0.ordinal());
  auto mine = sim_test::scoped_device_memory(bytes);
  pinned_floats out;
  const auto violations_before = sim::violations().size();
  dk::wait_ready(dk::stream_ref(gpu0, theirs.s), ev);
  REQUIRE(cudaMemcpyPeerAsync(mine.get(), 0, placed.data(), 1, bytes, theirs.s) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(out.p, mine.get(), bytes, cudaMemcpyDeviceToHost, theirs.s) == cudaSuccess);
  g.open = true;
  REQUIRE(cudaStreamSynchronize(theirs.s) == cudaSuccess);
  CHECK(out.values() == values);
  CHECK(sim::violations().size() == violations_before);
  s.synchronize();
}

// What replicate returns: one event per device, each recorded on that device's stream.
TEST_CASE("ready events: one per device for replicated trees", "[sim][ready][multi]") {
  const std::vector<dk::device> gpus{dk::device::cuda(0), dk::device::cuda(1)};
  const auto values = ramp(n, 5.f);
  auto copies = dk::replicate(values, gpus);
  const dk::stream s0(gpus[0]);
  const dk::stream s1(gpus[1]);
  CHECK_THROWS_AS((void)dk::record_ready(copies, {s1, s0}), dk::device_mismatch);
  const auto events = dk::record_ready(copies, {s0, s1});
  REQUIRE(events.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(events[i].get_device() == gpus[i]);
    their_stream theirs(gpus[i].ordinal());
    pinned_floats out;
    events[i].wait(dk::stream_ref(gpus[i], theirs.s));
    REQUIRE(cudaMemcpyAsync(out.p, copies[i].data(), bytes, cudaMemcpyDeviceToHost, theirs.s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(theirs.s) == cudaSuccess);
    CHECK(out.values() == values);
  }
  // The streams as the program made them, a std::vector<dk::stream>, one per device.
  std::vector<dk::stream> made;
  for (const auto d : gpus) made.emplace_back(d);
  const auto from_made = dk::record_ready(copies, made);
  REQUIRE(from_made.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(from_made[i].get_device() == gpus[i]);
    from_made[i].synchronize();
    CHECK(from_made[i].query());
  }
  std::swap(made[0], made[1]);
  CHECK_THROWS_AS((void)dk::record_ready(copies, made), dk::device_mismatch);
}

// An event recorded on a capturing stream would mark a point of the graph, not data that is ready:
// refused before anything is recorded, and the capture ends as it began.
TEST_CASE("ready events: record_ready refuses a stream that is capturing a graph", "[sim][ready]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream s(gpu);
  auto placed = dk::place(ramp(n, 1.f), gpu, s);
  s.synchronize();
  REQUIRE(cudaStreamBeginCapture(s.native_handle(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK_THROWS_WITH((void)dk::record_ready(placed, s),
                    Catch::Contains("record_ready") && Catch::Contains("captured into a CUDA graph"));
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.native_handle(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  const dk::ready_event ev = dk::record_ready(placed, s);  // recorded once the capture has ended
  CHECK_FALSE(ev.empty());
  ev.synchronize();
  CHECK(ev.query());
}
