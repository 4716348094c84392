// The simulator's own rules (sim/README.md), each against what the CUDA runtime documents. Run
// by CTest with DEVICEKIT_SIM_GPUS = 1, 2 and 4; cases tagged [multi] need two devices and are
// filtered out of the one-device run. The same file, linked against the real runtime
// (real_control.cpp), runs on a GPU without the [sim_only] cases: a rule that differs there is
// a bug in the simulator or in this file.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>

#include "sim_test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sim = devicekit::cuda_sim;

namespace {

using sim_test::gate;
using sim_test::ok;
using sim_test::pinned_host;
using sim_test::scoped;
using sim_test::scoped_device_memory;
using sim_test::scoped_event;
using sim_test::scoped_stream;
using sim_test::set_flag;

/// A pool of pinned device memory on `device` (cudaMemPoolCreate); the case destroys it.
cudaMemPool_t make_pool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  ok(cudaMemPoolCreate(&pool, &props));
  return pool;
}

/// Runs `release`, which must report one violation: by `api`, of the rule that a pinned host
/// range stays allocated and pinned while a queued copy uses it.
template <class F>
void expect_host_range_violation(const char* api, F release) {
  sim::expect_violations(1);
  const auto before = sim::violations().size();
  release();
  const auto v = sim::violations();
  REQUIRE(v.size() == before + 1);
  CHECK(v.back().find(api) == 0);
  CHECK(v.back().find("a host buffer freed while a queued copy still uses it") != std::string::npos);
}

/// The device count the test was started with (DEVICEKIT_SIM_GPUS), or -1 when it is unset (a
/// real GPU run: any count).
int expected_gpus() {
  const char* v = std::getenv("DEVICEKIT_SIM_GPUS");
  return v != nullptr ? std::atoi(v) : -1;
}

}  // namespace

TEST_CASE("devices, properties and attributes come from the configuration", "[sim]") {
  int n = 0;
  ok(cudaGetDeviceCount(&n));
  if (expected_gpus() >= 0) CHECK(n == expected_gpus());
  CHECK(sim::device_count() == n);
  cudaDeviceProp p{};
  ok(cudaGetDeviceProperties(&p, 0));
  CHECK(std::string(p.name).find("NVIDIA") == 0);
  CHECK(p.major == 9);
  int sms = 0;
  ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(sms == p.multiProcessorCount);
  CHECK(cudaGetDeviceProperties(&p, n) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);  // the failure is the last error...
  CHECK(cudaGetLastError() == cudaSuccess);             // ...until it has been read
}

TEST_CASE("queued work runs later, in stream order, never inline", "[sim]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  gate g;
  std::atomic<int> flag{0};
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaLaunchHostFunc(s, set_flag, &flag));
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaSuccess);  // not-ready is a status, not an error
  CHECK(flag.load() == 0);                   // behind the held operation
  g.open = true;
  ok(cudaStreamSynchronize(s));
  CHECK(flag.load() == 1);
}

TEST_CASE("copies: pageable sources are staged at the call, pageable destinations wait", "[sim]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto d = scoped_device_memory(64);
  gate g;
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  std::vector<unsigned char> src(64, 7);
  ok(cudaMemcpyAsync(d, src.data(), 64, cudaMemcpyHostToDevice, s));
  std::fill(src.begin(), src.end(), 9);  // allowed: the source was staged at the call
  g.open = true;
  std::vector<unsigned char> back(64, 0);
  ok(cudaMemcpyAsync(back.data(), d, 64, cudaMemcpyDeviceToHost, s));  // returns when done
  CHECK(back[0] == 7);
  CHECK(back[63] == 7);
}

