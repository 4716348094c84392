// NCCL failures that a machine with GPUs cannot provoke on demand: a peer that reports an
// asynchronous error, or one that silently never completes (a dead peer), injected into the
// simulated NCCL (control.hpp: nccl_async_error_after, nccl_hang_after). First the simulator's
// own model of them, at the level of the NCCL API; then devicekit's NCCL layer
// (distribute/nccl.hpp) over every simulated GPU, which must turn each into a prompt
// communication_error and an abort, never a hang. Run with 2 and 4 simulated GPUs ([multi]).
// A watchdog ends the process (status 3) if a call that must return does not, so that a hang
// fails the test quickly and says where.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>
#include <devicekit/distribute/nccl.hpp>
#include <devicekit/distribute/tree_collectives.hpp>

#include "sim_test_support.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#if DEVICEKIT_HAS_NCCL

namespace dk = devicekit;
namespace sim = devicekit::cuda_sim;
using namespace std::chrono_literals;

namespace {

/// Ends the process if it is not destroyed within `limit`: what it guards hung.
class watchdog {
 public:
  watchdog(std::string what, std::chrono::seconds limit)
      : thread_([this, what = std::move(what), limit] {
          std::unique_lock lk(m_);
          if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
            std::fprintf(stderr, "HANG: %s did not return within %lld s\n", what.c_str(),
                         static_cast<long long>(limit.count()));
            std::fflush(stderr);
            std::_Exit(3);
          }
        }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      std::lock_guard lk(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

/// `n` floats of device memory on `ordinal`, filled with `value`.
class dev_floats {
 public:
  dev_floats(int ordinal, std::size_t n, float value) : n_(n) {
    dk::scoped_device on(ordinal);
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(float)));
    const std::vector<float> h(n, value);
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(p_, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  dev_floats(const dev_floats&) = delete;
  dev_floats& operator=(const dev_floats&) = delete;
  ~dev_floats() { (void)cudaFree(p_); }
  [[nodiscard]] std::vector<float> host() const {
    std::vector<float> h(n_);
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  [[nodiscard]] float* data() const noexcept { return p_; }
  [[nodiscard]] dk::leaf_span span() const { return dk::leaf_span::of(std::span<float>(p_, n_)); }

 private:
  std::size_t n_;
  float* p_ = nullptr;
};

std::vector<dk::device> all_gpus() {
  std::vector<dk::device> devs;
  for (int g = 0; g < sim::device_count(); ++g) devs.push_back(dk::device::cuda(g));
  return devs;
}

/// A communicator over every simulated GPU with the given timeout, in an optional so that a case
/// can release it under a watchdog.
std::optional<dk::nccl_communicator> comm_of_all_gpus(std::chrono::milliseconds timeout) {
  auto comm = std::make_optional(dk::nccl_communicator::init_all(all_gpus()));
  comm->set_timeout(timeout);
  return comm;
}

/// Whether every stream completes within `limit` (polled: a stuck stream fails the check, it does
/// not hang the test).
bool streams_drain(const std::vector<cudaStream_t>& streams, std::chrono::milliseconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  for (cudaStream_t s : streams) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady || std::chrono::steady_clock::now() - t0 > limit) return false;
      std::this_thread::sleep_for(1ms);
    }
  }
  return true;
}

/// What a devicekit NCCL call threw: the communication_error's text, code and rank.
struct comm_failure {
  std::string what;
  int code = 0;
  int rank = -1;
};

/// Runs `op` under a watchdog named `label`; the communication_error it throws, if any (an empty
/// `what` when it throws none).
template <class F>
comm_failure failure_of(const std::string& label, F op) {
  watchdog w(label, 30s);
  comm_failure f;
  try {
    op();
  } catch (const dk::communication_error& e) {
    f.what = e.what();
    f.code = e.code();
    f.rank = e.rank();
  }
  return f;
}

std::vector<cudaStream_t> streams_of(const dk::nccl_communicator& comm) {
  std::vector<cudaStream_t> out;
  for (int p = 0; p < comm.local_ranks(); ++p) out.push_back(comm.stream(p));
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The simulator's NCCL at the API level: one communicator per GPU, a stream and a buffer each.
struct raw_clique {
  int n = sim::device_count();
  std::vector<ncclComm_t> comms = std::vector<ncclComm_t>(static_cast<std::size_t>(n), nullptr);
  std::vector<cudaStream_t> streams = std::vector<cudaStream_t>(static_cast<std::size_t>(n), nullptr);
  std::vector<std::unique_ptr<dev_floats>> bufs;
  raw_clique() {
    REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
    for (int g = 0; g < n; ++g) {
      dk::scoped_device on(g);
      REQUIRE(cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(g)], cudaStreamNonBlocking) == cudaSuccess);
      bufs.push_back(std::make_unique<dev_floats>(g, 16, 1.0f));
    }
  }
  raw_clique(const raw_clique&) = delete;
  raw_clique& operator=(const raw_clique&) = delete;
  ~raw_clique() {
    for (auto* c : comms) {
      if (c != nullptr) (void)ncclCommDestroy(c);
    }
    for (int g = 0; g < n; ++g) {
      dk::scoped_device on(g);
      (void)cudaStreamDestroy(streams[static_cast<std::size_t>(g)]);
    }
  }
  void all_reduce() {
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (int g = 0; g < n; ++g) {
      const auto i = static_cast<std::size_t>(g);
      REQUIRE(ncclAllReduce(bufs[i]->data(), bufs[i]->data(), 16, ncclFloat32, ncclSum, comms[i], streams[i]) ==
              ncclSuccess);
    }
    REQUIRE(ncclGroupEnd() == ncclSuccess);
  }
  ncclResult_t async_error(int g) {
    ncclResult_t r = ncclSuccess;
    REQUIRE(ncclCommGetAsyncError(comms[static_cast<std::size_t>(g)], &r) == ncclSuccess);
    return r;
  }
  void abort_all() {
    for (auto& c : comms) {
      REQUIRE(ncclCommAbort(c) == ncclSuccess);
      c = nullptr;
    }
  }
};

}  // namespace

