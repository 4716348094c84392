// Device-wide calls on simulated GPUs (core/device_ops.hpp): synchronize and is_idle over the
// streams of a device, peer access as the devices' topology allows it, device_mismatch's fields,
// and the contexts a thread creates.
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

// scoped_device restores nothing on a thread that never chose a device: restoring device 0 would
// create a context on GPU 0 (hundreds of MB) in every MPI rank and worker thread that uses
// another GPU. Run alone in its process (tests/CMakeLists.txt): nothing else may touch cuda:0.
TEST_CASE("a thread that works on cuda:1 only creates no context on cuda:0", "[sim][multi][contexts]") {
  std::thread t([] {
    const dk::device gpu = dk::device::cuda(1);
    const dk::stream s(gpu);
    dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(1), small_pool()};
    void* p = pool.allocate(4096, s);
    pool.deallocate(p, 4096, s);
    auto placed = dk::place(ramp(1024, 1.f), gpu, s);
    s.synchronize();
    CHECK(dk::to_host(placed) == ramp(1024, 1.f));
  });
  t.join();
  CHECK(sim::contexts_created(1) == 1);
  CHECK(sim::contexts_created(0) == 0);
}

TEST_CASE("synchronize(device) waits for every stream of the device and keeps the current device",
          "[sim][device_ops]") {
  const int last = sim::device_count() - 1;
  const dk::device gpu = dk::device::cuda(last);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const cudaStream_t foreign = foreign_stream_on(last);
  const dk::stream own(gpu);
  gate g;
  std::atomic<int> foreign_done{0};
  std::atomic<int> own_done{0};
  REQUIRE(cudaLaunchHostFunc(foreign, gate::hold, &g) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(foreign, set_flag, &foreign_done) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(own.native_handle(), gate::hold, &g) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(own.native_handle(), set_flag, &own_done) == cudaSuccess);
  std::thread opener([&g] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    g.open = true;
  });
  dk::synchronize(gpu);
  CHECK(foreign_done.load() == 1);  // a stream devicekit never saw is waited for too
  CHECK(own_done.load() == 1);
  opener.join();
  CHECK(current_device() == 0);
  CHECK(cudaStreamDestroy(foreign) == cudaSuccess);
  CHECK_NOTHROW(dk::synchronize(dk::device::cpu()));
  CHECK_THROWS_AS(dk::synchronize(dk::device::cuda(last + 1)), dk::config_error);
}

TEST_CASE("is_idle(device) sees devicekit's streams and the device's default streams", "[sim][device_ops]") {
  const int last = sim::device_count() - 1;
  const dk::device gpu = dk::device::cuda(last);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  dk::synchronize(dk::device::cuda(0));
  dk::synchronize(gpu);
  CHECK(dk::is_idle(gpu));
  {  // a devicekit stream of the device
    const dk::stream s(gpu);
    gate g;
    REQUIRE(cudaLaunchHostFunc(s.native_handle(), gate::hold, &g) == cudaSuccess);
    CHECK_FALSE(dk::is_idle(gpu));
    if (last > 0) CHECK(dk::is_idle(dk::device::cuda(0)));  // another device's work is not this one's
    g.open = true;
    s.synchronize();
    CHECK(dk::is_idle(gpu));
  }
  for (const cudaStream_t default_stream : {cudaStreamLegacy, cudaStreamPerThread}) {
    INFO((default_stream == cudaStreamLegacy ? "the legacy default stream" : "the per-thread default stream"));
    gate g;
    {
      const dk::scoped_device on(last);
      REQUIRE(cudaLaunchHostFunc(default_stream, gate::hold, &g) == cudaSuccess);
    }
    CHECK_FALSE(dk::is_idle(gpu));
    g.open = true;
    dk::synchronize(gpu);
    CHECK(dk::is_idle(gpu));
  }
  {  // what it cannot see (docs/placement.md): a stream made outside devicekit; synchronize still waits for it
    const cudaStream_t foreign = foreign_stream_on(last);
    gate g;
    std::atomic<int> done{0};
    REQUIRE(cudaLaunchHostFunc(foreign, gate::hold, &g) == cudaSuccess);
    REQUIRE(cudaLaunchHostFunc(foreign, set_flag, &done) == cudaSuccess);
    CHECK(dk::is_idle(gpu));
    g.open = true;
    dk::synchronize(gpu);
    CHECK(done.load() == 1);
    CHECK(cudaStreamDestroy(foreign) == cudaSuccess);
  }
  CHECK(current_device() == 0);
  CHECK(dk::is_idle(dk::device::cpu()));
  CHECK_THROWS_WITH((void)dk::is_idle(dk::device::cuda(last + 1)),
                    Catch::Contains("cuda:" + std::to_string(last + 1) + " does not exist: this process sees " +
                                    std::to_string(last + 1) + " CUDA device"));
}