TEST_CASE("new memory is poisoned, freed memory is poisoned and its use is a violation", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  void* d = nullptr;
  ok(cudaMalloc(&d, 16));
  unsigned char b[16] = {};
  ok(cudaMemcpy(b, d, 16, cudaMemcpyDeviceToHost));
  CHECK(b[0] == 0xA5);  // never written: garbage, not zeros
  ok(cudaFree(d));
  sim::expect_violations(2);
  const auto before = sim::violations().size();
  CHECK(cudaMemcpy(b, d, 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaFree(d) == cudaErrorInvalidValue);  // freed twice
  (void)cudaGetLastError();
  const auto v = sim::violations();
  REQUIRE(v.size() == before + 2);
  CHECK(v[before].find("after it was freed") != std::string::npos);
  CHECK(v[before + 1].find("freed twice") != std::string::npos);
}

TEST_CASE("a destroyed stream or event is a violation; their queued work still completes", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  cudaStream_t s = nullptr;
  ok(cudaStreamCreate(&s));
  std::atomic<int> flag{0};
  gate g;
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaLaunchHostFunc(s, set_flag, &flag));
  ok(cudaStreamDestroy(s));  // returns at once
  cudaEvent_t ev = nullptr;
  ok(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  ok(cudaEventDestroy(ev));
  sim::expect_violations(2);
  CHECK(cudaEventRecord(ev, nullptr) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamQuery(s) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  g.open = true;
  ok(cudaDeviceSynchronize());
  CHECK(flag.load() == 1);
}

TEST_CASE("the legacy default stream orders blocking streams, not non-blocking ones", "[sim]") {
  // Device work (memsets) on the two streams, not host functions: CUDA may run the host functions
  // of independent streams one after another on one thread (cudaLaunchHostFunc: "may be
  // serialized"), as an H100 does: a host function on the non-blocking stream can wait for the
  // held one on the legacy stream.
  ok(cudaSetDevice(0));
  auto blocking = scoped_stream(cudaStreamDefault);
  auto nonblocking = scoped_stream(cudaStreamNonBlocking);
  auto d = scoped_device_memory(2048);
  gate g;
  ok(cudaLaunchHostFunc(nullptr, gate::hold, &g));  // work on the legacy stream, held
  const auto t0 = std::chrono::steady_clock::now();
  ok(cudaMemsetAsync(d, 1, 1024, nonblocking));
  ok(cudaStreamSynchronize(nonblocking));  // not held by the legacy stream
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  ok(cudaMemsetAsync(static_cast<char*>(d.get()) + 1024, 2, 1024, blocking));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(cudaStreamQuery(blocking) == cudaErrorNotReady);  // waits for the legacy stream's earlier work
  g.open = true;
  ok(cudaStreamSynchronize(blocking));
  unsigned char h[2048] = {};
  ok(cudaMemcpy(h, d, 2048, cudaMemcpyDeviceToHost));
  CHECK(h[0] == 1);
  CHECK(h[2047] == 2);
}

TEST_CASE("events: complete once their stream reaches them; never recorded means complete", "[sim]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto ev = scoped_event(cudaEventDisableTiming);
  CHECK(cudaEventQuery(ev) == cudaSuccess);
  gate g;
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaEventRecord(ev, s));
  CHECK(cudaEventQuery(ev) == cudaErrorNotReady);
  g.open = true;
  ok(cudaEventSynchronize(ev));
  CHECK(cudaEventQuery(ev) == cudaSuccess);
}

TEST_CASE("stream-ordered allocation: memory is released when the stream reaches the free", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  cudaMemPool_t pool = make_pool(0);
  std::uint64_t keep = 1 << 20;
  ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  std::uint64_t read = 0;
  ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &read));
  CHECK(read == keep);
  const std::size_t base = sim::device_bytes_in_use(0);
  void* p = nullptr;
  ok(cudaMallocFromPoolAsync(&p, 4096, pool, s));
  CHECK(sim::device_bytes_in_use(0) == base + 4096);
  gate g;
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaFreeAsync(p, s));
  CHECK(sim::device_bytes_in_use(0) == base + 4096);  // the stream has not reached the free
  g.open = true;
  ok(cudaStreamSynchronize(s));
  CHECK(sim::device_bytes_in_use(0) == base);
  sim::expect_violations(1);
  CHECK(cudaFreeAsync(p, s) == cudaErrorInvalidValue);  // freed twice
  (void)cudaGetLastError();
  ok(cudaMemPoolDestroy(pool));
}

