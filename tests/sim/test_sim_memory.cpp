// Device pools on simulated GPUs, where the simulator sees what a GPU would not report: streams
// used after their destruction, events recorded on another device's stream, the CUDA API each
// allocator kind calls, and the access each driver pool grants its peers.
#include <catch2/catch.hpp>

#include "../cpu/memory_test_support.hpp"
#include "sim_devicekit_support.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
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
  // ...but nothing recorded an event for their frees (none was needed while the pool could grow):
  // trim, which never blocks, leaves them, and clear takes them in through the fence.
  (void)pool.trim();
  pool.clear();
  CHECK(pool.stats().pending_stream_frees == 0);
  CHECK(sim::violations().size() == violations_before);
}

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;

/// A pool of `budget` bytes on the last device, large requests only (no size-class slabs), so
/// that which block a request gets is predictable.
dk::pool_config budget_pool(std::size_t budget) {
  dk::pool_config c = small_pool();
  c.max_size = budget;
  c.small_size_limit = 0;
  return c;
}
}  // namespace

// The common path of a stream-ordered pool makes no CUDA call beyond asking whether the stream is
// being captured: a block freed on a stream is reused on it at once (stream order), so no event is
// recorded for it, as in PyTorch's caching allocator. Each block is written on the stream before
// its free and after its reuse; the race detector sees that stream order alone orders the two.
TEST_CASE("one stream allocating and freeing makes no CUDA call but the capture query", "[sim][memory][stream]") {
  const std::size_t violations_before = sim::violations().size();
  const int last = sim::device_count() - 1;
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(last), small_pool()};
  const dk::stream s(dk::device::cuda(last));
  constexpr int blocks = 48;
  const auto size_of = [](int i) { return static_cast<std::size_t>(i * 7919 % 300000) + 1 + (i % 3 == 0 ? MiB : 0); };
  std::vector<void*> live(blocks);
  const auto round = [&](bool write) {
    for (int i = 0; i < blocks; ++i) {
      live[static_cast<std::size_t>(i)] = pool.allocate(size_of(i), s);
      if (write)
        REQUIRE(cudaMemsetAsync(live[static_cast<std::size_t>(i)], i, size_of(i), s.native_handle()) == cudaSuccess);
    }
    for (int k = 0; k < blocks; ++k) {
      const int i = (k * 17) % blocks;  // freed in another order than allocated
      pool.deallocate(live[static_cast<std::size_t>(i)], size_of(i), s);
    }
  };
  round(false);  // the pool grows to what the rounds need
  const std::size_t total = sim::api_calls_total();
  const std::size_t queries = sim::api_calls("cuStreamIsCapturing");
  const std::size_t runtime_queries = sim::api_calls("cudaStreamGetCaptureInfo");
  const std::size_t records = sim::api_calls("cudaEventRecord");
  constexpr int rounds = 10;
  for (int r = 0; r < rounds; ++r) round(true);
  const std::size_t ops = std::size_t{2} * blocks * rounds;
  const std::size_t memsets = std::size_t{blocks} * rounds;
  CHECK(sim::api_calls("cudaEventRecord") == records);
  CHECK(sim::api_calls("cuStreamIsCapturing") - queries == ops);  // the driver's query, not the runtime's
  CHECK(sim::api_calls("cudaStreamGetCaptureInfo") == runtime_queries);
  CHECK(sim::api_calls_total() - total == ops + memsets);  // nothing else
  CHECK(pool.stats().stream_fences == 0);
  s.synchronize();
  CHECK(sim::violations().size() == violations_before);
}

// A block crosses to another stream once an event recorded on its stream after the free has
// completed. The pool records that event only when another stream ran short, and then at the next
// call the program makes with the owning stream (which shows the stream still exists).
TEST_CASE("a free crosses streams through one event, recorded at the owner's next use", "[sim][memory][stream]") {
  const int last = sim::device_count() - 1;
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(last), budget_pool(6 * MiB)};
  const dk::stream s1(dk::device::cuda(last));
  const dk::stream s2(dk::device::cuda(last));
  // Events recorded during `f` (growing records one on the upstream's own stream: not counted).
  const auto records_during = [](auto&& f) {
    const std::size_t before = sim::api_calls("cudaEventRecord");
    f();
    return sim::api_calls("cudaEventRecord") - before;
  };
  void* p = pool.allocate(2 * MiB, s1);
  void* other = pool.allocate(1 * MiB, s1);
  REQUIRE(cudaMemsetAsync(p, 1, 2 * MiB, s1.native_handle()) == cudaSuccess);
  CHECK(records_during([&] { pool.deallocate(p, 2 * MiB, s1); }) == 0);
  void* q = pool.allocate(2 * MiB, s2);  // nothing recorded on s1: s2 grows, and asks for an event
  CHECK(q != p);
  CHECK(records_during([&] { pool.deallocate(other, 1 * MiB, s1); }) == 1);  // s1's next use records it
  s1.synchronize();
  void* r = nullptr;
  CHECK(records_during([&] { r = pool.allocate(2 * MiB, s2); }) == 0);  // the event completed: p is ready
  CHECK(r == p);
  REQUIRE(cudaMemsetAsync(r, 2, 2 * MiB, s2.native_handle()) == cudaSuccess);
  CHECK(pool.stats().stream_fences == 0);
  pool.deallocate(q, 2 * MiB, s2);
  pool.deallocate(r, 2 * MiB, s2);
  s2.synchronize();
}

