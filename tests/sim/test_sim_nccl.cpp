// devicekit's NCCL layer on simulated GPUs: timeouts and aborts when a peer is gone or a call
// fails half-way, and the scratch NCCL takes from the device's pool.
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#if DEVICEKIT_HAS_NCCL
// A collective whose peer never joins ends in the communicator's timeout and abort: the structure
// check's exchange waits for the all-gather before copying its result to pageable host memory
// (such a copy returns only when done, so it would block the host before the timeout could act).
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

// An NCCL call that fails in the middle of an operation (after earlier buckets went to the peers)
// aborts the communicator, whatever the error: left usable, the peers would wait for the rest for
// ever.
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

// Destroying a communicator with work queued that will never finish (its peer is gone) waits
// under the timeout and aborts, instead of blocking for ever in cudaStreamSynchronize.
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

// A leaf placed with memory kind pinned_host or host stays on its GPU with its bytes in host
// memory (JAX's memory kinds). NCCL's kernels would read pageable host memory as an illegal
// address, which poisons the context; the communicator refuses such a leaf by where its bytes are,
// before any rank moves data, and a host-memory communicator takes it.
TEST_CASE("collectives judge a leaf by where its bytes are: NCCL refuses host memory kinds, the host takes them",
          "[sim][nccl]") {
  const dk::device gpu = dk::device::cuda(0);
  auto comm = dk::nccl_communicator::one_rank(gpu);
  dk::self_communicator host_comm;
  for (const dk::memory_kind kind : {dk::memory_kind::pinned_host, dk::memory_kind::host}) {
    INFO(dk::to_string(kind));
    auto tree = std::make_tuple(dk::place(ramp(64, 1.f), gpu), dk::place(ramp(64, 2.f), gpu, kind));
    try {
      dk::all_reduce(comm, tree, dk::reduce_op::sum);
      FAIL("NCCL all-reduced a leaf whose bytes are host memory");
    } catch (const dk::config_error& e) {
      CHECK_THAT(e.what(), Catch::Contains("'[1]'") && Catch::Contains("host memory") &&
                               Catch::Contains("NCCL local rank 0 cannot use"));
    }
    CHECK(dk::to_host(std::get<1>(tree)) == ramp(64, 2.f));  // untouched
    auto on_host = std::make_tuple(dk::place(ramp(64, 3.f), gpu, kind));
    const auto gathered = dk::all_gathered(host_comm, on_host);
    CHECK(std::get<0>(gathered) == ramp(64, 3.f));
    CHECK_THROWS_AS(dk::all_gathered(host_comm, tree), dk::config_error);  // leaf [0] is device memory
  }
  auto fine = dk::place(std::make_tuple(ramp(64, 1.f)), gpu);
  dk::all_reduce(comm, fine, dk::reduce_op::sum);  // the communicator is still usable
  CHECK(dk::to_host(std::get<0>(fine)) == ramp(64, 1.f));
}

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

namespace {
std::uint64_t nccl_bytes(dk::device d) {
  for (const auto& c : dk::device_client_stats(d)) {
    if (c.client == "nccl") return c.bytes_in_use;
  }
  return 0;
}
}  // namespace

TEST_CASE("NCCL's device memory is the client nccl of each device, measured and given back", "[sim][nccl][clients]") {
  std::vector<dk::device> devs;
  for (int g = 0; g < sim::device_count(); ++g) devs.push_back(dk::device::cuda(g));
  std::vector<std::uint64_t> before;
  for (const auto d : devs) before.push_back(nccl_bytes(d));
  {
    auto comm = dk::nccl_communicator::init_all(devs);
    std::vector<std::uint64_t> made;
    for (std::size_t i = 0; i < devs.size(); ++i) {
      made.push_back(nccl_bytes(devs[i]));
      CHECK(made[i] - before[i] == (8u << 20));  // the simulator's communicator: 8 MiB on its device
    }
    std::vector<std::tuple<dk::device_array<float>>> trees;
    for (const auto d : devs) trees.emplace_back(dk::place(std::vector<float>(64, 1.f), d));
    dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum);
    std::vector<std::uint64_t> connected;
    for (std::size_t i = 0; i < devs.size(); ++i) {
      connected.push_back(nccl_bytes(devs[i]));
      if (devs.size() > 1) {
        // NCCL connects the peers' buffers at the first collective of each kind (2 channels x a send
        // and a receive buffer of 4 MiB per ring neighbour, in the simulator's model).
        const std::uint64_t per_kind = 2u * std::min<std::uint64_t>(devs.size() - 1, 2) * 2u * (4u << 20);
        CHECK(connected[i] > made[i]);
        CHECK((connected[i] - made[i]) % per_kind == 0);
      } else {
        CHECK(connected[i] == made[i]);  // one rank has no peer to connect
      }
      // The same figures in the manager's memory_stats and in its report's JSON.
      bool listed = false;
      for (const auto& c : dk::memory_stats(devs[i]).clients)
        listed = listed || (c.client == "nccl" && c.bytes_in_use >= connected[i] - before[i]);
      CHECK(listed);
    }
    dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum);  // already connected
    for (std::size_t i = 0; i < devs.size(); ++i) CHECK(nccl_bytes(devs[i]) == connected[i]);
  }
  for (std::size_t i = 0; i < devs.size(); ++i) CHECK(nccl_bytes(devs[i]) == before[i]);  // given back with it
}

TEST_CASE("the budget holds across clients: NCCL's memory past the reserve makes a pool's budget smaller",
          "[sim][nccl][clients]") {
  const dk::device gpu = dk::device::cuda(0);
  dk::pool_config config;
  config.max_size = 64u << 20;  // no reserve for collectives: all of NCCL's memory is charged
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), config};
  const std::size_t big = 60u << 20;
  {
    auto comm = dk::nccl_communicator::one_rank(gpu);  // 8 MiB of NCCL's on cuda:0
    REQUIRE(nccl_bytes(gpu) >= (8u << 20));
    try {
      void* p = pool.allocate(big);
      pool.deallocate(p, big);
      FAIL("60 MiB fit a 64 MiB budget while NCCL held 8 MiB of the device beside it");
    } catch (const dk::out_of_memory& e) {
      CHECK_THAT(e.what(), Catch::Contains("other clients hold that much of the device"));
    }
    pool.check_consistency();
  }
  void* p = pool.allocate(big);  // NCCL's memory went with its communicator
  pool.deallocate(p, big);
}
#endif
