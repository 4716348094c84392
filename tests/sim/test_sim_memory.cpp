// Device pools on simulated GPUs, where the simulator sees what a GPU would not report: streams
// used after their destruction, events recorded on another device's stream, the CUDA API each
// allocator kind calls, and the access each driver pool grants its peers.
#include <catch2/catch.hpp>

#include "../cpu/memory_test_support.hpp"
#include "sim_devicekit_support.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

// A pool polls the events it recorded for stream-ordered frees, never the streams themselves: the
// streams may be destroyed with frees pending (on a GPU, recording on a destroyed stream crashed
// the process). The simulator reports such a use as a violation, which fails the process.
TEST_CASE("a device pool outlives the streams it ordered frees on", "[sim][memory][stream]") {
  const std::size_t violations_before = sim::violations().size();  // other cases provoke some on purpose
  const int last = sim::device_count() - 1;
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(last), small_pool()};
  void* kept = nullptr;
  {
    const dk::stream s1(dk::device::cuda(last));
    const dk::stream s2(dk::device::cuda(last));
    void* a = pool.allocate(std::size_t{1} << 20, s1);
    void* b = pool.allocate(std::size_t{1} << 20, s1);
    REQUIRE(cudaMemsetAsync(a, 1, std::size_t{1} << 20, s1.native_handle()) == cudaSuccess);
    pool.deallocate(a, std::size_t{1} << 20, s1);
    pool.deallocate(b, std::size_t{1} << 20, s1);
    // Reused on s1 at once (stream order), not handed to s2 before s1's work is known done.
    kept = pool.allocate(std::size_t{1} << 20, s2);
    pool.deallocate(kept, std::size_t{1} << 20, s2);
  }  // s1 and s2 destroyed with frees pending on them
  // Another stream needs memory while those frees may still be in flight: the pool polls their
  // events only, never the dead streams.
  const dk::stream s3(dk::device::cuda(last));
  void* c = pool.allocate(std::size_t{1} << 20, s3);
  pool.deallocate(c, std::size_t{1} << 20, s3);
  pool.release_stream(s3);
  {
    dk::scoped_device on(last);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the dead streams' work is done...
  }
  (void)pool.trim();  // ...so trim takes their frees in, through the events
  CHECK(pool.stats().pending_stream_frees == 0);
  CHECK(sim::violations().size() == violations_before);
}

// An upstream whose stream handles are not CUDA streams (a test's, or a host resource with its own
// notion of streams) answers for their captures: the pool must not hand such a handle to the
// runtime, which reports it here as a violation and on a GPU crashed the process.
TEST_CASE("a pool never hands its upstream's own stream handles to CUDA", "[sim][memory][stream]") {
  const std::size_t before = sim::violations().size();
  dk_test::event_upstream up;
  dk::memory_pool<dk_test::event_upstream> pool(up, dk_test::exact_config(std::size_t{4} << 20));
  const auto s1 = dk_test::fake_stream(1);
  const auto s2 = dk_test::fake_stream(2);
  void* a = pool.allocate_async(std::size_t{1} << 20, 256, s1);
  pool.deallocate_async(a, std::size_t{1} << 20, 256, s1);
  void* b = pool.allocate_async(std::size_t{1} << 20, 256, s2);
  pool.deallocate_async(b, std::size_t{1} << 20, 256, s2);
  CHECK(up.state().capture_queries == 4);
  CHECK(sim::violations().size() == before);
}

// A query that answers cudaErrorNotReady leaves the program's last error alone: not-ready is a
// status, not an error (the GPU run of gpu.gpu_sim_rules shows it does not become the last
// error), so devicekit must not call cudaGetLastError() after it, which would swallow an error
// the program has not read yet.
TEST_CASE("polling busy streams leaves the program's pending error alone", "[sim][memory][stream]") {
  const int last = sim::device_count() - 1;
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(last), small_pool()};
  const dk::stream s1(dk::device::cuda(last));
  const dk::stream s2(dk::device::cuda(last));
  gate g;
  REQUIRE(cudaLaunchHostFunc(s1.native_handle(), gate::hold, &g) == cudaSuccess);
  void* a = pool.allocate(std::size_t{1} << 20, s1);
  pool.deallocate(a, std::size_t{1} << 20, s1);
  // The program's own failed call, whose error it has not read yet.
  REQUIRE(cudaSetDevice(sim::device_count()) == cudaErrorInvalidDevice);
  void* b = pool.allocate(std::size_t{1} << 20, s2);  // polls s1's event: not ready
  CHECK(b != a);
  CHECK_FALSE(s1.idle());  // queries s1: not ready
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  g.open = true;
  s1.synchronize();
  pool.deallocate(b, std::size_t{1} << 20, s2);
}

