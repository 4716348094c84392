// devicekit's NCCL collectives inside CUDA stream capture on simulated GPUs: a captured
// all-reduce of a placed tree replays at every launch of its graph (one local rank, two local
// ranks of one ncclCommInitAll communicator, two one-rank communicators of one clique), and what
// needs the host inside a capture is refused with capture_error. The simulator records captured
// NCCL operations and performs them at each launch, meeting the peers' launches (sim/README.md).
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#if DEVICEKIT_HAS_NCCL
namespace {

/// Two leaves of different lengths: one bucket, packed through the staging buffers.
using step_tree = std::tuple<dk::device_array<float>, dk::device_array<float>>;

constexpr std::size_t len0 = 64;
constexpr std::size_t len1 = 100;

step_tree zero_tree(dk::device d) {
  return {dk::place(std::vector<float>(len0, 0.f), d), dk::place(std::vector<float>(len1, 0.f), d)};
}

/// Rank r's values at step k: leaf 0 element i is k + 10 r + i, leaf 1 element i is 3 k - r + 0.5 i.
std::vector<float> values(int leaf, int k, int r) {
  std::vector<float> v(leaf == 0 ? len0 : len1);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto x = static_cast<float>(i);
    v[i] = leaf == 0 ? static_cast<float>(k + 10 * r) + x : static_cast<float>(3 * k - r) + 0.5f * x;
  }
  return v;
}

/// The sum over `ranks` ranks of values(leaf, k, r).
std::vector<float> sum_of(int leaf, int k, int ranks) {
  std::vector<float> s = values(leaf, k, 0);
  for (int r = 1; r < ranks; ++r) {
    const auto v = values(leaf, k, r);
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += v[i];
  }
  return s;
}

/// Rank r's values of step k written into `t` on `s`; `host` keeps the bytes until `s` is done.
void write_step(step_tree& t, int k, int r, const dk::stream& s, std::vector<float> (&host)[2]) {
  host[0] = values(0, k, r);
  host[1] = values(1, k, r);
  const dk::scoped_device on(s.get_device().ordinal());
  REQUIRE(cudaMemcpyAsync(std::get<0>(t).data(), host[0].data(), len0 * sizeof(float), cudaMemcpyHostToDevice,
                          s.native_handle()) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(std::get<1>(t).data(), host[1].data(), len1 * sizeof(float), cudaMemcpyHostToDevice,
                          s.native_handle()) == cudaSuccess);
}

/// A leaf's values, by a plain synchronous copy (the callers have synchronised its stream; two
/// threads read at once in one case, each its own leaf).
std::vector<float> read(const dk::device_array<float>& a, std::size_t n) {
  std::vector<float> h(n);
  const dk::scoped_device on(a.device().ordinal());
  REQUIRE(cudaMemcpy(h.data(), a.data(), n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

void check_step(const step_tree& t, int k, int ranks) {
  CHECK(read(std::get<0>(t), len0) == sum_of(0, k, ranks));
  CHECK(read(std::get<1>(t), len1) == sum_of(1, k, ranks));
}

}  // namespace

TEST_CASE("NCCL capture: a one-rank communicator's captured all-reduce replays at every launch", "[sim][nccl][graph]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);  // made first, so that it outlives the communicator that uses it
  auto comm = dk::nccl_communicator::one_rank(gpu);
  comm.set_stream(0, dk::stream_ref(s));
  step_tree tree = zero_tree(gpu);
  dk::all_reduce(comm, tree, dk::reduce_op::sum);  // eager, once: the staging buffers exist
  dk::graph g = dk::capture(s, [&] { dk::all_reduce(comm, tree, dk::reduce_op::sum); });
  std::vector<float> host[2];
  for (int k = 0; k < 100; ++k) {
    write_step(tree, k, 0, s, host);
    g.launch(s);
    s.synchronize();
    check_step(tree, k, 1);
  }
  comm.check_async_errors();
  CHECK(g.launches() == 100);
}

TEST_CASE("NCCL capture: two local ranks' captured all-reduce meets at every launch", "[sim][nccl][graph][multi]") {
  const std::vector<dk::device> devs{dk::device::cuda(0), dk::device::cuda(1)};
  const dk::stream s0(devs[0]);
  const dk::stream s1(devs[1]);
  auto comm = dk::nccl_communicator::init_all(devs);
  comm.set_stream(0, dk::stream_ref(s0));
  comm.set_stream(1, dk::stream_ref(s1));
  std::vector<step_tree> trees;
  for (const auto d : devs) trees.push_back(zero_tree(d));
  dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum);
  // Both streams capture at once (a capture on s1 nested in the one on s0): one graph per device.
  std::optional<dk::graph> g1;
  dk::graph g0 = dk::capture(
      s0, [&] { g1 = dk::capture(s1, [&] { dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum); }); });
  std::vector<float> host0[2];
  std::vector<float> host1[2];
  for (int k = 0; k < 100; ++k) {
    write_step(trees[0], k, 0, s0, host0);
    write_step(trees[1], k, 1, s1, host1);
    g0.launch(s0);
    g1->launch(s1);
    s0.synchronize();
    s1.synchronize();
    check_step(trees[0], k, 2);
    check_step(trees[1], k, 2);
  }
  comm.check_async_errors();
  // Between launches the communicator works eagerly as before.
  write_step(trees[0], 7, 0, s0, host0);
  write_step(trees[1], 7, 1, s1, host1);
  dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum);
  check_step(trees[0], 7, 2);
}

