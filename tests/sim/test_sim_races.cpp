// The simulator's stream-order race detector (sim/README.md, "Race detector"): two accesses to
// the same device or pinned memory, one a write, that the CUDA runtime orders neither way are a
// data race. The detector decides from the order of the calls (vector clocks), never from the
// schedule, so each race here is reported on every run whatever DEVICEKIT_SIM_SEED and
// DEVICEKIT_SIM_MAX_DELAY_US are; each case that provokes one declares it first.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>

#include "sim_test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#if DEVICEKIT_CUDA_SIM_NCCL  // the simulator implements NCCL (its header was found at build time)
#  include <nccl.h>
#endif

namespace sim = devicekit::cuda_sim;

namespace {

void ok(cudaError_t e) { REQUIRE(e == cudaSuccess); }

using sim_test::gate;
using sim_test::set_flag;

constexpr std::size_t bytes = 4096;

/// DEVICEKIT_SIM_RACECHECK=0 turns the detector off: the cases then have nothing to check.
bool detector_off() {
  const char* v = std::getenv("DEVICEKIT_SIM_RACECHECK");
  return v != nullptr && std::string(v) == "0";
}

/// Device memory, two pinned host buffers and two streams of device 0.
struct fixture {
  void* dev = nullptr;
  void* host_in = nullptr;
  void* host_out = nullptr;
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  explicit fixture(unsigned flags_a = cudaStreamNonBlocking, unsigned flags_b = cudaStreamNonBlocking) {
    ok(cudaSetDevice(0));
    ok(cudaMalloc(&dev, bytes));
    ok(cudaMallocHost(&host_in, bytes));
    ok(cudaMallocHost(&host_out, bytes));
    ok(cudaStreamCreateWithFlags(&a, flags_a));
    ok(cudaStreamCreateWithFlags(&b, flags_b));
  }
  ~fixture() {
    (void)cudaDeviceSynchronize();
    (void)cudaStreamDestroy(a);
    (void)cudaStreamDestroy(b);
    (void)cudaFreeHost(host_out);
    (void)cudaFreeHost(host_in);
    if (dev != nullptr) (void)cudaFree(dev);
  }
  fixture(const fixture&) = delete;
  fixture& operator=(const fixture&) = delete;
};

/// Declares `n` races to come (expect_violations); the violations so far, for races_since.
std::size_t expect_races(std::size_t n) {
  sim::expect_violations(n);
  return sim::violations().size();
}

/// The violations reported since `before`, which must be `n` races.
std::vector<std::string> races_since(std::size_t before, std::size_t n) {
  const auto v = sim::violations();
  REQUIRE(v.size() == before + n);
  std::vector<std::string> out(v.begin() + static_cast<std::ptrdiff_t>(before), v.end());
  for (const auto& text : out) CHECK(text.find("stream-order race") != std::string::npos);
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct declared {
  void* p;
  bool write;
};
void CUDART_CB declare_access(void* d) {
  auto* a = static_cast<declared*>(d);
  sim::device_access(a->p, bytes, a->write);
}

}  // namespace

TEST_CASE("races: a copy into device memory and a copy out of it on unordered streams race", "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = expect_races(2);
  const auto races_before = sim::races_detected();
  // While the first copy is held back...
  gate g;
  ok(cudaLaunchHostFunc(f.a, gate::hold, &g));
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  const auto first = races_since(before, 1);  // reported at the call, before either has run
  g.open = true;
  ok(cudaDeviceSynchronize());
  // ...and when it has finished in real time, seen through a flag, not through CUDA: no ordering.
  std::atomic<int> done{0};
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  ok(cudaLaunchHostFunc(f.a, set_flag, &done));
  const auto t0 = std::chrono::steady_clock::now();
  while (done.load() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  REQUIRE(done.load() == 1);
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  const auto both = races_since(before, 2);
  CHECK(sim::races_detected() == races_before + 2);
  for (const auto& text : both) {
    INFO(text);
    CHECK(has(text, "write by cudaMemcpyAsync (destination of a host-to-device copy) on non-blocking stream"));
    CHECK(has(text, "read by cudaMemcpyAsync (source of a device-to-host copy) on non-blocking stream"));
    CHECK(has(text, "memory of device 0"));
    CHECK(has(text, "record an event after the first and make the second's stream wait for it"));
  }
  CHECK(first[0] == both[0]);
}

TEST_CASE("races: an event recorded after the first copy and waited for by the second stream orders them",
          "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = sim::violations().size();
  cudaEvent_t ev = nullptr;
  ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  gate g;
  ok(cudaLaunchHostFunc(f.a, gate::hold, &g));
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  ok(cudaEventRecord(ev, f.a));
  ok(cudaStreamWaitEvent(f.b, ev, 0));
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  // The next copy into the memory on stream a is not ordered after the read on b: a race,
  // unless b's work is waited for too (a second event, the other way).
  cudaEvent_t back = nullptr;
  ok(cudaEventCreateWithFlags(&back, cudaEventDisableTiming));
  ok(cudaEventRecord(back, f.b));
  ok(cudaStreamWaitEvent(f.a, back, 0));
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  g.open = true;
  ok(cudaDeviceSynchronize());
  CHECK(sim::violations().size() == before);
  ok(cudaEventDestroy(ev));
  ok(cudaEventDestroy(back));
}

TEST_CASE("races: the legacy default stream and a blocking stream are ordered, a non-blocking one is not",
          "[sim][races]") {
  if (detector_off()) return;
  SECTION("legacy then blocking, and blocking then legacy: no race") {
    fixture f(cudaStreamDefault, cudaStreamDefault);
    const auto before = sim::violations().size();
    gate g;
    ok(cudaLaunchHostFunc(nullptr, gate::hold, &g));
    ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, nullptr));
    ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
    ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy));
    g.open = true;
    ok(cudaDeviceSynchronize());
    CHECK(sim::violations().size() == before);
  }
  SECTION("legacy then non-blocking: a race") {
    fixture f(cudaStreamDefault, cudaStreamNonBlocking);
    const auto before = expect_races(1);
    ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, nullptr));
    ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
    const auto r = races_since(before, 1);
    INFO(r[0]);
    CHECK(has(r[0], "on legacy default stream"));
    CHECK(has(r[0], "on non-blocking stream"));
  }
}