// A device pool creates the event for the null (legacy) stream on its own device, whatever device
// is current: an event of cuda:0 recorded on cuda:N's legacy stream is refused by CUDA.
TEST_CASE("a device pool orders null-stream frees on its own device", "[sim][multi][memory][stream]") {
  const int last = sim::device_count() - 1;
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(last), small_pool()};
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  void* a = pool.allocate_async(4096, 256, nullptr);
  pool.deallocate_async(a, 4096, 256, nullptr);
  REQUIRE(cudaSetDevice(last) == cudaSuccess);
  void* b = pool.allocate_async(8192, 256, nullptr);
  pool.deallocate_async(b, 8192, 256, nullptr);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  pool.clear();  // waits for both frees through their event
  CHECK(pool.stats().pending_stream_frees == 0);
}

// Pools made with cudaMemPoolCreate (placement's default resource, every cuda_device_resource)
// need their own access grant: cudaDeviceEnablePeerAccess does not apply to them, and a kernel on
// cuda:1 reading a tree in cuda:0's pool would fault. The first move that needs access grants it
// from every devicekit pool on the source device, and pools made later grant it at once.
TEST_CASE("devicekit pools grant peer access when a peer first needs it", "[sim][multi][memory]") {
  int can = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can, 1, 0) == cudaSuccess);
  if (can == 0) {
    WARN("cuda:1 cannot access cuda:0 in this run: nothing to grant");
    return;
  }
  const dk::device from = dk::device::cuda(0);
  dk::memory_pool<dk::cuda_device_resource> earlier{dk::cuda_device_resource(0), small_pool()};
  REQUIRE(earlier.upstream().native_pool() != nullptr);
  auto src = dk::place(ramp(4096, 3.f), from, earlier);
  auto moved = dk::place(src, dk::device::cuda(1));  // a peer copy: access enabled, and granted
  CHECK(dk::to_host(moved) == ramp(4096, 3.f));
  CHECK(pool_access(earlier.upstream(), 1) == cudaMemAccessFlagsProtReadWrite);
  const dk::memory_pool<dk::cuda_device_resource> later{dk::cuda_device_resource(0), small_pool()};
  CHECK(pool_access(later.upstream(), 1) == cudaMemAccessFlagsProtReadWrite);
  auto* placement = dynamic_cast<dk::memory_pool<dk::cuda_device_resource>*>(&dk::default_placement_resource(from));
  REQUIRE(placement != nullptr);
  CHECK(pool_access(placement->upstream(), 1) == cudaMemAccessFlagsProtReadWrite);
}

TEST_CASE("the process's device pools get peer access as a peer first needs it", "[sim][multi][registry]") {
  if (sim::device_count() < 2) return;
  const dk::device a = dk::device::cuda(0);
  const dk::device b = dk::device::cuda(1);
  // Made before any peer copy between the two: the grant comes when the copy first needs it.
  auto* pool = dynamic_cast<dk::memory_pool<dk::cuda_device_resource>*>(&dk::default_memory(b));
  REQUIRE(pool != nullptr);
  REQUIRE(pool->upstream().native_pool() != nullptr);
  const auto src = dk::place(ramp(1024, 9.f), b);
  const auto moved = dk::place(src, a);
  CHECK(dk::to_host(moved) == ramp(1024, 9.f));
  int can = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can, 0, 1) == cudaSuccess);
  if (can != 0) CHECK(pool_access(pool->upstream(), 0) == cudaMemAccessFlagsProtReadWrite);
}

