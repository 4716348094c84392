// devicekit's CUDA paths on simulated GPUs, where the simulator sees what a GPU would not report:
// several devices, streams used after their destruction, events recorded across devices. Each
// case names the finding of issue 9 (or the GPU run) it guards; run with 1, 2 and 4 devices,
// [multi] cases with two or more.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>
#include <devicekit/devicekit.hpp>

#include "../cpu/test_support.hpp"
#include "sim_test_support.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <cstddef>
#include <thread>
#include <tuple>
#include <vector>

namespace dk = devicekit;
namespace sim = devicekit::cuda_sim;

namespace {

std::vector<float> ramp(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

/// What `accessor` may do with the memory of `r`'s driver pool.
cudaMemAccessFlags pool_access(const dk::cuda_device_resource& r, int accessor) {
  cudaMemLocation where{};
  where.type = cudaMemLocationTypeDevice;
  where.id = accessor;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  REQUIRE(cudaMemPoolGetAccess(&flags, r.native_pool(), &where) == cudaSuccess);
  return flags;
}

dk::pool_config small_pool() {
  dk::pool_config c;
  c.max_size = std::size_t{64} << 20;
  c.tracking = dk::tracking_mode::off;
  return c;
}

}  // namespace

// Issue 9, finding 1: the prefetch worker recorded its "batch ready" event with no device
// guard, so prefetching to cuda:N (N >= 1) recorded a device-0 event on a cuda:N stream, which
// CUDA refuses (cudaErrorInvalidResourceHandle).
TEST_CASE("prefetch to the last GPU delivers every tree", "[sim][multi][prefetch]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream consumer(gpu);
  std::vector<std::vector<float>> batches;
  for (int i = 0; i < 6; ++i) batches.push_back(ramp(4096, static_cast<float>(1000 * i)));
  std::size_t k = 0;
  for (auto& placed : dk::prefetch(batches, gpu, 2, consumer)) {
    std::vector<float> got(placed.size());
    REQUIRE(cudaMemcpyAsync(got.data(), placed.data(), placed.size_bytes(), cudaMemcpyDeviceToHost,
                            consumer.native_handle()) == cudaSuccess);
    consumer.synchronize();
    CHECK(got == batches[k]);
    ++k;
  }
  CHECK(k == batches.size());
}

// Found on the H100 (gpu_memory_gpu_cu, SIGSEGV), issue 9 finding 2: the pool recorded events on
// streams that had been destroyed. The simulator reports that as a violation, which fails the
// process.
TEST_CASE("a device pool outlives the streams it ordered frees on", "[sim][memory][stream]") {
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
  CHECK(sim::violations().empty());
}

using sim_test::gate;
using sim_test::set_flag;

// Issue 9, finding 11: after a query answered cudaErrorNotReady devicekit called
// cudaGetLastError() "to clear it", which swallowed an error the program had not read yet.
// cudaErrorNotReady is a status, not an error: the H100 run showed it does not become the last
// error (gpu.gpu_sim_rules), so there is nothing to clear.
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

// Issue 9, finding 8: scoped_device restored device 0 on threads that had never chosen a device,
// which creates a context on GPU 0 (hundreds of MB) in every MPI rank and worker thread that
// uses another GPU. Run alone in its process (tests/CMakeLists.txt): nothing else may touch cuda:0.
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

// Issue 9, finding 5: a device pool created the event for the null (legacy) stream on whatever
// device was current, so freeing on the null stream from another device's thread and then from
// the pool's recorded a cuda:0 event on cuda:N's legacy stream, which CUDA refuses.
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

// Issue 9, finding 6: destroying a prefetch view while the consumer stream still reads the batch
// it holds gave that batch's memory back at once; a caching pool then handed it out again, and
// new work overwrote it under the consumer's pending reads.
TEST_CASE("a prefetch view destroyed early keeps the current batch until the consumer is past it", "[sim][prefetch]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(gpu.ordinal()), small_pool()};
  const dk::stream consumer(gpu);
  const dk::stream other(gpu);
  std::vector<std::vector<float>> batches;
  for (int i = 0; i < 3; ++i) batches.push_back(ramp(1 << 16, static_cast<float>(100 * i)));
  // Pinned, so that the copy out of the batch is asynchronous (into pageable memory it would
  // return only once done).
  float* seen = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&seen), (1 << 16) * sizeof(float)) == cudaSuccess);
  gate g;
  std::atomic<int> overwritten{0};
  {
    auto view = dk::prefetch(batches, gpu, 2, pool, consumer.native_handle());
    auto it = view.begin();
    // The consumer's "kernel" is held; the copy out of the batch waits behind it.
    REQUIRE(cudaLaunchHostFunc(consumer.native_handle(), gate::hold, &g) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(seen, (*it).data(), (*it).size_bytes(), cudaMemcpyDeviceToHost, consumer.native_handle()) ==
            cudaSuccess);
    // The consumer is let go once the other stream's overwrite below has run (what happens when
    // the view frees the batch at once), or after 200 ms (when it waits for the consumer first).
    std::thread([&g, &overwritten] {
      const auto t0 = std::chrono::steady_clock::now();
      while (!overwritten.load() && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      g.open = true;
    }).detach();
  }  // the view goes while the consumer has not read the batch yet
  // New work on another stream takes what the pool has free (the view's three batches) and
  // overwrites it.
  std::vector<void*> taken;
  for (int i = 0; i < 3; ++i) {
    taken.push_back(pool.allocate((1 << 16) * sizeof(float), other));
    REQUIRE(cudaMemsetAsync(taken.back(), 0xEE, (1 << 16) * sizeof(float), other.native_handle()) == cudaSuccess);
  }
  REQUIRE(cudaLaunchHostFunc(other.native_handle(), set_flag, &overwritten) == cudaSuccess);
  consumer.synchronize();
  other.synchronize();
  CHECK(std::vector<float>(seen, seen + (1 << 16)) == batches[0]);
  for (void* p : taken) pool.deallocate(p, (1 << 16) * sizeof(float), other);
  REQUIRE(cudaFreeHost(seen) == cudaSuccess);
}

