// The copy engine under placement on simulated GPUs: pinned staging (sized, chunked, given back in
// stream order, kept under queued copies), moves between devices with and without peer access, and
// the host side of batched copies; none of it may wait on the host for a busy stream.
#include <catch2/catch.hpp>

#include "../common/copy_threads.hpp"
#include "sim_devicekit_support.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

// A device-to-host transfer that fails half-way keeps its pinned staging until the copies already
// queued into it have run: back in the cache at once, the next placement would stage its data
// there and send the stale bytes to the device.
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

// Device-to-host transfers pin a chunk at a time, not their whole size, and every host wait on the
// way blocks instead of spinning (cudaEventBlockingSync): a 40 MiB tree comes down in 8 MiB
// chunks through two buffers.
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

// Staging comes from the process's pinned pool (memory/registry.hpp), so its stats and the report
// see it.
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
  // 2000004 bytes: neither a power of two nor 256-aligned, and under pipelined_stage_min_bytes, so
  // staged in one buffer.
  const std::vector<float> tree = ramp(500001, 1.f);
  REQUIRE(tree.size() * sizeof(float) <= dk::detail::pipelined_stage_min_bytes);
  auto placed = dk::place(tree, gpu, held);  // its copy waits behind the gate
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

// A move between devices without peer access goes in chunks, the destination stream waiting for
// each chunk's download on an event: the host waits for neither stream. Meaningful in the run
// without peer access (sim.devicekit.gpus2_no_peer); elsewhere it checks the peer path.
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

// A batched copy (batched_copy, whose CUB kernel the simulator cannot run: its host side is
// detail::batched_copy_plumbing, tested here with a stand-in launch) selects its stream's device,
// not whatever device is current, and takes its tables and scratch from that device's devicekit
// pool, not the driver's default pool (release threshold 0: back to the system at every
// synchronisation).
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

// Scratch comes from the device's devicekit pool and is counted as scratch in its stats and the
// manager's report.
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

// Two threads bringing trees back at once, each from its own device (both from cuda:0 on one
// GPU): the process's pinned staging pool is shared, and a buffer one thread's copy still writes
// must not be handed to the other.
TEST_CASE("to_host from two threads at once: each gets its own data, no stream-order race", "[sim][place][threads]") {
  const std::size_t violations_before = sim::violations().size();
  std::atomic<int> wrong{0};
  auto work = [&](int t) {
    const dk::device dev = dk::device::cuda(t % sim::device_count());
    for (int i = 0; i < 40; ++i) {
      const auto host = ramp(1000 + static_cast<std::size_t>(t) * 24, static_cast<float>(t * 1000 + i));
      const auto placed = dk::place(host, dev);
      if (dk::to_host(placed) != host) ++wrong;
    }
  };
  std::thread a(work, 0);
  std::thread b(work, 1);
  a.join();
  b.join();
  CHECK(wrong.load() == 0);
  CHECK(sim::violations().size() == violations_before);
}

// Pageable transfers split each chunk's packing (host to device) and unpacking (device to host)
// over the copy threads: every byte lands where it belongs, and the race detector sees the threads'
// writes of pinned staging ordered before the copies that read it and after the copies that filled
// it. A 24 MiB tree goes in three chunks, each split in four; a tree of 64 leaves of 64 KiB in one
// staging buffer split across leaves; a host tree sharded over every GPU is packed the same way.
TEST_CASE("staged transfers share their packing over the copy threads", "[sim][place][threads]") {
  const dk::testing::scoped_copy_threads use(4);
  const std::size_t violations_before = sim::violations().size();
  const auto& workers = dk::detail::copy_workers::instance();
  const dk::device gpu = dk::device::cuda(0);

  const auto big = big_tree(3, (std::size_t{2} << 20) + 3);
  auto shared_before = workers.shared_jobs();
  const auto placed = dk::place(big, gpu);
  CHECK(workers.shared_jobs() >= shared_before + 3);  // each chunk's packing
  shared_before = workers.shared_jobs();
  CHECK(dk::to_host(placed) == big);
  CHECK(workers.shared_jobs() >= shared_before + 3);  // each chunk's unpacking

  const auto many = big_tree(64, std::size_t{16} << 10);
  shared_before = workers.shared_jobs();
  CHECK(dk::to_host(dk::place(many, gpu)) == many);
  CHECK(workers.shared_jobs() >= shared_before + 2);

  const auto gpus = all_gpus();
  const std::size_t rows = (std::size_t{1} << 18) * gpus.size();  // 1 MiB of floats per GPU and leaf
  const auto host = std::make_tuple(ramp(rows, 0.5f), ramp(rows, -7.f));
  const auto sharded = dk::shard(host, gpus);
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const auto part = dk::to_host(sharded.trees[i]);
    const std::size_t from = i * (rows / gpus.size());
    CHECK(std::get<0>(part) ==
          std::vector<float>(std::get<0>(host).begin() + static_cast<std::ptrdiff_t>(from),
                             std::get<0>(host).begin() + static_cast<std::ptrdiff_t>(from + rows / gpus.size())));
    CHECK(std::get<1>(part) ==
          std::vector<float>(std::get<1>(host).begin() + static_cast<std::ptrdiff_t>(from),
                             std::get<1>(host).begin() + static_cast<std::ptrdiff_t>(from + rows / gpus.size())));
  }
  CHECK(sim::violations().size() == violations_before);
}

// place(tree, dev, stream) takes fresh pinned staging while its stream is busy, but never more than
// detail::max_staging_in_flight (256 MiB, docs/placement.md): past that it waits for the oldest
// chunk's copy, so a large placement on a stalled stream does not pin host memory without bound.
TEST_CASE("a placement on a stalled stream holds at most 256 MiB of staging, then waits for its copies",
          "[sim][place]") {
  constexpr std::size_t cap = dk::detail::max_staging_in_flight;
  constexpr std::size_t chunk = dk::detail::staging_chunk_bytes;
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  dk::device_memory& staging = dk::staging_memory();
  (void)staging.trim();  // takes in completed frees of earlier tests
  const std::size_t allocated_before = staging.stats().allocated_bytes;
  staging.reset_peak_stats();
  const auto tree = big_tree(40, chunk / sizeof(float));  // 320 MiB in 8 MiB leaves: past the cap
  REQUIRE(40 * chunk > cap);
  const dk::stream stalled(gpu);
  gate g;
  REQUIRE(cudaLaunchHostFunc(stalled.native_handle(), gate::hold, &g) == cudaSuccess);
  std::optional<dk::placed_t<decltype(tree)>> placed;
  {
    timed_call call([&] { placed.emplace(dk::place(tree, gpu, stalled)); });
    // Packing fills staging up to the cap, then the placement waits for a copy that cannot run.
    const auto t0 = std::chrono::steady_clock::now();
    while (staging.stats().allocated_bytes - allocated_before + chunk <= cap &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(8)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const std::size_t held = staging.stats().allocated_bytes - allocated_before;
    CHECK(held + chunk > cap);                                          // it reached the cap...
    CHECK(held <= cap);                                                 // ...and went no further
    CHECK_FALSE(call.finished_within(std::chrono::milliseconds(200)));  // waiting for the stream
    g.open = true;
    CHECK(call.finished_within(std::chrono::seconds(20)));
  }
  stalled.synchronize();
  CHECK(staging.stats().peak_allocated_bytes - allocated_before <= cap);
  REQUIRE(placed.has_value());
  CHECK(dk::to_host(*placed) == tree);
}