// The allocator kind is chosen at run time, as jaxlib's GpuAllocatorConfig chooses it. Each kind
// must reach the driver through its own API: one failure of that API, armed in the simulator, is
// met by the pool's recovery ladder (alloc_retries), which shows the API was used.
TEST_CASE("each allocator kind allocates through its CUDA API; only pool caches", "[sim][memory][allocator]") {
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  constexpr std::size_t bytes = std::size_t{4} << 20;  // a whole growth step: no smaller retry inside grow
  struct expectation {
    dk::allocator_kind kind;
    const char* api;
    bool caches;
  };
  const expectation cases[] = {{dk::allocator_kind::pool, "cudaMallocFromPoolAsync", true},
                               {dk::allocator_kind::async, "cudaMallocAsync", false},
                               {dk::allocator_kind::platform, "cudaMalloc", false}};
  for (const auto& e : cases) {
    INFO("allocator " << dk::to_string(e.kind));
    manager dm{dk::settings{}.set_allocator(e.kind)};
    const dk::device gpu = dk::device::cuda(0);
    dk::device_memory& m = dm.memory(gpu);
    const std::size_t base = sim::device_bytes_in_use(0);
    const auto stats_before = dm.memory_stats(gpu);  // other tests' placements count too
    sim::fail_call(e.api, 1, cudaErrorMemoryAllocation);
    void* p = m.allocate(bytes);
    REQUIRE(p != nullptr);
    CHECK(m.stats().alloc_retries == 1u);  // the armed failure hit this kind's API
    CHECK(sim::device_bytes_in_use(0) >= base + bytes);
    m.deallocate(p, bytes);
    if (e.caches) {
      CHECK(sim::device_bytes_in_use(0) >= base + bytes);  // kept for the next allocation
    } else {
      CHECK(m.stats().reserved_bytes == 0u);  // handed back to the driver at the free
      // cudaMalloc memory goes back to the device; cudaFreeAsync memory to the device's default
      // pool, which keeps it up to its release threshold (CUDA runtime API, cudaMemPoolAttrReleaseThreshold).
      if (e.kind == dk::allocator_kind::platform) CHECK(sim::device_bytes_in_use(0) == base);
    }
    CHECK(dm.memory_stats(gpu).num_allocs == stats_before.num_allocs + 1);
    CHECK(m.stats().largest_allocation_bytes == bytes);
    CHECK(dm.memory_stats(gpu).largest_alloc_size >= bytes);
  }
}

TEST_CASE("the collective reserve is kept out of what a GPU's pool may take", "[sim][memory][allocator]") {
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  const dk::device gpu = dk::device::cuda(0);
  manager plain{dk::settings{}};
  const std::uint64_t total = plain.budget(gpu).total_bytes;
  const std::uint64_t reserve = plain.budget(gpu).budget_bytes - (std::uint64_t{64} << 20);  // leaves 64 MiB
  manager dm{dk::settings{}.set_collective_memory_size(reserve).set_allocator(dk::allocator_kind::platform)};
  CHECK(dm.budget(gpu).budget_bytes == std::uint64_t{64} << 20);
  CHECK(dm.memory_stats(gpu).bytes_limit == std::uint64_t{64} << 20);
  dk::device_memory& m = dm.memory(gpu);
  CHECK(m.stats().max_size == std::uint64_t{64} << 20);
  void* p = m.allocate(std::size_t{48} << 20);
  CHECK_THROWS_AS(m.allocate(std::size_t{32} << 20), dk::out_of_memory);  // would pass the reduced budget
  m.deallocate(p, std::size_t{48} << 20);

  CHECK_THROWS_WITH(manager{dk::settings{}.set_collective_memory_size(total + 1)},
                    Catch::Contains("collective_memory_size") && Catch::Contains("cuda:0"));
}

TEST_CASE("memory_stats and live_buffers see the default placement pool", "[sim][memory][stats]") {
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  manager dm{dk::settings{}};
  const dk::device gpu = dk::device::cuda(0);
  const auto before = dm.memory_stats(gpu);
  const std::size_t live_before = dm.live_buffers(gpu).size();
  {
    const auto placed = dk::place(ramp(1 << 16, 0.0f), gpu);  // the process's default pool, not dm's
    const auto during = dm.memory_stats(gpu);
    CHECK(during.bytes_in_use >= before.bytes_in_use + (std::size_t{1} << 16) * sizeof(float));
    CHECK(during.num_allocs > before.num_allocs);
    CHECK(dm.live_buffers(gpu).size() == live_before + 1);
  }
  CHECK(dm.memory_stats(gpu).bytes_in_use == before.bytes_in_use);
  CHECK(dm.live_buffers(gpu).size() == live_before);
}