TEST_CASE("races: cudaStreamSynchronize between the two copies orders them", "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = sim::violations().size();
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  ok(cudaStreamSynchronize(f.a));
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  // cudaEventSynchronize and a successful cudaEventQuery order the host too.
  cudaEvent_t ev = nullptr;
  ok(cudaEventCreate(&ev));
  ok(cudaEventRecord(ev, f.b));
  ok(cudaEventSynchronize(ev));
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  ok(cudaEventRecord(ev, f.a));
  while (cudaEventQuery(ev) == cudaErrorNotReady) std::this_thread::yield();
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  ok(cudaDeviceSynchronize());
  CHECK(sim::violations().size() == before);
  ok(cudaEventDestroy(ev));
}

TEST_CASE("races: kernel stand-ins (host functions declaring accesses) on two unordered streams race", "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = expect_races(1);
  declared writer{f.dev, true};
  declared reader{f.dev, false};
  ok(cudaLaunchHostFunc(f.a, declare_access, &writer));
  ok(cudaLaunchHostFunc(f.b, declare_access, &reader));
  ok(cudaStreamSynchronize(f.a));
  ok(cudaStreamSynchronize(f.b));
  const auto r = races_since(before, 1);  // whichever of the two ran second reports it
  INFO(r[0]);
  CHECK(has(r[0], "write by cudaLaunchHostFunc (declared write)"));
  CHECK(has(r[0], "read by cudaLaunchHostFunc (declared read)"));
  // The same two on one stream are in stream order, and a later copy on that stream is too.
  const auto after = sim::violations().size();
  ok(cudaLaunchHostFunc(f.a, declare_access, &writer));
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.a));
  ok(cudaLaunchHostFunc(f.a, declare_access, &reader));
  ok(cudaStreamSynchronize(f.a));
  CHECK(sim::violations().size() == after);
}