#if DEVICEKIT_HAS_NCCL
// Issue 9, finding 3: the structure check's exchange() copied the all-gather's result to pageable
// host memory before waiting for it; such a copy returns only when done, so with a peer that never
// joins, the host hung in cudaMemcpyAsync forever, before the timeout and the abort could act.
TEST_CASE("a collective whose peer never joins times out and aborts", "[sim][multi][nccl]") {
  const ncclUniqueId id = dk::nccl_communicator::unique_id();
  std::atomic<bool> release_peer{false};
  std::thread peer([&] {  // rank 1 joins the communicator, then takes part in nothing
    auto c = dk::nccl_communicator::init_rank(id, 2, 1, dk::device::cuda(1));
    while (!release_peer.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  auto comm = dk::nccl_communicator::init_rank(id, 2, 0, dk::device::cuda(0));
  comm.set_timeout(std::chrono::milliseconds(200));
  auto tree = dk::place(ramp(64, 1.f), dk::device::cuda(0));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(dk::all_reduce(comm, tree, dk::reduce_op::sum), dk::communication_error);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  release_peer = true;
  peer.join();
}
#endif

#if DEVICEKIT_HAS_NCCL
// Issue 9, finding 4: an NCCL call that failed in the middle of an operation (after earlier
// buckets had gone to the peers) left the communicator usable when the error was an argument
// error, so the peers waited for the rest for ever. Now it aborts.
TEST_CASE("an NCCL failure in the middle of an operation aborts the communicator", "[sim][nccl]") {
  auto comm = dk::nccl_communicator::one_rank(dk::device::cuda(0));
  comm.set_bucket_bytes(64);  // one collective per leaf
  auto a = dk::place(ramp(64, 1.f), dk::device::cuda(0));
  auto b = dk::place(ramp(64, 2.f), dk::device::cuda(0));
  auto c = dk::place(ramp(64, 3.f), dk::device::cuda(0));
  auto tree = std::make_tuple(std::move(a), std::move(b), std::move(c));
  sim::fail_call("ncclAllReduce", 2, static_cast<cudaError_t>(ncclInvalidArgument));
  CHECK_THROWS_AS(dk::all_reduce(comm, tree, dk::reduce_op::sum), dk::communication_error);
  CHECK(comm.aborted());
}

// Issue 9, finding 4: destroying a communicator with work queued that will never finish (its peer
// is gone) blocked for ever in cudaStreamSynchronize. It now waits under the timeout and aborts.
TEST_CASE("a communicator whose peer is gone is released within its timeout", "[sim][multi][nccl]") {
  const ncclUniqueId id = dk::nccl_communicator::unique_id();
  std::atomic<bool> release_peer{false};
  std::thread peer([&] {
    auto c = dk::nccl_communicator::init_rank(id, 2, 1, dk::device::cuda(1));
    while (!release_peer.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  auto placed = dk::place(ramp(64, 1.f), dk::device::cuda(0));
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto comm = dk::nccl_communicator::init_rank(id, 2, 0, dk::device::cuda(0));
    comm.set_timeout(std::chrono::milliseconds(200));
    // A raw collective the peer never joins, queued on the communicator's stream.
    dk::scoped_device on(0);
    REQUIRE(ncclAllReduce(placed.data(), placed.data(), 64, ncclFloat32, ncclSum, comm.native_handle(),
                          comm.stream()) == ncclSuccess);
  }  // released here
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  release_peer = true;
  peer.join();
}
#endif

// Issue 9, finding 7: when a device-to-host transfer failed half-way, its pinned staging went
// back to the cache while the copies already queued still wrote into it; the next placement
// staged its data there and sent the stale bytes to the device.
TEST_CASE("a failed device-to-host transfer does not give its staging back under queued copies", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(0);
  auto a = dk::place(ramp(1024, 1.f), gpu);  // two allocations: two copies into the staging
  auto b = dk::place(ramp(1024, 5000.f), gpu);
  auto tree = std::make_tuple(std::move(a), std::move(b));
  const dk::stream& transfers = dk::detail::placement_stream(gpu);
  gate held_transfers;
  REQUIRE(cudaLaunchHostFunc(transfers.native_handle(), gate::hold, &held_transfers) == cudaSuccess);
  std::thread([&held_transfers] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    held_transfers.open = true;
  }).detach();
  sim::fail_call("cudaMemcpyAsync", 2, cudaErrorLaunchFailure);  // the second copy fails
  CHECK_THROWS_AS(dk::to_host(tree), dk::cuda_error);
  (void)cudaGetLastError();
  // The next placement, held on its stream until the failed transfer's copy has landed.
  const dk::stream s(gpu);
  gate held_placement;
  REQUIRE(cudaLaunchHostFunc(s.native_handle(), gate::hold, &held_placement) == cudaSuccess);
  const std::vector<float> fresh(2048, 9.f);
  auto placed = dk::place(fresh, gpu, s);
  while (!held_transfers.open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  transfers.synchronize();
  held_placement.open = true;
  s.synchronize();
  CHECK(dk::to_host(placed) == fresh);
}

namespace {

/// Runs `f` on a thread of its own and reports whether it returned within `limit`; the thread is
/// joined either way (the caller opens whatever held it), so a failing check cannot hang.
class timed_call {
 public:
  template <class F>
  explicit timed_call(F f)
      : worker_([this, f]() mutable {
          f();
          done_ = true;
        }) {}
  ~timed_call() { worker_.join(); }
  [[nodiscard]] bool finished_within(std::chrono::milliseconds limit) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (!done_.load() && std::chrono::steady_clock::now() - t0 < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done_.load();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread worker_;
};

/// A tree of `leaves` float leaves with `floats_each` elements, different values in each.
std::vector<std::vector<float>> big_tree(std::size_t leaves, std::size_t floats_each) {
  std::vector<std::vector<float>> t;
  for (std::size_t i = 0; i < leaves; ++i) t.push_back(ramp(floats_each, static_cast<float>(i) * 1e6f));
  return t;
}

}  // namespace

// Issue 9, finding 10: the default placement resource freed with cudaFree, which waits for all
// work on the device (the simulator's cudaFree does too), so dropping a placed tree stalled
// behind any stream of the device, a prefetch's copies included. It is a devicekit pool now.
TEST_CASE("dropping a placed tree does not wait for the device's other streams", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream busy(gpu);
  gate g;
  REQUIRE(cudaLaunchHostFunc(busy.native_handle(), gate::hold, &g) == cudaSuccess);
  {
    timed_call drop([&] {
      auto placed = dk::place(ramp(1 << 16, 1.f), gpu);
      CHECK(dk::to_host(placed) == ramp(1 << 16, 1.f));
    });  // the placed tree is dropped at the end of the call
    CHECK(drop.finished_within(std::chrono::seconds(3)));
    g.open = true;
  }
  busy.synchronize();
  // The default resource is a devicekit pool: its stats see placements.
  dk::device_memory* pool = &dk::default_placement_resource(gpu);
  REQUIRE(pool == &dk::default_memory(gpu));
  const auto before = pool->stats().allocated_bytes;
  {
    auto placed = dk::place(ramp(1024, 0.f), gpu);
    CHECK(pool->stats().allocated_bytes >= before + 1024 * sizeof(float));
  }
  CHECK(pool->stats().allocated_bytes == before);
}

// Issue 9, finding 10 (the release that replaces cudaFree's wait): a tree dropped before the copy
// that fills it has run must not give its memory back under that copy. A pool's stream-less free
// means "no work in flight": without the wait the next tree got the same memory, and the late
// copy overwrote it.
TEST_CASE("a tree dropped before its copy ran gives its memory back after the copy", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(0);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), small_pool()};
  const dk::stream held(gpu);
  gate g;
  REQUIRE(cudaLaunchHostFunc(held.native_handle(), gate::hold, &g) == cudaSuccess);
  std::thread opener([&g] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    g.open = true;
  });
  const std::vector<float> first(1 << 16, 1.f);
  const std::vector<float> second(1 << 16, 2.f);
  {
    auto early = dk::place(first, gpu, held, pool);  // its copy waits behind the gate
  }                                                  // dropped: waits for that copy (about 200 ms), then frees
  auto next = dk::place(second, gpu, pool);          // the same memory, reused
  opener.join();
  held.synchronize();
  CHECK(dk::to_host(next) == second);
}

// Issue 9, finding 11: place(..., stream) above 16 MiB pipelined through two pinned buffers and
// waited on the host for the stream to drain the older one, so a stream busy with earlier work
// (a kernel) held the caller until that work ended. Now it takes fresh staging, up to
// detail::max_staging_in_flight, and returns at once.
TEST_CASE("placing a large tree on a busy stream returns without waiting for the stream", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream busy(gpu);
  const auto tree = big_tree(6, std::size_t{2} << 20);  // 48 MiB: six chunks
  gate g;
  REQUIRE(cudaLaunchHostFunc(busy.native_handle(), gate::hold, &g) == cudaSuccess);
  std::optional<dk::placed_t<decltype(tree)>> placed;
  {
    timed_call call([&] { placed.emplace(dk::place(tree, gpu, busy)); });
    CHECK(call.finished_within(std::chrono::seconds(3)));
    g.open = true;
  }
  busy.synchronize();
  REQUIRE(placed.has_value());
  CHECK(dk::to_host(*placed) == tree);
}

// Issue 9, findings 10 and 11: device-to-host transfers pinned their whole size at once, and
// the library's host waits spun a core (cudaStreamSynchronize, events without
// cudaEventBlockingSync). A 40 MiB tree comes down in 8 MiB chunks through two buffers, and every
// wait on the way blocks instead of spinning.
TEST_CASE("large transfers are chunked both ways and wait without spinning", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(0);
  dk::device_memory& staging = dk::staging_memory();
  const std::size_t cached_before = staging.stats().reserved_bytes;
  staging.reset_peak_stats();
  const std::size_t spins_before = sim::spinning_host_waits();
  // Five leaves of 8 MiB + 4 bytes: the chunk boundaries fall inside leaves.
  const auto tree = big_tree(5, (std::size_t{2} << 20) + 1);
  auto placed = dk::place(tree, gpu);
  const auto back = dk::to_host(placed);
  CHECK(back == tree);
  CHECK(sim::spinning_host_waits() == spins_before);
  // At most two chunk buffers came from the system for each direction (the pool may have had
  // some already); a whole-transfer staging area would be 40 MiB.
  CHECK(staging.stats().peak_reserved_bytes - cached_before <= 4 * dk::detail::staging_chunk_bytes);
}

// Issue 9, finding 10: a move between devices without peer access pinned the whole transfer and
// waited on the host for the download before queueing the upload; now it goes in chunks, the
// destination stream waits for each chunk's download on an event, and the host waits for
// neither stream. Meaningful in
// the run without peer access (sim.devicekit.gpus2_no_peer); elsewhere it checks the peer path.
TEST_CASE("a move between devices waits on the host for neither device's streams", "[sim][multi][place]") {
  const dk::device from = dk::device::cuda(0);
  const dk::device to = dk::device::cuda(1);
  const auto tree = big_tree(3, (std::size_t{2} << 20) + 7);  // 24 MiB: three chunks when staged
  auto src = dk::place(tree, from);
  const dk::stream busy(to);
  gate g;
  REQUIRE(cudaLaunchHostFunc(busy.native_handle(), gate::hold, &g) == cudaSuccess);
  // The source side busy too: its downloads queue on this thread's placement stream of `from`.
  REQUIRE(cudaLaunchHostFunc(dk::detail::placement_stream(from).native_handle(), gate::hold, &g) == cudaSuccess);
  const auto staged_before = dk::detail::stats().staged_device_copies.load();
  // On this thread (the placement stream is the calling thread's); the gate opens after 2 s.
  std::thread opener([&g] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    g.open = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<dk::placed_t<decltype(tree)>> moved;
  moved.emplace(dk::place(src, to, busy));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  opener.join();
  busy.synchronize();
  REQUIRE(moved.has_value());
  CHECK(dk::to_host(*moved) == tree);
  int can = 0;
  REQUIRE(cudaDeviceCanAccessPeer(&can, 1, 0) == cudaSuccess);
  CHECK((dk::detail::stats().staged_device_copies.load() > staged_before) == (can == 0));
}

// Issue 9, findings 10 and 11 (batched_copy, whose CUB kernel the simulator cannot run: its host
// side is detail::batched_copy_plumbing, tested here with a stand-in launch): it ran on whatever
// device was current instead of the stream's, and took its scratch from the driver's default
// pool (release threshold 0: back to the system at every synchronisation). Now the stream's
// device is selected, and the tables and scratch come from that device's devicekit pool.
TEST_CASE("a batched copy runs on its stream's device with scratch from that device's pool", "[sim][multi][place]") {
  const int last = sim::device_count() - 1;
  const dk::device gpu = dk::device::cuda(last);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const dk::stream s(gpu);
  constexpr std::size_t count = 20;
  std::vector<std::vector<float>> host;
  std::vector<dk::device_array<float>> src;
  std::vector<dk::device_array<float>> dst;
  for (std::size_t i = 0; i < count; ++i) {
    host.push_back(ramp(64 + i, static_cast<float>(100 * i)));
    src.push_back(dk::place(host.back(), gpu));
    dst.push_back(dk::place(std::vector<float>(64 + i, -1.f), gpu));
  }
  std::vector<const void*> srcs;
  std::vector<void*> dsts;
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < count; ++i) {
    srcs.push_back(src[i].data());
    dsts.push_back(const_cast<float*>(dst[i].data()));
    sizes.push_back(src[i].size_bytes());
  }
  dk::device_memory& pool = dk::default_placement_resource(gpu);
  const auto before = pool.stats();
  std::vector<std::size_t> table_back(3 * count);
  int device_in_launch = -1;
  std::size_t temp_seen = 0;
  dk::detail::batched_copy_plumbing(
      srcs.data(), dsts.data(), sizes.data(), count, s.native_handle(), [] { return std::size_t{4096}; },
      [&](const void* const* d_srcs, void* const* d_dsts, const std::size_t* d_sizes, void* temp,
          std::size_t temp_bytes) {
        (void)cudaGetDevice(&device_in_launch);
        temp_seen = temp_bytes;
        CHECK(temp != nullptr);
        // The stand-in kernel: read the tables back (as the kernel would read them) and copy.
        const auto table = count * sizeof(void*);
        cudaError_t r = cudaMemcpyAsync(table_back.data(), d_srcs, table, cudaMemcpyDeviceToHost, s.native_handle());
        if (r == cudaSuccess)
          r = cudaMemcpyAsync(table_back.data() + count, d_dsts, table, cudaMemcpyDeviceToHost, s.native_handle());
        if (r == cudaSuccess)
          r = cudaMemcpyAsync(table_back.data() + 2 * count, d_sizes, table, cudaMemcpyDeviceToHost, s.native_handle());
        for (std::size_t i = 0; i < count && r == cudaSuccess; ++i) {
          r = cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyDeviceToDevice, s.native_handle());
        }
        return r;
      });
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);  // the caller's device again
  CHECK(device_in_launch == last);
  CHECK(temp_seen == 4096);
  s.synchronize();
  for (std::size_t i = 0; i < count; ++i) {
    CHECK(table_back[i] == reinterpret_cast<std::size_t>(srcs[i]));
    CHECK(table_back[count + i] == reinterpret_cast<std::size_t>(dsts[i]));
    CHECK(table_back[2 * count + i] == sizes[i]);
    CHECK(dk::to_host(dst[i]) == host[i]);
  }
  const auto after = pool.stats();
  CHECK(after.allocation_count == before.allocation_count + 1);  // tables and scratch: one block
  CHECK(after.allocated_bytes == before.allocated_bytes);        // given back in stream order
}

// Issue 9, finding 9: pools made with cudaMemPoolCreate (placement's default resource, and every
// cuda_device_resource) never granted peer access, and cudaDeviceEnablePeerAccess does not apply
// to them: a kernel on cuda:1 reading a tree that lives in cuda:0's pool faulted. The first move
// that needs access now grants it from every devicekit pool on the source device, and pools
// made later grant it at once.
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

// --- issue 13: device-wide calls, peer access, device_mismatch's fields ----------------------------

namespace {

/// A stream made outside devicekit (as PyTorch or the program would), on `ordinal`.
cudaStream_t foreign_stream_on(int ordinal) {
  const dk::scoped_device on(ordinal);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  return s;
}

int current_device() {
  int d = -1;
  REQUIRE(cudaGetDevice(&d) == cudaSuccess);
  return d;
}

template <class F>
std::optional<dk::device_mismatch> mismatch_of(F&& f) {
  try {
    f();
  } catch (const dk::device_mismatch& e) {
    return e;
  }
  FAIL_CHECK("no device_mismatch was thrown");
  return std::nullopt;
}

}  // namespace

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
  {  // what it cannot see (README): a stream made outside devicekit; synchronize still waits for it
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

// copy(src, placed, stream): a training loop refills the buffers it placed once. The copy must
// allocate nothing on the device (pool and simulator counters unchanged), return without waiting
// for a busy stream (the pageable source is staged first), and land once the stream runs.
TEST_CASE("copy into a placed tree allocates nothing and does not wait for the stream", "[sim][place][copy_into]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(gpu.ordinal()), small_pool()};
  const dk::stream s(gpu);
  auto placed = dk::place(std::make_tuple(ramp(4096, 0.f), ramp(100, 5.f), 1.5), gpu, s, pool);
  s.synchronize();
  const auto stats_before = pool.stats();
  const std::size_t bytes_before = sim::device_bytes_in_use(gpu.ordinal());

  const auto next = std::make_tuple(ramp(4096, 1000.f), ramp(100, -50.f), 2.5);
  gate g;
  REQUIRE(cudaLaunchHostFunc(s.native_handle(), gate::hold, &g) == cudaSuccess);
  {
    timed_call call([&] { dk::copy(next, placed, s); });
    CHECK(call.finished_within(std::chrono::seconds(3)));
    g.open = true;
  }
  s.synchronize();
  CHECK(dk::to_host(std::get<0>(placed)) == std::get<0>(next));
  CHECK(dk::to_host(std::get<1>(placed)) == std::get<1>(next));
  CHECK(std::get<2>(placed) == 2.5);
  const auto stats_after = pool.stats();
  CHECK(stats_after.allocation_count == stats_before.allocation_count);
  CHECK(stats_after.reserved_bytes == stats_before.reserved_bytes);
  CHECK(sim::device_bytes_in_use(gpu.ordinal()) == bytes_before);

  // A placed tree as the source: from the first GPU (a peer or staged copy with two or more),
  // finished on return in the stream-less form.
  const auto source = dk::place(std::make_tuple(ramp(4096, 7.f), ramp(100, 8.f), 3.5), dk::device::cuda(0));
  dk::copy(source, placed);
  CHECK(dk::to_host(std::get<0>(placed)) == ramp(4096, 7.f));
  CHECK(dk::to_host(std::get<1>(placed)) == ramp(100, 8.f));
  CHECK(pool.stats().allocation_count == stats_before.allocation_count);
  CHECK(sim::violations().empty());
}

// The staged host copy writes the whole range its destinations span; a destination tree made of
// some leaves of a placed block must not have the leaves between them overwritten.
TEST_CASE("copy into leaves picked from a placed block leaves the others alone", "[sim][place][copy_into]") {
  const dk::device gpu = dk::device::cuda(0);
  const auto block = dk::place(std::make_tuple(ramp(1000, 0.f), ramp(1000, 100.f), ramp(1000, 200.f)), gpu);
  auto outer = std::make_tuple(std::get<0>(block), std::get<2>(block));  // skips the middle leaf
  dk::copy(std::make_tuple(ramp(1000, -1.f), ramp(1000, -2.f)), outer);
  CHECK(dk::to_host(std::get<0>(block)) == ramp(1000, -1.f));
  CHECK(dk::to_host(std::get<1>(block)) == ramp(1000, 100.f));  // untouched
  CHECK(dk::to_host(std::get<2>(block)) == ramp(1000, -2.f));
}

TEST_CASE("copy with a stream of another GPU names both devices", "[sim][multi][place][copy_into][mismatch]") {
  const dk::device last = dk::device::cuda(sim::device_count() - 1);
  auto placed = dk::place(ramp(16, 0.f), dk::device::cuda(0));
  const dk::stream other(last);
  const auto e = mismatch_of([&] { dk::copy(ramp(16, 1.f), placed, other); });
  REQUIRE(e.has_value());
  CHECK(e->expected() == dk::device::cuda(0));
  CHECK(e->actual() == last);
  CHECK(dk::to_host(placed) == ramp(16, 0.f));
}

TEST_CASE("default_device_scope sends placement without a device to the scoped GPU", "[sim][place][default_device]") {
  const dk::device last = dk::device::cuda(sim::device_count() - 1);
  dk::device_manager<dk::cuda_detector> dm{dk::settings{}};
  REQUIRE(dm.default_device() == dk::device::cuda(0));
  {
    dk::default_device_scope scope(last);
    const auto placed = dm.place(ramp(64, 3.f));
    CHECK(dk::device_of(placed) == last);
    CHECK(dk::to_host(placed) == ramp(64, 3.f));
    CHECK(dk::device_of(dk::place(ramp(8, 0.f))) == last);
  }
  CHECK(dk::device_of(dm.place(ramp(8, 0.f))) == dk::device::cuda(0));
}

// Issue 13: the allocator kind is chosen at run time, as jaxlib's GpuAllocatorConfig chooses it.
// Each kind must reach the driver through its own API: one failure of that API, armed in the
// simulator, is met by the pool's recovery ladder (alloc_retries), which shows the API was used.
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

TEST_CASE("the topology of the simulated GPUs names the CUDA platform and versions", "[sim][topology]") {
  using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;
  const manager dm{dk::settings{}};
  const auto topo = dm.topology(dk::process_context{});
  CHECK(topo.platform == "cuda");
  int driver = 0;
  int runtime = 0;
  REQUIRE(cudaDriverGetVersion(&driver) == cudaSuccess);
  REQUIRE(cudaRuntimeGetVersion(&runtime) == cudaSuccess);
  CHECK(topo.platform_version == "cuda driver " + std::to_string(driver / 1000) + "." +
                                     std::to_string(driver % 1000 / 10) + " runtime " + std::to_string(runtime / 1000) +
                                     "." + std::to_string(runtime % 1000 / 10));
  REQUIRE(topo.devices.size() == static_cast<std::size_t>(sim::device_count()));
  CHECK(topo.devices[0].device_kind == dm.properties(dk::device::cuda(0)).name);
  CHECK(topo.devices.is_fully_addressable());
  CHECK(dk::device_topology::deserialize(topo.serialize()) == topo);
}

// --- nvml_detector against the simulated runtime (fake NVML: tests/nvml/fake_nvml.cpp) ----------
namespace {
std::string join_uuids(const std::vector<std::string>& uuids) {
  std::string s;
  for (const auto& u : uuids) s += (s.empty() ? "" : ";") + u;
  return s;
}
dk::settings with_fake_nvml() { return dk::settings{}.set_nvml_library(DEVICEKIT_TEST_FAKE_NVML); }
}  // namespace

// NVML lists every GPU of the machine in PCI order; the runtime only the visible ones, in its
// own order. The detector must report the runtime's devices under the runtime's ordinals.
TEST_CASE("nvml_detector reports the GPUs the runtime sees, under its ordinals", "[sim][nvml]") {
  const auto runtime = dk::cuda_detector{}.detect(dk::settings{});
  REQUIRE(runtime.gpu_count == sim::device_count());
  // NVML's list: the runtime's GPUs in reverse, plus one the runtime does not see.
  std::vector<std::string> uuids;
  for (auto it = runtime.devices.rbegin(); it != runtime.devices.rend(); ++it) uuids.push_back(it->uuid);
  uuids.push_back("GPU-0ff11e00-0000-0000-0000-000000000000");
  devicekit::testing::scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", std::to_string(uuids.size()).c_str());
  devicekit::testing::scoped_env ids("DEVICEKIT_FAKE_NVML_UUIDS", join_uuids(uuids).c_str());
  const auto caps = dk::nvml_detector{}.detect(with_fake_nvml());
  REQUIRE(caps.usable());
  CHECK(caps.fallback_reason.empty());
  CHECK(caps.gpu_count == runtime.gpu_count);
  REQUIRE(caps.devices.size() == runtime.devices.size());
  for (std::size_t i = 0; i < caps.devices.size(); ++i) {
    CHECK(caps.devices[i].id == runtime.devices[i].id);
    CHECK(caps.devices[i].uuid == runtime.devices[i].uuid);
    CHECK(caps.devices[i].usable());
  }
  // A manager over it places on the last GPU as over cuda_detector.
  dk::device_manager<dk::first_available<dk::nvml_detector, dk::cpu_detector>> dm(with_fake_nvml());
  CHECK(dm.has_gpu());
  const auto placed = dm.place(ramp(64, 3.f), dk::device::cuda(sim::device_count() - 1));
  CHECK(placed.size() == 64);

  // NVML GPUs that are none of the runtime's: not available, and the reason says so.
  devicekit::testing::scoped_env foreign("DEVICEKIT_FAKE_NVML_UUIDS", "GPU-0ff11e00-0000-0000-0000-000000000001");
  devicekit::testing::scoped_env one("DEVICEKIT_FAKE_NVML_GPUS", "1");
  const auto none = dk::nvml_detector{}.detect(with_fake_nvml());
  CHECK_FALSE(none.usable());
  CHECK_THAT(none.fallback_reason, Catch::Contains("none has the UUID of a GPU the CUDA runtime sees"));
}

TEST_CASE("a run-time platform list puts the CPU before simulated GPUs", "[sim][platforms]") {
  const auto caps = dk::first_available<dk::cuda_detector, dk::cpu_detector>{}.detect(
      dk::settings{}.set_platforms({dk::device_kind::cpu, dk::device_kind::cuda}));
  CHECK(caps.device_type == dk::device_kind::cpu);
  CHECK_THAT(caps.fallback_reason,
             Catch::Contains("cuda: found " + std::to_string(sim::device_count()) + " cuda device(s)"));
  dk::device_manager<> gpus_only(dk::settings{}.set_platforms({dk::device_kind::cuda}));
  CHECK(gpus_only.gpu_count() == sim::device_count());
}

// Run alone (CTest sim.devicekit.nvml_driver_mismatch) with cudaGetDeviceCount failing as under a
// driver older than the toolkit (cudaErrorInsufficientDriver): NVML still lists the GPUs; they
// are reported, and a manager refuses them before any CUDA call.
TEST_CASE("GPUs that NVML sees but the runtime cannot use are refused clearly", "[.][nvml_driver_mismatch]") {
  const auto runtime = dk::cuda_detector{}.detect(dk::settings{});
  REQUIRE(runtime.gpu_count == 0);
  CHECK_THAT(runtime.fallback_reason, Catch::Contains("cudaErrorInsufficientDriver"));
  devicekit::testing::scoped_env gpus("DEVICEKIT_FAKE_NVML_GPUS", "2");
  using chain = dk::first_available<dk::cuda_detector, dk::nvml_detector, dk::cpu_detector>;
  dk::device_manager<chain> dm(with_fake_nvml());
  CHECK(dm.capabilities().detector == "nvml");
  CHECK(dm.device_count() == 2);
  CHECK_FALSE(dm.has_gpu());
  CHECK_THAT(dm.fallback_reason(), Catch::Contains("the CUDA runtime cannot use the 2 GPU(s) NVML found") &&
                                       Catch::Contains("cudaErrorInsufficientDriver"));
  CHECK_THROWS_WITH(dm.place(ramp(16, 0.f)),
                    Catch::Contains("cannot use cuda:0") && Catch::Contains("update the NVIDIA driver"));
  CHECK_THROWS_AS(dm.memory(dk::device::cuda(1)), dk::config_error);
  CHECK(sim::contexts_created(0) == 0);  // refused before any CUDA call
  const auto on_host = dm.place(ramp(16, 0.f), dk::device::cpu());
  CHECK(on_host.size() == 16);
}

// --- issue 11: every byte from a devicekit pool ------------------------------------------------------
// Staging, scratch and the memory kinds come from the process's pools (memory/registry.hpp), so
// their stats see them.

TEST_CASE("staging comes from the pinned pool, exactly sized, freed in stream order after its copy",
          "[sim][place][registry]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  dk::device_memory& staging = dk::staging_memory();
  CHECK(staging.config().small_size_limit == 0);  // no size classes: blocks are their requests
  (void)staging.trim();                           // take in completed frees of earlier tests
  const auto before = staging.stats();
  staging.reset_peak_stats();
  const dk::stream held(gpu);
  gate g;
  REQUIRE(cudaLaunchHostFunc(held.native_handle(), gate::hold, &g) == cudaSuccess);
  const std::vector<float> tree = ramp(750001, 1.f);  // 3000004 bytes: neither a power of two nor 256-aligned
  auto placed = dk::place(tree, gpu, held);           // its copy waits behind the gate
  {
    const auto during = staging.stats();
    CHECK(during.peak_allocated_bytes - before.allocated_bytes == tree.size() * sizeof(float));  // exact
    CHECK(during.allocated_bytes == before.allocated_bytes);           // freed once the copy was queued...
    CHECK(during.pending_stream_frees > before.pending_stream_frees);  // ...in the order of its stream
    CHECK(during.reserved_bytes >= tree.size() * sizeof(float));
    const auto s = dk::staging_memory_stats();
    REQUIRE(s.has_value());
    CHECK(s->pending_stream_frees == during.pending_stream_frees);
  }
  g.open = true;
  held.synchronize();
  (void)staging.trim();  // takes in the completed free
  CHECK(staging.stats().pending_stream_frees == 0);
  CHECK(staging.stats().allocated_bytes == before.allocated_bytes);
  CHECK(dk::to_host(placed) == tree);
  // The host's figures include the staging pool; the report shows it.
  dk::device_manager<> dm;
  CHECK(dm.memory_stats(dk::device::cpu(), dk::memory_kind::pinned_host).num_allocs >=
        staging.stats().allocation_count);
  REQUIRE(dm.report().staging.has_value());
  std::ostringstream os;
  dk::print_device_info(dm, os);
  CHECK(os.str().find("Pinned Staging:") != std::string::npos);
}

TEST_CASE("device-to-host transfers come down in chunks through two staging buffers", "[sim][place][registry]") {
  const dk::device gpu = dk::device::cuda(0);
  const auto tree = big_tree(3, (std::size_t{2} << 20) + 3);  // 24 MiB + 36 bytes: four chunks
  const auto placed = dk::place(tree, gpu);
  dk::device_memory& staging = dk::staging_memory();
  (void)staging.trim();
  const auto before = staging.stats();
  staging.reset_peak_stats();
  const auto transfers_before = dk::detail::stats().device_to_host_transfers.load();
  CHECK(dk::to_host(placed) == tree);
  CHECK(dk::detail::stats().device_to_host_transfers.load() > transfers_before);
  // Two chunk buffers at most, never the whole transfer.
  CHECK(staging.stats().peak_allocated_bytes - before.allocated_bytes <= 2 * dk::detail::staging_chunk_bytes);
  CHECK(staging.stats().allocated_bytes == before.allocated_bytes);
}

TEST_CASE("batched-copy scratch comes from the device's pool and is counted as scratch", "[sim][place][registry]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  constexpr std::size_t count = 4;
  std::vector<dk::device_array<float>> src;
  std::vector<dk::device_array<float>> dst;
  std::vector<const void*> srcs;
  std::vector<void*> dsts;
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < count; ++i) {
    src.push_back(dk::place(ramp(32, static_cast<float>(i)), gpu));
    dst.push_back(dk::place(std::vector<float>(32, 0.f), gpu));
    srcs.push_back(src.back().data());
    dsts.push_back(const_cast<float*>(dst.back().data()));
    sizes.push_back(src.back().size_bytes());
  }
  dk::device_memory& pool = dk::default_memory(gpu);
  const auto scratch_before = dk::scratch_memory_stats(gpu);
  const auto pool_before = pool.stats();
  std::size_t in_use_during = 0;
  std::size_t pool_during = 0;
  dk::detail::batched_copy_plumbing(
      srcs.data(), dsts.data(), sizes.data(), count, s.native_handle(), [] { return std::size_t{10000}; },
      [&](const void* const*, void* const*, const std::size_t*, void*, std::size_t) {
        in_use_during = dk::scratch_memory_stats(gpu).in_use_bytes;
        pool_during = pool.stats().allocated_bytes;
        cudaError_t r = cudaSuccess;
        for (std::size_t i = 0; i < count && r == cudaSuccess; ++i) {
          r = cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyDeviceToDevice, s.native_handle());
        }
        return r;
      });
  s.synchronize();
  const std::size_t tables = (3 * count * sizeof(void*) + 255) / 256 * 256;
  CHECK(in_use_during - scratch_before.in_use_bytes == tables + 10000);
  CHECK(pool_during - pool_before.allocated_bytes == tables + 10000);  // the device's pool
  const auto after = dk::scratch_memory_stats(gpu);
  CHECK(after.allocations == scratch_before.allocations + 1);
  CHECK(after.in_use_bytes == scratch_before.in_use_bytes);
  CHECK(after.peak_bytes >= tables + 10000);
  CHECK(pool.stats().allocated_bytes == pool_before.allocated_bytes);
  for (std::size_t i = 0; i < count; ++i) CHECK(dk::to_host(dst[i]) == ramp(32, static_cast<float>(i)));
  // The manager's report and memory_stats(dev) see it.
  dk::device_manager<> dm;
  const auto r = dm.report();
  REQUIRE(r.memory_of(gpu) != nullptr);
  CHECK(r.memory_of(gpu)->scratch_allocations == after.allocations);
  CHECK(dm.memory_stats(gpu).num_allocs >= pool.stats().allocation_count);
}