// At the budget, frees no event covers (their stream destroyed, with its work still queued) are
// taken in by the device-wide fence, cudaDeviceSynchronize, which names no stream. The simulator
// reports any use of the destroyed stream as a violation, and a reuse the fence did not order as a
// race; the data written after the reuse are the ones read back.
TEST_CASE("at the budget the fence takes in a destroyed stream's frees", "[sim][memory][stream]") {
  const std::size_t violations_before = sim::violations().size();
  const int last = sim::device_count() - 1;
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(last), budget_pool(2 * MiB)};
  void* p = nullptr;
  gate g;
  {
    const dk::stream s1(dk::device::cuda(last));
    REQUIRE(cudaLaunchHostFunc(s1.native_handle(), gate::hold, &g) == cudaSuccess);
    p = pool.allocate(2 * MiB, s1);
    REQUIRE(cudaMemsetAsync(p, 1, 2 * MiB, s1.native_handle()) == cudaSuccess);
    pool.deallocate(p, 2 * MiB, s1);
  }  // s1 destroyed: its work still runs once the gate opens
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    g.open = true;
  });
  const dk::stream s2(dk::device::cuda(last));
  const std::size_t records = sim::api_calls("cudaEventRecord");
  void* q = pool.allocate(2 * MiB, s2);  // takes p: nothing to grow into, so no growth's event
  opener.join();
  CHECK(q == p);
  CHECK(pool.stats().stream_fences == 1);
  CHECK(sim::api_calls("cudaEventRecord") == records);
  REQUIRE(cudaMemsetAsync(q, 2, 2 * MiB, s2.native_handle()) == cudaSuccess);
  std::vector<unsigned char> back(2 * MiB);
  REQUIRE(cudaMemcpyAsync(back.data(), q, back.size(), cudaMemcpyDeviceToHost, s2.native_handle()) == cudaSuccess);
  s2.synchronize();
  CHECK(std::count(back.begin(), back.end(), 2) == static_cast<std::ptrdiff_t>(back.size()));
  pool.deallocate(q, 2 * MiB, s2);
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
  void* c = pool.allocate(std::size_t{2} << 20, s2);  // a chunk of its own; asks s1 for an event...
  void* d = pool.allocate(std::size_t{1} << 20, s1);  // ...recorded here, behind the gate (d is a)
  // The program's own failed call, whose error it has not read yet.
  REQUIRE(cudaSetDevice(sim::device_count()) == cudaErrorInvalidDevice);
  void* b = pool.allocate(std::size_t{1} << 20, s2);  // polls s1's event: not ready
  CHECK(b != a);
  CHECK_FALSE(s1.idle());  // queries s1: not ready
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  g.open = true;
  s1.synchronize();
  pool.deallocate(b, std::size_t{1} << 20, s2);
  pool.deallocate(c, std::size_t{2} << 20, s2);
  pool.deallocate(d, std::size_t{1} << 20, s1);
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
    manager dm{dk::settings::without_environment().set_allocator(e.kind)};
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
  manager plain{dk::settings::without_environment()};
  const std::uint64_t total = plain.budget(gpu).total_bytes;
  const std::uint64_t reserve = plain.budget(gpu).budget_bytes - (std::uint64_t{64} << 20);  // leaves 64 MiB
  manager dm{dk::settings::without_environment().set_collective_memory_size(reserve).set_allocator(
      dk::allocator_kind::platform)};
  CHECK(dm.budget(gpu).budget_bytes == std::uint64_t{64} << 20);
  CHECK(dm.memory_stats(gpu).bytes_limit == std::uint64_t{64} << 20);
  dk::device_memory& m = dm.memory(gpu);
  CHECK(m.stats().max_size == std::uint64_t{64} << 20);
  void* p = m.allocate(std::size_t{48} << 20);
  CHECK_THROWS_AS(m.allocate(std::size_t{32} << 20), dk::out_of_memory);  // would pass the reduced budget
  m.deallocate(p, std::size_t{48} << 20);

  CHECK_THROWS_WITH(manager{dk::settings::without_environment().set_collective_memory_size(total + 1)},
                    Catch::Contains("collective_memory_size") && Catch::Contains("cuda:0"));
}