// --- the simulator's model of the faults ---------------------------------------------------------

// Guards nccl_async_error_after itself: `ops` operations complete, the next one reports the error
// once its stream reaches it (not before), holds its stream and its peers, and ncclCommAbort lets
// the work queued behind it run.
TEST_CASE("simulated NCCL: an asynchronous error after k operations, reported when reached, cleared by abort",
          "[sim][multi][nccl_fault]") {
  raw_clique c;
  const int last = c.n - 1;
  const auto li = static_cast<std::size_t>(last);
  sim::nccl_async_error_after(last, 1);
  sim_test::gate g;
  {
    dk::scoped_device on(last);
    REQUIRE(cudaLaunchHostFunc(c.streams[li], sim_test::gate::hold, &g) == cudaSuccess);
  }
  c.all_reduce();  // operation 1: completes
  c.all_reduce();  // operation 2: the faulty one on the last rank
  std::atomic<int> behind{0};
  {
    dk::scoped_device on(last);
    REQUIRE(cudaLaunchHostFunc(c.streams[li], sim_test::set_flag, &behind) == cudaSuccess);
  }
  std::this_thread::sleep_for(20ms);
  CHECK(c.async_error(last) == ncclSuccess);  // its stream has not reached the operation yet
  g.open = true;
  const auto t0 = std::chrono::steady_clock::now();
  while (c.async_error(last) == ncclSuccess && seconds_since(t0) < 10) std::this_thread::sleep_for(1ms);
  CHECK(c.async_error(last) == ncclSystemError);
  CHECK(std::string(ncclGetLastError(c.comms[li])).find("simulated asynchronous error on rank") != std::string::npos);
  CHECK(cudaStreamQuery(c.streams[0]) == cudaErrorNotReady);   // rank 0 waits for the faulty rank
  CHECK(cudaStreamQuery(c.streams[li]) == cudaErrorNotReady);  // the faulty rank never completes
  CHECK(behind.load() == 0);
  c.abort_all();
  CHECK(streams_drain(c.streams, 10s));
  CHECK(behind.load() == 1);
  // Read once the streams have drained: before, the second all-reduce, which writes this buffer,
  // was still queued on rank 0's stream, and a read then is unordered with it (the simulator's
  // race detector reports it). The aborted operation wrote nothing: the first one's sum is there.
  CHECK(c.bufs[0]->host() == std::vector<float>(16, static_cast<float>(c.n)));
}