TEST_CASE("memory info, out of memory, pinned and registered host memory", "[sim]") {
  ok(cudaSetDevice(0));
  std::size_t free_before = 0;
  std::size_t total = 0;
  ok(cudaMemGetInfo(&free_before, &total));
  void* d = nullptr;
  ok(cudaMalloc(&d, 1 << 20));
  std::size_t free_after = 0;
  ok(cudaMemGetInfo(&free_after, &total));
  CHECK(free_before - free_after >= (1u << 20));  // a GPU may round up to its page size
  void* too_much = nullptr;
  CHECK(cudaMalloc(&too_much, total) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  ok(cudaFree(d));
  void* h = nullptr;
  ok(cudaMallocHost(&h, 4096));
  cudaPointerAttributes a{};
  ok(cudaPointerGetAttributes(&a, h));
  CHECK(a.type == cudaMemoryTypeHost);
  ok(cudaFreeHost(h));
  std::vector<char> plain(4096);
  ok(cudaPointerGetAttributes(&a, plain.data()));
  CHECK(a.type == cudaMemoryTypeUnregistered);
  ok(cudaHostRegister(plain.data(), plain.size(), cudaHostRegisterDefault));
  ok(cudaPointerGetAttributes(&a, plain.data()));
  CHECK(a.type == cudaMemoryTypeHost);
  ok(cudaHostUnregister(plain.data()));
  CHECK(cudaHostUnregister(plain.data()) == cudaErrorHostMemoryNotRegistered);
  (void)cudaGetLastError();
}

// Guards the rule of cudaFreeHost: a pinned buffer that a queued cudaMemcpyAsync still reads is
// freed; the simulator reports it (and keeps the memory until the copy is done).
TEST_CASE("cudaFreeHost while a queued copy still reads the buffer is a violation", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto d = scoped_device_memory(256);
  void* h = pinned_host(256, 7);
  gate g;
  ok(cudaLaunchHostFunc(s, gate::hold, &g));  // the copy below is surely still queued
  ok(cudaMemcpyAsync(d, h, 256, cudaMemcpyHostToDevice, s));
  // cudaFreeHost returns (waiting for the held stream would block for ever).
  expect_host_range_violation("cudaFreeHost", [&] { ok(cudaFreeHost(h)); });
  g.open = true;
  ok(cudaStreamSynchronize(s));  // the copy still ran, on memory the simulator kept for it
}

// Guards the same rule for cudaHostUnregister: registered memory that a queued copy still writes
// is unpinned.
TEST_CASE("cudaHostUnregister while a queued copy still writes the buffer is a violation", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto d = scoped_device_memory(4096);
  ok(cudaMemset(d, 5, 4096));
  ok(cudaDeviceSynchronize());
  std::vector<unsigned char> buf(4096, 0);
  ok(cudaHostRegister(buf.data(), buf.size(), cudaHostRegisterDefault));
  gate g;
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaMemcpyAsync(buf.data(), d, buf.size(), cudaMemcpyDeviceToHost, s));  // pinned: returns at once
  expect_host_range_violation("cudaHostUnregister", [&] { ok(cudaHostUnregister(buf.data())); });
  g.open = true;
  ok(cudaStreamSynchronize(s));  // `buf` outlives the copy: the test stays memory-safe
  CHECK(buf[4095] == 5);
}