TEST_CASE("races: the host reading pinned memory races with the copy that writes it until it synchronises",
          "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = expect_races(1);
  gate g;
  ok(cudaLaunchHostFunc(f.a, gate::hold, &g));
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.a));
  sim::device_access(f.host_out, bytes, false);  // the host reads the staging buffer too early
  const auto r = races_since(before, 1);
  INFO(r[0]);
  CHECK(has(r[0], "pinned host memory"));
  CHECK(has(r[0], "write by cudaMemcpyAsync (destination of a device-to-host copy)"));
  CHECK(has(r[0], "read by device_access (declared read) on the host thread"));
  g.open = true;
  ok(cudaStreamSynchronize(f.a));
  devicekit_cuda_sim_host_access(f.host_out, bytes, 0);  // after the wait: ordered
  // Writing the source of a queued host-to-device copy before it ran is a race too; after an
  // event synchronisation it is not.
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  cudaEvent_t ev = nullptr;
  ok(cudaEventCreate(&ev));
  ok(cudaEventRecord(ev, f.a));
  ok(cudaEventSynchronize(ev));
  sim::device_access(f.host_in, bytes, true);
  CHECK(sim::violations().size() == before + 1);
  ok(cudaEventDestroy(ev));
}

TEST_CASE("races: cudaFreeAsync on one stream of memory still read on an unordered stream", "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = expect_races(1);
  void* p = nullptr;
  ok(cudaMallocAsync(&p, bytes, f.a));
  ok(cudaMemcpyAsync(p, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  ok(cudaStreamSynchronize(f.a));
  ok(cudaMemcpyAsync(f.host_out, p, bytes, cudaMemcpyDeviceToHost, f.a));
  ok(cudaFreeAsync(p, f.b));  // not ordered after the read on a
  const auto r = races_since(before, 1);
  INFO(r[0]);
  CHECK(has(r[0], "read by cudaMemcpyAsync (source of a device-to-host copy)"));
  CHECK(has(r[0], "write by cudaFreeAsync (the allocation freed)"));
  ok(cudaDeviceSynchronize());
  // Ordered through an event: no race.
  ok(cudaMallocAsync(&p, bytes, f.a));
  ok(cudaMemcpyAsync(p, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  cudaEvent_t ev = nullptr;
  ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  ok(cudaEventRecord(ev, f.a));
  ok(cudaStreamWaitEvent(f.b, ev, 0));
  ok(cudaFreeAsync(p, f.b));
  ok(cudaDeviceSynchronize());
  CHECK(sim::violations().size() == before + 1);
  ok(cudaEventDestroy(ev));
}

TEST_CASE("races: a gated host function holding the legacy stream orders the blocking work queued behind it",
          "[sim][races]") {
  if (detector_off()) return;
  fixture f(cudaStreamDefault, cudaStreamNonBlocking);
  cudaStream_t blocking = nullptr;
  ok(cudaStreamCreate(&blocking));
  const auto before = expect_races(1);
  gate g;
  ok(cudaLaunchHostFunc(nullptr, gate::hold, &g));
  declared writer{f.dev, true};
  ok(cudaLaunchHostFunc(nullptr, declare_access, &writer));  // a kernel writing, behind the gate
  // A blocking stream waits for the legacy stream: ordered through the gate. (The stand-in's
  // write is checked when it runs, against the copies queued by then.)
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, blocking));
  // A non-blocking stream does not: its copy races with the held write.
  ok(cudaMemcpyAsync(f.host_in, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  g.open = true;
  ok(cudaDeviceSynchronize());
  const auto r = races_since(before, 1);
  INFO(r[0]);
  CHECK(has(r[0], "write by cudaLaunchHostFunc (declared write) on legacy default stream"));
  CHECK(has(r[0], "read by cudaMemcpyAsync (source of a device-to-host copy) on non-blocking stream"));
  ok(cudaStreamDestroy(blocking));
}

TEST_CASE("races: NCCL all-reduce reading a buffer written on an unordered stream", "[sim][races]") {
  if (detector_off()) return;
#if DEVICEKIT_CUDA_SIM_NCCL
  fixture f;
  ncclComm_t comm = nullptr;
  const int dev0 = 0;
  REQUIRE(ncclCommInitAll(&comm, 1, &dev0) == ncclSuccess);
  void* out = nullptr;
  ok(cudaMalloc(&out, bytes));
  const auto before = expect_races(1);
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  REQUIRE(ncclAllReduce(f.dev, out, bytes / sizeof(float), ncclFloat, ncclSum, comm, f.b) == ncclSuccess);
  const auto r = races_since(before, 1);
  INFO(r[0]);
  CHECK(has(r[0], "write by cudaMemcpyAsync (destination of a host-to-device copy)"));
  CHECK(has(r[0], "read by ncclAllReduce (send buffer)"));
  // In place and in stream order: no race.
  REQUIRE(ncclAllReduce(out, out, bytes / sizeof(float), ncclFloat, ncclSum, comm, f.b) == ncclSuccess);
  ok(cudaMemcpyAsync(f.host_out, out, bytes, cudaMemcpyDeviceToHost, f.b));
  ok(cudaDeviceSynchronize());
  CHECK(sim::violations().size() == before + 1);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
  ok(cudaFree(out));
#else
  WARN("the simulator was built without NCCL (no nccl.h)");
#endif
}

TEST_CASE("races: cudaMemcpy and cudaFree synchronise the host", "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = sim::violations().size();
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  std::vector<unsigned char> pageable(bytes);
  // cudaMemcpy on the legacy stream does not wait for the non-blocking stream a: a race...
  sim::expect_violations(1);
  ok(cudaMemcpy(pageable.data(), f.dev, bytes, cudaMemcpyDeviceToHost));
  races_since(before, 1);
  // ...but it returns when its copy is done, so the host is ordered after it: the next copy into
  // the memory on a is no race, and cudaFree waits for the device.
  ok(cudaStreamSynchronize(f.a));
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a));
  ok(cudaFree(f.dev));
  f.dev = nullptr;
  CHECK(sim::violations().size() == before + 1);
}

TEST_CASE("races: what one host thread waited for counts for the others (C++ orders threads, unseen)", "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = sim::violations().size();
  std::thread waits([&] {
    (void)cudaSetDevice(0);
    (void)cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a);
    (void)cudaStreamSynchronize(f.a);
  });
  waits.join();
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  ok(cudaStreamSynchronize(f.b));
  CHECK(sim::violations().size() == before);
  // A thread that queued the copy without waiting for it orders nothing.
  sim::expect_violations(1);
  std::thread queues([&] {
    (void)cudaSetDevice(0);
    (void)cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, f.a);
  });
  queues.join();
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  races_since(before, 1);
}