// Guards nccl_hang_after: the operation never completes and nothing is ever reported (a dead
// peer) until the abort.
TEST_CASE("simulated NCCL: a hang reports nothing and holds the streams until abort", "[sim][multi][nccl_fault]") {
  raw_clique c;
  sim::nccl_hang_after(0, 0);
  c.all_reduce();
  std::this_thread::sleep_for(50ms);
  for (int g = 0; g < c.n; ++g) {
    CHECK(c.async_error(g) == ncclSuccess);
    CHECK(cudaStreamQuery(c.streams[static_cast<std::size_t>(g)]) == cudaErrorNotReady);
  }
  c.abort_all();
  CHECK(streams_drain(c.streams, 10s));
}

// Guards DEVICEKIT_SIM_NCCL_FAULT (hidden: its own CTest entry sets
// DEVICEKIT_SIM_NCCL_FAULT=0:1:hang,1:1:error). Both faults hit the second operation: device 1
// reports ncclSystemError, device 0 only hangs.
TEST_CASE("simulated NCCL: faults from DEVICEKIT_SIM_NCCL_FAULT", "[.][nccl_fault_env]") {
  raw_clique c;
  REQUIRE(c.n >= 2);
  c.all_reduce();
  c.all_reduce();
  const auto t0 = std::chrono::steady_clock::now();
  while (c.async_error(1) == ncclSuccess && seconds_since(t0) < 10) std::this_thread::sleep_for(1ms);
  CHECK(c.async_error(1) == ncclSystemError);
  CHECK(c.async_error(0) == ncclSuccess);
  CHECK(cudaStreamQuery(c.streams[0]) == cudaErrorNotReady);
  c.abort_all();
  CHECK(streams_drain(c.streams, 10s));
}

// --- devicekit's NCCL layer ------------------------------------------------------------------------

// Guards nccl_backend::wait: while it waits for one local rank's stream it must poll the
// asynchronous errors of every local rank. The error is on the last rank while rank 0 (waited
// for first) is blocked in the collective: polling only the rank waited for would sit out the
// whole timeout and report a timeout instead of the error.
TEST_CASE("devicekit NCCL: an asynchronous error on the last local rank throws that error, not a timeout",
          "[sim][multi][nccl_fault]") {
  const int n = sim::device_count();
  auto comm = comm_of_all_gpus(20s);
  std::vector<std::unique_ptr<dev_floats>> bufs;
  std::vector<std::tuple<dk::device_array<float>>> trees;
  for (int g = 0; g < n; ++g) {
    bufs.push_back(std::make_unique<dev_floats>(g, 64, 1.0f));
    trees.emplace_back(dk::device_array<float>::view(bufs.back()->data(), 64, dk::device::cuda(g)));
  }
  dk::all_reduce(*comm, dk::one_per_device(trees), dk::reduce_op::sum);  // works: 2 operations per rank
  CHECK(bufs[0]->host() == std::vector<float>(64, static_cast<float>(n)));

  sim::nccl_async_error_after(n - 1, 1);  // the structure exchange passes, the all-reduce fails
  const auto t0 = std::chrono::steady_clock::now();
  const auto [what, code, rank] = failure_of("all_reduce with an asynchronous error on the last rank", [&] {
    dk::all_reduce(*comm, dk::one_per_device(trees), dk::reduce_op::sum);
  });
  INFO(what);
  CHECK(seconds_since(t0) < 10.0);  // well within the 20 s timeout
  CHECK(code == sim::nccl_system_error);
  CHECK(rank == n - 1);
  CHECK(what.find("ncclCommGetAsyncError") != std::string::npos);
  CHECK(what.find("unhandled system error") != std::string::npos);
  CHECK(what.find("timed out") == std::string::npos);
  CHECK(comm->aborted());
  CHECK(streams_drain(streams_of(*comm), 10s));  // the abort released every rank
  CHECK_THROWS_WITH(dk::all_reduce(*comm, dk::one_per_device(trees)), Catch::Contains("was aborted"));
  {
    watchdog w("destroying the aborted communicator", 30s);
    comm.reset();
  }
}