TEST_CASE("memory_stats and live_buffers see the default placement pool, on a GPU and on the host",
          "[sim][memory][stats]") {
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  manager dm{dk::settings::without_environment()};
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

  // The same on the host of a manager with GPUs: dk::place(tree, cpu) uses the process's host pool.
  const dk::device cpu = dk::device::cpu();
  const auto host_before = dm.memory_stats(cpu);
  const std::size_t host_live_before = dm.live_buffers(cpu).size();
  {
    const auto placed = dk::place(ramp(1 << 16, 0.0f), cpu);
    const auto during = dm.memory_stats(cpu);
    CHECK(during.bytes_in_use >= host_before.bytes_in_use + (std::size_t{1} << 16) * sizeof(float));
    CHECK(during.num_allocs > host_before.num_allocs);
    CHECK(dm.live_buffers(cpu).size() == host_live_before + 1);
  }
  CHECK(dm.memory_stats(cpu).bytes_in_use == host_before.bytes_in_use);
  CHECK(dm.live_buffers(cpu).size() == host_live_before);
}

TEST_CASE("a size that overflows the pool's arithmetic is invalid_request on a GPU, before any CUDA call",
          "[sim][memory][bad-input]") {
  constexpr std::size_t top = std::numeric_limits<std::size_t>::max();
  const dk::device gpu = dk::device::cuda(0);
  dk::pool_config unlimited = small_pool();
  unlimited.max_size = top;  // no budget to catch the size first
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), unlimited};
  const dk::stream s(gpu);
  void* keep = pool.allocate(3000, s);
  const auto before = pool.stats();
  const std::size_t in_use = sim::device_bytes_in_use(0);
  const std::size_t calls = sim::api_calls_total();
  for (const std::size_t bytes : {top, top - 100, top - 255}) {
    INFO(bytes);
    CHECK_THROWS_AS(pool.allocate(bytes), dk::invalid_request);
    CHECK_THROWS_WITH(pool.allocate(bytes, s), Catch::Contains("overflows") && Catch::Contains("cuda:0"));
    CHECK_THROWS_AS(pool.allocate_async(bytes, 4096, s), dk::invalid_request);
  }
  CHECK(sim::api_calls_total() == calls);  // refused before the capture query or any allocation
  CHECK(pool.stats() == before);
  CHECK(sim::device_bytes_in_use(0) == in_use);
  pool.check_consistency();

  // On a stream being captured into a graph: refused before a graph memory node is recorded.
  REQUIRE(cudaStreamBeginCapture(s.native_handle(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK_THROWS_AS(pool.allocate(top - 100, s), dk::invalid_request);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.native_handle(), &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  CHECK(pool.stats() == before);

  // The manager's pools and the process's placement pool refuse it the same way.
  dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>> dm{dk::settings::without_environment()};
  CHECK_THROWS_AS(dm.memory(gpu).allocate(top - 100), dk::invalid_request);
  CHECK_THROWS_AS(dk::default_memory(gpu).allocate(top - 100, s), dk::invalid_request);
  pool.deallocate(keep, 3000, s);
  s.synchronize();
}

TEST_CASE("make_device_pool makes a GPU pool of each allocator kind from your configuration",
          "[sim][memory][allocator]") {
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  const dk::device gpu = dk::device::cuda(0);
  dk::pool_config config = small_pool();  // at most 64 MiB
  config.tracking = dk::tracking_mode::on;
  constexpr std::size_t bytes = std::size_t{4} << 20;
  struct expectation {
    dk::allocator_kind kind;
    const char* api;
    bool driver_pool;
    bool default_pool;
  };
  const expectation cases[] = {{dk::allocator_kind::pool, "cudaMallocFromPoolAsync", true, false},
                               {dk::allocator_kind::async, "cudaMallocAsync", true, true},
                               {dk::allocator_kind::platform, "cudaMalloc", false, false}};
  for (const auto& e : cases) {
    INFO("allocator " << dk::to_string(e.kind));
    const std::unique_ptr<dk::device_memory> m = dk::make_device_pool(gpu, config, e.kind);
    auto* typed = dynamic_cast<dk::memory_pool<dk::cuda_device_resource>*>(m.get());
    REQUIRE(typed != nullptr);
    CHECK(typed->upstream().uses_driver_pool() == e.driver_pool);
    CHECK(typed->upstream().uses_device_default_pool() == e.default_pool);
    CHECK(typed->upstream().release_threshold() == config.max_size);  // the driver pool keeps the budget
    CHECK(m->stats().max_size == *config.max_size);
    CHECK(m->tracking());
    CHECK(m->config().release_on_free == (e.kind != dk::allocator_kind::pool));  // only pool caches
    const std::size_t calls = sim::api_calls(e.api);
    void* p = m->allocate(bytes);
    CHECK(sim::api_calls(e.api) == calls + 1);
    m->deallocate(p, bytes);
    CHECK((m->stats().reserved_bytes > 0) == (e.kind == dk::allocator_kind::pool));
  }

  // Without a budget or max_size: the balanced budget of the device, which the driver pool keeps.
  const std::unique_ptr<dk::device_memory> plain = dk::make_device_pool(gpu);
  auto& plain_typed = dynamic_cast<dk::memory_pool<dk::cuda_device_resource>&>(*plain);
  CHECK(plain->budget().fraction == 0.75);
  REQUIRE(plain->budget().available_bytes.has_value());
  CHECK(plain->stats().max_size == plain->budget().budget_bytes);
  CHECK(plain_typed.upstream().release_threshold() == plain->budget().budget_bytes);

  // A manager's pool is what make_device_pool makes from the manager's configuration.
  manager dm{dk::settings::without_environment().set_allocator(dk::allocator_kind::async)};
  const std::unique_ptr<dk::device_memory> same = dk::make_device_pool(gpu, dm.pool_config_for(gpu), dm.allocator());
  CHECK(same->stats().max_size == dm.memory(gpu).stats().max_size);
  CHECK(same->config().release_on_free == dm.memory(gpu).config().release_on_free);
  CHECK(dynamic_cast<dk::memory_pool<dk::cuda_device_resource>&>(*same).upstream().uses_device_default_pool());
  CHECK(dynamic_cast<dk::memory_pool<dk::cuda_device_resource>&>(dm.memory(gpu)).upstream().uses_device_default_pool());
}

TEST_CASE("release_cached gives a GPU pool's cached memory back to the device, as torch.cuda.empty_cache",
          "[sim][memory][trim]") {
  const dk::device gpu = dk::device::cuda(0);
  dk::pool_config config = small_pool();
  config.initial_size = std::size_t{4} << 20;
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), config};
  const std::size_t base = sim::device_bytes_in_use(0) - (std::size_t{4} << 20);
  const dk::stream s(gpu);
  void* live = pool.allocate(MiB, s);                    // in the preallocated chunk
  void* freed = pool.allocate(std::size_t{8} << 20, s);  // a chunk of its own
  pool.deallocate(freed, std::size_t{8} << 20, s);       // cached, for s at once, others later
  CHECK(sim::device_bytes_in_use(0) == base + (std::size_t{12} << 20));
  CHECK(pool.defragment().released_bytes == 0);  // below its threshold
  CHECK(sim::device_bytes_in_use(0) == base + (std::size_t{12} << 20));

  CHECK(pool.release_cached() == std::size_t{8} << 20);
  CHECK(sim::device_bytes_in_use(0) == base + (std::size_t{4} << 20));       // the driver has it back
  REQUIRE(cudaMemsetAsync(live, 1, MiB, s.native_handle()) == cudaSuccess);  // still valid
  s.synchronize();
  pool.deallocate(live, MiB, s);
  CHECK(pool.release_cached() == std::size_t{4} << 20);
  CHECK(sim::device_bytes_in_use(0) == base);
  CHECK(pool.stats().reserved_bytes == 0);
  pool.check_consistency();
}