TEST_CASE("NCCL capture: one-rank communicators of two threads replay without the structure check",
          "[sim][nccl][graph][multi]") {
  const ncclUniqueId id = dk::nccl_communicator::unique_id();
  std::atomic<int> ready{0};
  const auto rank_body = [&](int r, std::string& refusal) {
    const dk::device gpu = dk::device::cuda(r);
    const dk::stream s(gpu);
    auto comm = dk::nccl_communicator::init_rank(id, 2, r, gpu);
    comm.set_stream(0, dk::stream_ref(s));
    step_tree tree = zero_tree(gpu);
    dk::all_reduce(comm, tree, dk::reduce_op::sum);  // eager: checks the structure, sizes the staging
    // The structure check reads the other rank's summary on the host: refused before anything is
    // queued, so the peer is not left waiting.
    refusal = capture_refusal([&] { (void)dk::capture(s, [&] { dk::all_reduce(comm, tree); }); });
    dk::collective_options o = comm.options();
    o.check_structure = false;
    comm.set_options(o);
    dk::graph g = dk::capture(s, [&] { dk::all_reduce(comm, tree, dk::reduce_op::sum); });
    ++ready;
    while (ready.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<float> host[2];
    for (int k = 0; k < 20; ++k) {
      write_step(tree, k, r, s, host);
      g.launch(s);
      s.synchronize();
      check_step(tree, k, 2);
    }
    comm.check_async_errors();
  };
  std::string refusal0;
  std::string refusal1;
  std::string peer_error;
  std::thread peer([&] {
    try {
      rank_body(1, refusal1);
    } catch (const std::exception& e) {  // reported below: an exception must not end the process
      peer_error = e.what();
    }
  });
  rank_body(0, refusal0);
  peer.join();
  CHECK(peer_error.empty());
  for (const auto& m : {refusal0, refusal1}) {
    CHECK(m.find("reads them on the host") != std::string::npos);
    CHECK(m.find("check_structure = false") != std::string::npos);
  }
}

TEST_CASE("NCCL capture: staging buffers that would grow inside a capture are refused", "[sim][nccl][graph]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  auto comm = dk::nccl_communicator::one_rank(gpu);
  comm.set_stream(0, dk::stream_ref(s));
  step_tree tree = zero_tree(gpu);
  const std::string m =
      capture_refusal([&] { (void)dk::capture(s, [&] { dk::all_reduce(comm, tree, dk::reduce_op::sum); }); });
  CHECK(m.find("staging buffer holds 0 bytes") != std::string::npos);
  CHECK(m.find("run this collective once before capturing") != std::string::npos);
  CHECK_FALSE(dk::capture_of(s).active);
  // Run once, the same collective is captured and replays.
  dk::all_reduce(comm, tree, dk::reduce_op::sum);
  dk::graph g = dk::capture(s, [&] { dk::all_reduce(comm, tree, dk::reduce_op::sum); });
  std::vector<float> host[2];
  write_step(tree, 3, 0, s, host);
  g.launch(s);
  s.synchronize();
  check_step(tree, 3, 1);
}

TEST_CASE("NCCL capture: a graph keeps the staging buffers it captured when eager calls grow them",
          "[sim][nccl][graph]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  auto comm = dk::nccl_communicator::one_rank(gpu);
  comm.set_stream(0, dk::stream_ref(s));
  step_tree tree = zero_tree(gpu);
  dk::all_reduce(comm, tree, dk::reduce_op::sum);
  dk::graph g = dk::capture(s, [&] { dk::all_reduce(comm, tree, dk::reduce_op::sum); });
  // A bucket larger than the 1 MiB staging buffer makes it grow to 2 MiB; the graph's 1 MiB buffer
  // is kept (still counted as scratch), not given back.
  const std::size_t before = dk::scratch_memory_stats(gpu).in_use_bytes;
  auto big =
      std::make_tuple(dk::place(std::vector<float>(300000, 1.f), gpu), dk::place(std::vector<float>(10, 2.f), gpu));
  dk::all_reduce(comm, big, dk::reduce_op::sum);
  CHECK(dk::to_host(std::get<1>(big)) == std::vector<float>(10, 2.f));
  CHECK(dk::scratch_memory_stats(gpu).in_use_bytes == before + (std::size_t{2} << 20));
  std::vector<float> host[2];
  write_step(tree, 5, 0, s, host);
  g.launch(s);
  s.synchronize();
  check_step(tree, 5, 1);
}

TEST_CASE("NCCL capture: some local ranks capturing and others not is refused", "[sim][nccl][graph][multi]") {
  const std::vector<dk::device> devs{dk::device::cuda(0), dk::device::cuda(1)};
  const dk::stream s0(devs[0]);
  const dk::stream s1(devs[1]);
  auto comm = dk::nccl_communicator::init_all(devs);
  comm.set_stream(0, dk::stream_ref(s0));
  comm.set_stream(1, dk::stream_ref(s1));
  std::vector<step_tree> trees;
  for (const auto d : devs) trees.push_back(zero_tree(d));
  dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum);
  const std::string m = capture_refusal(
      [&] { (void)dk::capture(s1, [&] { dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum); }); });
  CHECK(m.find("local rank(s) 1 are being captured and those of local rank(s) 0 are not") != std::string::npos);
  CHECK(m.find("capture the streams of every local rank together") != std::string::npos);
  CHECK_FALSE(dk::capture_of(s1).active);
  std::vector<float> host0[2];
  std::vector<float> host1[2];
  write_step(trees[0], 2, 0, s0, host0);
  write_step(trees[1], 2, 1, s1, host1);
  dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum);  // nothing was left half-done
  check_step(trees[1], 2, 2);
}
#endif