// Guards the wait itself: a collective whose stream is held up for longer than many of the
// watchdog's looks, but within the timeout, completes without an error or an abort; the host
// waits in cudaStreamSynchronize, as a hand-written program does, and never polls the stream.
TEST_CASE("devicekit NCCL: a collective held up within the timeout completes, waited for without polling",
          "[sim][multi][nccl_fault]") {
  const int n = sim::device_count();
  auto comm = comm_of_all_gpus(5s);
  std::vector<std::unique_ptr<dev_floats>> bufs;
  std::vector<std::vector<dk::leaf_span>> per_rank;
  for (int g = 0; g < n; ++g) {
    bufs.push_back(std::make_unique<dev_floats>(g, 32, 1.0f));
    per_rank.push_back({bufs.back()->span()});
  }
  comm->all_reduce(per_rank);  // the first: the watchdog's thread starts, NCCL connects
  sim_test::gate held;
  {
    dk::scoped_device on(n - 1);
    REQUIRE(cudaLaunchHostFunc(comm->stream(n - 1), sim_test::gate::hold, &held) == cudaSuccess);
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(300ms);
    held.open = true;
  });
  const std::size_t queries_before = sim::api_calls("cudaStreamQuery");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = failure_of("all_reduce held up by a gate", [&] { comm->all_reduce(per_rank); }).what;
  const double waited = seconds_since(t0);
  opener.join();
  CHECK(what.empty());
  CHECK_FALSE(comm->aborted());
  CHECK(waited >= 0.25);  // it did wait for the gate
  CHECK(sim::api_calls("cudaStreamQuery") == queries_before);
  const float expected = static_cast<float>(n) * static_cast<float>(n);
  for (const auto& b : bufs) CHECK(b->host() == std::vector<float>(32, expected));
}

// Guards the timeout: a rank that silently never completes (no error reported) makes the
// collective throw the timeout error and abort; releasing the communicator afterwards must not
// block in cudaStreamSynchronize or ncclCommDestroy on the dead collective.
TEST_CASE("devicekit NCCL: a hung rank times out, aborts, and the communicator is released",
          "[sim][multi][nccl_fault]") {
  const int n = sim::device_count();
  auto comm = comm_of_all_gpus(300ms);
  std::vector<std::unique_ptr<dev_floats>> bufs;
  std::vector<std::vector<dk::leaf_span>> per_rank;
  for (int g = 0; g < n; ++g) {
    bufs.push_back(std::make_unique<dev_floats>(g, 32, 2.0f));
    per_rank.push_back({bufs.back()->span()});
  }
  sim::nccl_hang_after(1, 1);  // rank 1: the structure exchange passes, the all-reduce never ends
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = failure_of("all_reduce with a hung rank", [&] { comm->all_reduce(per_rank); }).what;
  INFO(what);
  CHECK(what.find("timed out after 300 ms") != std::string::npos);
  CHECK(seconds_since(t0) < 10.0);
  CHECK(comm->aborted());
  {
    watchdog w("releasing the communicator after the timeout", 30s);
    const auto t1 = std::chrono::steady_clock::now();
    comm.reset();
    CHECK(seconds_since(t1) < 5.0);
  }
}