// Guards against false positives: releasing pinned or registered memory once its copies are
// complete is the correct use.
TEST_CASE("freeing or unregistering host memory after its copies are synchronized is no violation", "[sim]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto d = scoped_device_memory(256);
  void* h = pinned_host(256, 3);
  std::vector<unsigned char> reg(256, 0);
  ok(cudaHostRegister(reg.data(), reg.size(), cudaHostRegisterDefault));
  const auto before = sim::violations().size();
  gate g;
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaMemcpyAsync(d, h, 256, cudaMemcpyHostToDevice, s));
  ok(cudaMemcpyAsync(reg.data(), d, 256, cudaMemcpyDeviceToHost, s));
  g.open = true;
  ok(cudaStreamSynchronize(s));
  ok(cudaFreeHost(h));
  ok(cudaHostUnregister(reg.data()));
  CHECK(sim::violations().size() == before);
  CHECK(reg[0] == 3);
}

TEST_CASE("cudaEventBlockingSync events, alone and with cudaEventDisableTiming, record and synchronize", "[sim]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  auto a = scoped_event(cudaEventBlockingSync);
  auto b = scoped_event(cudaEventBlockingSync | cudaEventDisableTiming);
  gate g;
  ok(cudaLaunchHostFunc(s, gate::hold, &g));
  ok(cudaEventRecord(a, s));
  ok(cudaEventRecord(b, s));
  CHECK(cudaEventQuery(b) == cudaErrorNotReady);
  g.open = true;
  ok(cudaEventSynchronize(a));
  ok(cudaEventSynchronize(b));
  CHECK(cudaEventQuery(b) == cudaSuccess);
}