TEST_CASE("placing with memory_kind::pinned_host keeps the device and puts the bytes in pinned memory",
          "[sim][place][memory_kind]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const auto tree = std::make_tuple(ramp(5000, 2.f), std::vector<int>{4, 5, 6}, 1.5);
  dk::device_memory& pinned = dk::default_memory(gpu, dk::memory_kind::pinned_host);
  CHECK(&pinned != &dk::default_memory(gpu));
  CHECK(&pinned != &dk::staging_memory());
  const auto before = pinned.stats().allocated_bytes;
  {
    const auto placed = dk::place(tree, gpu, dk::memory_kind::pinned_host);
    CHECK(dk::device_of(placed) == gpu);  // the leaves belong to the device, as in JAX
    CHECK(pinned.stats().allocated_bytes > before);
    cudaPointerAttributes attr{};
    REQUIRE(cudaPointerGetAttributes(&attr, std::get<0>(placed).data()) == cudaSuccess);
    CHECK(attr.type == cudaMemoryTypeHost);
    CHECK(dk::to_host(placed) == tree);
    // Onto the device's memory and back into pinned memory from there.
    const auto on_device = dk::place(placed, gpu);
    REQUIRE(cudaPointerGetAttributes(&attr, std::get<0>(on_device).data()) == cudaSuccess);
    CHECK(attr.type == cudaMemoryTypeDevice);
    CHECK(dk::to_host(on_device) == tree);
    const auto pinned_again = dk::place(on_device, gpu, dk::memory_kind::pinned_host);
    CHECK(dk::to_host(pinned_again) == tree);
    // A manager's own pinned pool, and its figures under the kind.
    dk::device_manager<> dm;
    const auto mine = dm.place(tree, gpu, dk::memory_kind::pinned_host);
    CHECK(dm.memory_stats(gpu, dk::memory_kind::pinned_host).bytes_in_use >= 5000 * sizeof(float));
    CHECK(dm.memory_stats(dk::device::cpu()).bytes_in_use >= 2 * 5000 * sizeof(float));  // pinned memory is host memory
    CHECK(dk::to_host(mine) == tree);
  }
  CHECK(pinned.stats().allocated_bytes == before);
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

#if DEVICEKIT_HAS_NCCL
TEST_CASE("NCCL's scratch comes from the device's pool and is counted as scratch", "[sim][nccl][registry]") {
  std::vector<dk::device> devs;
  for (int g = 0; g < sim::device_count(); ++g) devs.push_back(dk::device::cuda(g));
  std::vector<dk::scratch_stats> before;
  for (const auto d : devs) before.push_back(dk::scratch_memory_stats(d));
  {
    auto comm = dk::nccl_communicator::init_all(devs);
    std::vector<std::tuple<dk::device_array<float>>> trees;
    for (const auto d : devs) trees.emplace_back(dk::place(std::vector<float>(64, 1.f), d));
    dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum);
    CHECK(dk::to_host(std::get<0>(trees[0])) == std::vector<float>(64, static_cast<float>(devs.size())));
    for (std::size_t i = 0; i < devs.size(); ++i) {
      const auto during = dk::scratch_memory_stats(devs[i]);
      CHECK(during.allocations > before[i].allocations);
      CHECK(during.in_use_bytes > before[i].in_use_bytes);  // kept by the communicator
    }
  }
  for (std::size_t i = 0; i < devs.size(); ++i) {
    CHECK(dk::scratch_memory_stats(devs[i]).in_use_bytes == before[i].in_use_bytes);  // given back with it
  }
}
#endif