// With DEVICEKIT_SIM_PEER=none (sim.devicekit.gpus2_no_peer) the pair has no peer support: the
// public call says so, and devicekit's own copies between the two still work, through the host.
TEST_CASE("can_access_peer and enable_peer_access follow the devices' peer topology",
          "[sim][multi][device_ops][peer]") {
  const int n = sim::device_count();
  const dk::device a = dk::device::cuda(0);
  const dk::device b = dk::device::cuda(1);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(dk::can_access_peer(a, a));
  CHECK_NOTHROW(dk::enable_peer_access(b, b));
  CHECK_THROWS_WITH((void)dk::can_access_peer(a, dk::device::cuda(n)),
                    Catch::Contains("cuda:" + std::to_string(n) + " does not exist: this process sees " +
                                    std::to_string(n) + " CUDA devices, cuda:0 to cuda:" + std::to_string(n - 1)));
  CHECK_THROWS_AS(dk::enable_peer_access(dk::device::cpu(), b), dk::config_error);

  int can = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can, 0, 1) == cudaSuccess);
  CHECK(dk::can_access_peer(a, b) == (can != 0));
  dk::memory_pool<dk::cuda_device_resource> earlier{dk::cuda_device_resource(1), small_pool()};
  REQUIRE(earlier.upstream().native_pool() != nullptr);
  if (can == 0) {
    CHECK_THROWS_AS(dk::enable_peer_access(a, b), dk::config_error);
    CHECK_THROWS_WITH(
        dk::enable_peer_access(a, b),
        Catch::Contains("cuda:0 cannot access the memory of cuda:1 directly") && Catch::Contains("can_access_peer"));
    CHECK(pool_access(earlier.upstream(), 0) == cudaMemAccessFlagsProtNone);
    const auto src = dk::place(ramp(4096, 1.f), b);
    const auto moved = dk::place(src, a);  // staged through the host
    CHECK(dk::to_host(moved) == ramp(4096, 1.f));
    CHECK(current_device() == 0);
    return;
  }
  dk::enable_peer_access(a, b);
  CHECK_NOTHROW(dk::enable_peer_access(a, b));  // idempotent
  {  // CUDA's part is done: enabling it directly again is refused as already enabled
    const dk::scoped_device on(0);
    CHECK(cudaDeviceEnablePeerAccess(1, 0) == cudaErrorPeerAccessAlreadyEnabled);
    (void)cudaGetLastError();
  }
  // devicekit's part: its driver pools on cuda:1, made before and after, give cuda:0 access.
  CHECK(pool_access(earlier.upstream(), 0) == cudaMemAccessFlagsProtReadWrite);
  const dk::memory_pool<dk::cuda_device_resource> later{dk::cuda_device_resource(1), small_pool()};
  CHECK(pool_access(later.upstream(), 0) == cudaMemAccessFlagsProtReadWrite);

  // The program enabled CUDA's part itself first: devicekit's call still succeeds and grants its
  // pools. (1, 0) with two devices, (3, 2) with four.
  const int x = n - 1;
  const int y = n - 2;
  int can_xy = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can_xy, x, y) == cudaSuccess);
  if (can_xy != 0) {
    {
      const dk::scoped_device on(x);
      const cudaError_t r = cudaDeviceEnablePeerAccess(y, 0);
      CHECK((r == cudaSuccess || r == cudaErrorPeerAccessAlreadyEnabled));
      (void)cudaGetLastError();
    }
    const dk::memory_pool<dk::cuda_device_resource> on_y{dk::cuda_device_resource(y), small_pool()};
    CHECK_NOTHROW(dk::enable_peer_access(dk::device::cuda(x), dk::device::cuda(y)));
    CHECK(pool_access(on_y.upstream(), x) == cudaMemAccessFlagsProtReadWrite);
  }
  CHECK(current_device() == 0);
}

// Peer access enabled before the process has made any devicekit driver pool: the pools made
// after must still grant it (the pool registry hears of earlier enables when it starts listening).
// Hidden: it needs a process in which no pool exists yet; sim.device_ops.peer_access_before_any_pool
// runs it alone.
TEST_CASE("peer access enabled before any driver pool exists reaches the pools made after",
          "[sim][.peer_before_pools]") {
  REQUIRE(sim::device_count() >= 2);
  int can = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can, 0, 1) == cudaSuccess);
  REQUIRE(can != 0);  // the simulator's default machine: every pair of its GPUs is peer-capable
  dk::enable_peer_access(dk::device::cuda(0), dk::device::cuda(1));
  const dk::memory_pool<dk::cuda_device_resource> first{dk::cuda_device_resource(1), small_pool()};
  CHECK(pool_access(first.upstream(), 0) == cudaMemAccessFlagsProtReadWrite);
  dk::enable_peer_access(dk::device::cuda(1), dk::device::cuda(0));  // after: as before
  const dk::memory_pool<dk::cuda_device_resource> on_0{dk::cuda_device_resource(0), small_pool()};
  CHECK(pool_access(on_0.upstream(), 1) == cudaMemAccessFlagsProtReadWrite);
  CHECK(current_device() == 0);
}

TEST_CASE("device_mismatch carries the devices as values on GPUs", "[sim][mismatch]") {
  const int last = sim::device_count() - 1;
  const dk::device gpu = dk::device::cuda(last);
  const dk::stream s(gpu);
  // A GPU's stream for a host placement: expected the target (the host), actual the stream's device.
  const auto host_target = mismatch_of([&] { (void)dk::place(ramp(16, 0.f), dk::device::cpu(), s); });
  REQUIRE(host_target.has_value());
  CHECK(host_target->expected() == dk::device::cpu());
  CHECK(host_target->actual() == gpu);
  if (last == 0) return;
  // Two GPUs: a stream of one for the other, and trees placed on both.
  const auto wrong_stream = mismatch_of([&] { (void)dk::place(ramp(16, 0.f), dk::device::cuda(0), s); });
  REQUIRE(wrong_stream.has_value());
  CHECK(wrong_stream->expected() == dk::device::cuda(0));
  CHECK(wrong_stream->actual() == gpu);
  const auto t0 = dk::place(ramp(16, 0.f), dk::device::cuda(0));
  const auto t1 = dk::place(ramp(16, 1.f), gpu);
  const auto trees = mismatch_of([&] { (void)dk::same_device(t0, t1); });
  REQUIRE(trees.has_value());
  CHECK(trees->expected() == dk::device::cuda(0));
  CHECK(trees->actual() == gpu);
  CHECK_THAT(trees->what(),
             Catch::Contains("tree 1 is on cuda:0") && Catch::Contains("tree 2 is on cuda:" + std::to_string(last)));
}