// Guards spinning_host_waits(): what it counts (and what not), so that tests of devicekit can
// rely on it to show that a wait blocks rather than spins.
TEST_CASE("spinning host waits: synchronize calls, and event waits without cudaEventBlockingSync", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  auto s = scoped_stream();
  const std::size_t n0 = sim::spinning_host_waits();
  ok(cudaStreamSynchronize(s));
  CHECK(sim::spinning_host_waits() == n0 + 1);
  ok(cudaDeviceSynchronize());
  CHECK(sim::spinning_host_waits() == n0 + 2);
  cudaEvent_t spin = nullptr;
  cudaEvent_t block = nullptr;
  cudaEvent_t block_untimed = nullptr;
  ok(cudaEventCreateWithFlags(&spin, cudaEventDisableTiming));
  ok(cudaEventCreateWithFlags(&block, cudaEventBlockingSync));
  ok(cudaEventCreateWithFlags(&block_untimed, cudaEventBlockingSync | cudaEventDisableTiming));
  for (cudaEvent_t e : {spin, block, block_untimed}) ok(cudaEventRecord(e, s));
  for (cudaEvent_t e : {spin, block, block_untimed}) ok(cudaEventSynchronize(e));
  CHECK(sim::spinning_host_waits() == n0 + 3);  // only the event without cudaEventBlockingSync
  CHECK(cudaStreamQuery(s) == cudaSuccess);     // queries do not wait
  CHECK(cudaEventQuery(spin) == cudaSuccess);
  CHECK(sim::spinning_host_waits() == n0 + 3);
  // Flags cudaEventCreateWithFlags does not document, and cudaEventInterprocess without
  // cudaEventDisableTiming, are refused.
  cudaEvent_t bad = nullptr;
  CHECK(cudaEventCreateWithFlags(&bad, 0x80u) == cudaErrorInvalidValue);
  CHECK(cudaEventCreateWithFlags(&bad, cudaEventInterprocess) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  for (cudaEvent_t e : {spin, block, block_untimed}) ok(cudaEventDestroy(e));
}

TEST_CASE("fault injection: the n-th call of an API fails with the given error", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  sim::fail_call("cudaMalloc", 2, cudaErrorMemoryAllocation);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  ok(cudaMalloc(&a, 256));
  CHECK(cudaMalloc(&b, 256) == cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  ok(cudaMalloc(&c, 256));
  ok(cudaFree(a));
  ok(cudaFree(c));
}

TEST_CASE("fault injection: a failure that could never fire is refused, and nothing is armed", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  // A typo, a function that forwards to another (counted under that one's name), a name of the
  // control API, a call already made, and cudaSuccess (no failure at all).
  const auto refusal = [](const std::string& api, int nth, cudaError_t error) -> std::string {
    try {
      sim::fail_call(api, nth, error);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(refusal("cudaMallc", 1, cudaErrorMemoryAllocation),
             Catch::StartsWith("devicekit::cuda_sim::fail_call(\"cudaMallc\", 1, 2): 'cudaMallc' is not a function "
                               "whose calls the simulator counts - did you mean cudaMalloc?"));
  CHECK_THAT(refusal("cudaEventCreate", 1, cudaErrorMemoryAllocation),
             Catch::Contains("did you mean cudaEventCreateWithFlags?"));
  CHECK_THAT(refusal("device_count", 1, cudaErrorUnknown), Catch::Contains("sim/README.md, \"Fault injection\""));
  CHECK_THAT(refusal("cudaMalloc", 0, cudaErrorMemoryAllocation), Catch::Contains("nth counts from 1"));
  CHECK_THAT(refusal("cudaMalloc", 1, cudaSuccess), Catch::Contains("cudaSuccess is no failure"));
  const auto p = scoped_device_memory(256);  // nothing was armed: the next call succeeds
  CHECK(p.get() != nullptr);
}

TEST_CASE("call counts: every runtime call is counted by name; the control API is not", "[sim][sim_only]") {
  ok(cudaSetDevice(0));
  const std::size_t records = sim::api_calls("cudaEventRecord");
  const std::size_t total = sim::api_calls_total();
  (void)sim::graph_launches();
  (void)sim::api_calls("cudaMalloc");
  CHECK(sim::api_calls_total() == total);  // control calls leave the total alone
  cudaEvent_t ev = nullptr;
  ok(cudaEventCreate(&ev));
  ok(cudaEventRecord(ev, nullptr));
  ok(cudaEventRecord(ev, nullptr));
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice);  // a refused call counts too
  (void)cudaGetLastError();                            // reads the thread's error: not counted
  ok(cudaEventDestroy(ev));
  CHECK(sim::api_calls("cudaEventRecord") == records + 2);
  CHECK(sim::api_calls_total() == total + 5);
  CHECK(sim::api_calls("cudaNoSuchFunction") == 0);
}

TEST_CASE("driver entry points: cuDeviceGetName agrees with the runtime; an unknown symbol is not found", "[sim]") {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  ok(cudaGetDriverEntryPointByVersion("cuDeviceGetName", &fn, 12000, cudaEnableDefault, &status));
  REQUIRE(status == cudaDriverEntryPointSuccess);
  char name[64] = {};
  CHECK(reinterpret_cast<int (*)(char*, int, int)>(fn)(name, 64, 0) == 0);
  // The name the runtime reports (the simulator's GPUs are H100s; a real GPU names itself).
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0));
  CHECK(std::string(name) == prop.name);
  CHECK_FALSE(std::string(name).empty());
  ok(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 12000, cudaEnableDefault, &status));
  CHECK(status == cudaDriverEntryPointSymbolNotFound);
}

TEST_CASE("contexts: a thread that uses only cuda:1 creates none on cuda:0", "[sim][multi][contexts][sim_only]") {
  // Run alone in its process (tests/CMakeLists.txt), so that no other case has touched cuda:0.
  std::thread t([] {
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, 256) == cudaSuccess);
    REQUIRE(cudaFree(p) == cudaSuccess);
  });
  t.join();
  CHECK(sim::contexts_created(1) == 1);
  CHECK(sim::contexts_created(0) == 0);
}