// A pool that hands a pinned staging buffer from one thread, which has read it, to another, which
// queues a copy into it: C++ orders the two (the pool's mutex), so the copy comes after the read.
TEST_CASE("races: what one host thread read counts as before what the others queue later", "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = sim::violations().size();
  std::thread reads([&] {
    (void)cudaSetDevice(0);
    (void)cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.a);
    (void)cudaStreamSynchronize(f.a);
    sim::device_access(f.host_out, bytes, false);  // the host unpacks what came down
  });
  reads.join();
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));  // the next transfer
  ok(cudaStreamSynchronize(f.b));
  CHECK(sim::violations().size() == before);
  // A copy queued BEFORE another thread's read still races with it.
  sim::expect_violations(1);
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, f.b));
  std::thread reads_early([&] { sim::device_access(f.host_out, bytes, false); });
  reads_early.join();
  races_since(before, 1);
  ok(cudaStreamSynchronize(f.b));
}

TEST_CASE("races: the per-thread default stream is a blocking stream", "[sim][races]") {
  if (detector_off()) return;
  fixture f;
  const auto before = sim::violations().size();
  gate g;
  ok(cudaLaunchHostFunc(nullptr, gate::hold, &g));
  ok(cudaMemcpyAsync(f.dev, f.host_in, bytes, cudaMemcpyHostToDevice, nullptr));
  ok(cudaMemcpyAsync(f.host_out, f.dev, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  g.open = true;
  ok(cudaDeviceSynchronize());
  CHECK(sim::violations().size() == before);
}