// Guards the wait of a process that cannot start the watchdog's thread (out of threads: std::thread
// throws system_error): the collective must still complete, and errors and timeouts must still be
// found, by polling the streams and the communicators, not throw a system_error with the collective
// in flight. The refusal is injected (nccl_watchdog::refused_thread_starts), as running a process out
// of threads would take the test's own threads too.
TEST_CASE("devicekit NCCL: without the watchdog's thread the wait polls, and still finds errors and timeouts",
          "[sim][multi][nccl_fault]") {
  struct refusing {
    refusing() { dk::detail::nccl_watchdog::refused_thread_starts = 1'000'000; }
    ~refusing() { dk::detail::nccl_watchdog::refused_thread_starts = 0; }
  } refuse;
  const int n = sim::device_count();
  const bool hang = GENERATE(false, true);
  INFO((hang ? "a hung rank" : "an asynchronous error"));
  auto comm = comm_of_all_gpus(hang ? 300ms : 20s);
  std::vector<std::unique_ptr<dev_floats>> bufs;
  std::vector<std::vector<dk::leaf_span>> per_rank;
  for (int g = 0; g < n; ++g) {
    bufs.push_back(std::make_unique<dev_floats>(g, 32, 1.0f));
    per_rank.push_back({bufs.back()->span()});
  }
  const std::size_t queries_before = sim::api_calls("cudaStreamQuery");
  CHECK(failure_of("all_reduce without a watchdog thread", [&] { comm->all_reduce(per_rank); }).what.empty());
  CHECK(sim::api_calls("cudaStreamQuery") > queries_before);  // it polled
  for (const auto& b : bufs) CHECK(b->host() == std::vector<float>(32, static_cast<float>(n)));

  if (hang) {
    sim::nccl_hang_after(n - 1, 1);
  } else {
    sim::nccl_async_error_after(n - 1, 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto [what, code, rank] =
      failure_of("all_reduce failing without a watchdog thread", [&] { comm->all_reduce(per_rank); });
  INFO(what);
  CHECK(seconds_since(t0) < 10.0);
  if (hang) {
    CHECK(what.find("timed out after 300 ms") != std::string::npos);
  } else {
    CHECK(code == sim::nccl_system_error);
    CHECK(rank == n - 1);
    CHECK(what.find("ncclCommGetAsyncError") != std::string::npos);
  }
  CHECK(comm->aborted());
  CHECK(streams_drain(streams_of(*comm), 10s));
  {
    watchdog w("releasing the communicator that had no watchdog thread", 30s);
    comm.reset();
  }
}

// Guards mid-operation failures: the error hits the k-th of several bucket collectives while the
// host is still queueing the later ones. The operation must abort rather than leave the other
// ranks waiting in the failed collective. `growing` makes the later buckets larger than the
// staging buffer the first ones used, so that the host must replace it in the middle of the
// operation, behind the stuck collective.
TEST_CASE("devicekit NCCL: an error on one of several queued bucket collectives aborts the operation",
          "[sim][multi][nccl_fault]") {
  const bool growing = GENERATE(false, true);
  const int n = sim::device_count();
  auto comm = comm_of_all_gpus(20s);
  std::vector<std::vector<std::unique_ptr<dev_floats>>> bufs(static_cast<std::size_t>(n));
  std::vector<std::vector<dk::leaf_span>> per_rank(static_cast<std::size_t>(n));
  // Equal: 8 leaves of 100 floats, buckets of 1 KiB: 4 buckets of 2 leaves, packed through the
  // same 1 MiB staging buffer. Growing, buckets of 2 MiB: leaves of 64 KiB, 64 KiB, 1936 KiB and
  // 64 KiB make a packed 128 KiB bucket (1 MiB staging), then a packed 2000 KiB one, for which
  // the staging buffer is replaced.
  std::vector<std::size_t> sizes;
  if (growing) {
    comm->set_bucket_bytes(std::size_t{2} << 20);
    sizes = {16384, 16384, 495616, 16384};
  } else {
    comm->set_bucket_bytes(1024);
    sizes.assign(8, 100);
  }
  for (int g = 0; g < n; ++g) {
    for (const std::size_t s : sizes) {
      bufs[static_cast<std::size_t>(g)].push_back(std::make_unique<dev_floats>(g, s, 1.0f));
      per_rank[static_cast<std::size_t>(g)].push_back(bufs[static_cast<std::size_t>(g)].back()->span());
    }
  }
  // The structure exchange is operation 1; in the equal case buckets 1 and 2 complete and
  // bucket 3 fails, in the growing case bucket 1 (of 2) fails.
  const int ok_ops = growing ? 1 : 3;
  sim::nccl_async_error_after(n - 1, ok_ops);
  INFO((growing ? "growing buckets" : "equal buckets"));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what =
      failure_of(std::string("all_reduce with an error on a middle bucket (") + (growing ? "growing" : "equal") + ")",
                 [&] { comm->all_reduce(per_rank); })
          .what;
  INFO(what);
  CHECK(what.find("unhandled system error") != std::string::npos);
  CHECK(seconds_since(t0) < 10.0);
  CHECK(comm->aborted());
  CHECK(streams_drain(streams_of(*comm), 10s));  // no rank is left waiting in the collective
  {
    watchdog w("releasing the aborted communicator", 30s);
    comm.reset();
  }
}

#else

TEST_CASE("NCCL faults: the simulator was built without NCCL", "[sim][multi]") {
  WARN("nccl.h was not found: the simulated NCCL and its fault tests are not built");
}

#endif