TEST_CASE("streams and events belong to a device; waits cross devices", "[sim][multi]") {
  ok(cudaSetDevice(0));
  cudaStream_t s0 = nullptr;
  ok(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  cudaEvent_t e0 = nullptr;
  ok(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
  ok(cudaSetDevice(1));
  cudaStream_t s1 = nullptr;
  ok(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  int dev = -1;
  ok(cudaStreamGetDevice(s1, &dev));
  CHECK(dev == 1);
  CHECK(cudaEventRecord(e0, s1) == cudaErrorInvalidResourceHandle);  // event of cuda:0, stream of cuda:1
  (void)cudaGetLastError();
  gate g;
  std::atomic<int> flag{0};
  ok(cudaLaunchHostFunc(s0, gate::hold, &g));
  ok(cudaEventRecord(e0, s0));
  ok(cudaStreamWaitEvent(s1, e0, 0));  // cuda:1 waits for cuda:0's event
  ok(cudaLaunchHostFunc(s1, set_flag, &flag));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(flag.load() == 0);
  g.open = true;
  ok(cudaStreamSynchronize(s1));
  CHECK(flag.load() == 1);
  ok(cudaStreamDestroy(s1));
  ok(cudaSetDevice(0));
  ok(cudaStreamDestroy(s0));
  ok(cudaEventDestroy(e0));
}

TEST_CASE("peer access: enabled once, then already enabled", "[sim][multi]") {
  int can = 0;
  ok(cudaDeviceCanAccessPeer(&can, 0, 1));
  CHECK(can == 1);
  ok(cudaDeviceCanAccessPeer(&can, 0, 0));
  CHECK(can == 0);
  ok(cudaSetDevice(0));
  ok(cudaDeviceEnablePeerAccess(1, 0));
  CHECK(cudaDeviceEnablePeerAccess(1, 0) == cudaErrorPeerAccessAlreadyEnabled);
  (void)cudaGetLastError();
  void* a = nullptr;
  void* b = nullptr;
  ok(cudaMalloc(&a, 64));
  ok(cudaSetDevice(1));
  ok(cudaMalloc(&b, 64));
  ok(cudaMemset(a, 3, 64));
  ok(cudaMemcpyPeerAsync(b, 1, a, 0, 64, nullptr));
  unsigned char h[64] = {};
  ok(cudaMemcpy(h, b, 64, cudaMemcpyDeviceToHost));
  CHECK(h[10] == 3);
  ok(cudaFree(b));
  ok(cudaSetDevice(0));
  ok(cudaFree(a));
}

// A created pool's memory is reachable from its own device only until the pool grants access;
// peer access between the devices does not extend to it (CUDA programming guide, "Stream Ordered
// Memory Allocator", device accessibility for multi-GPU support).
TEST_CASE("pool access: only the owner until cudaMemPoolSetAccess", "[sim][multi]") {
  int can = 0;
  ok(cudaDeviceCanAccessPeer(&can, 1, 0));
  if (can == 0) {
    WARN("cuda:1 cannot access cuda:0 here: nothing to grant");
    return;
  }
  ok(cudaSetDevice(0));
  cudaMemPool_t pool = make_pool(0);
  const cudaError_t enabled = cudaDeviceEnablePeerAccess(1, 0);
  CHECK((enabled == cudaSuccess || enabled == cudaErrorPeerAccessAlreadyEnabled));
  (void)cudaGetLastError();
  cudaMemLocation owner{};
  owner.type = cudaMemLocationTypeDevice;
  owner.id = 0;
  cudaMemLocation peer = owner;
  peer.id = 1;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  ok(cudaMemPoolGetAccess(&flags, pool, &owner));
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
  ok(cudaMemPoolGetAccess(&flags, pool, &peer));
  CHECK(flags == cudaMemAccessFlagsProtNone);
  cudaMemAccessDesc desc{};
  desc.location = peer;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  ok(cudaMemPoolSetAccess(pool, &desc, 1));
  ok(cudaMemPoolGetAccess(&flags, pool, &peer));
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
  ok(cudaMemPoolDestroy(pool));
}

// Hidden (run only by its own CTest entry): a violation nobody declared must fail the process even
// though every assertion passed.
TEST_CASE("an undeclared violation fails the process", "[.][unexpected_violation][sim_only]") {
  cudaStream_t s = nullptr;
  ok(cudaStreamCreate(&s));
  ok(cudaStreamDestroy(s));
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
}