TEST_CASE("a start fraction the GPU refuses is out_of_memory saying to start smaller", "[sim][memory][oom]") {
  using ranged =
      dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::fraction_range<3, 4, 9, 10>>;
  const int last = sim::device_count() - 1;
  const dk::device gpu = dk::device::cuda(last);
  ranged dm{dk::settings::without_environment()};
  const std::uint64_t start = dm.budget(gpu).start_bytes;
  const std::size_t before = sim::device_bytes_in_use(last);
  // The device refuses the start (on a real 80 GB GPU: another process holds most of it).
  sim::fail_call("cudaMallocFromPoolAsync", 1, cudaErrorMemoryAllocation);
  try {
    (void)dm.memory(gpu);
    FAIL("made a pool without its preallocation");
  } catch (const dk::out_of_memory& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(e.get_device() == gpu);
    CHECK(e.short_of() == dk::out_of_memory::shortage::preallocation);
    CHECK(e.requested_bytes() >= start);
    CHECK(e.requested_bytes() < start + 256);  // the start, rounded to the pool's granule
    CHECK_THAT(m, Catch::Contains("preallocat") && Catch::Contains("cudaErrorMemoryAllocation") &&
                      Catch::Contains("start fraction") && Catch::Contains("fraction_range") &&
                      !Catch::Contains("larger strategy"));
  }
  CHECK(sim::device_bytes_in_use(last) == before);  // nothing kept: no pool was made
  CHECK(dm.memory_stats().empty());
}
