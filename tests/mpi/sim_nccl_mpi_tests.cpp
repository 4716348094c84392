// nccl_communicator::from_mpi on simulated GPUs under mpirun: each rank a process, on simulated
// device rank % DEVICEKIT_SIM_GPUS; the simulator's NCCL joins the processes' ranks through its
// cross-process transport (sim/src/nccl_remote.cpp). Two modes (argv[1]):
//
//   (none)         DEVICEKIT_SIM_GPUS >= the number of ranks: every collective of the communicator
//                  (all-reduce sum, average, max; broadcast; all-gather; reduce-scatter; scatter of
//                  unequal sizes, which NCCL moves with ncclSend/ncclRecv) with exact per-rank values
//                  checked on every rank, over bucket sizes that give packed and direct buckets; a
//                  rank that never joins ends in devicekit's timeout and the peers' errors; no
//                  rendezvous file is left behind.
//   --shared-gpu   two ranks on one simulated GPU: from_mpi refuses them with a config_error that
//                  names both ranks, on every rank, and the simulator's ncclCommInitRank refuses
//                  them too ("Duplicate GPU detected"), as NCCL does.
//   --peer-missing with DEVICEKIT_SIM_NCCL_TIMEOUT_S set short: the last rank never joins, and the
//                  others' ncclCommInitRank fails with ncclRemoteError; then a collective whose peer
//                  never calls it fails (devicekit's own timeout off) with the simulator's
//                  ncclRemoteError, not a hang.
//
// A watchdog turns a hang (ranks that never meet, as on a simulator without the transport) into a
// failure after DEVICEKIT_TEST_WATCHDOG_S seconds (default 60), before CTest's timeout.
#include "mpi_harness.hpp"

#include <devicekit/devicekit.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dk = devicekit;

namespace {

int rank_ = 0;
int size_ = 1;

dk::mpi_communicator& world() {
  static dk::mpi_communicator c;
  return c;
}

/// This rank's simulated device: rank % the devices the simulator makes.
dk::device my_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) n = 1;
  return dk::device::cuda(rank_ % n);
}

std::optional<dk::nccl_communicator>& nccl() {
  static std::optional<dk::nccl_communicator> c;
  return c;
}

/// The communicator every collective test shares (made by the first test).
dk::nccl_communicator& comm() {
  if (!nccl()) nccl().emplace(dk::nccl_communicator::from_mpi(world(), my_gpu()));
  return *nccl();
}

/// Bucket sizes: everything small in one packed bucket, one leaf per bucket (direct), and small
/// buckets (several packed ones, leaves larger than one).
const std::size_t bucket_sizes[] = {dk::default_bucket_bytes, 0, 96};

/// The rendezvous directories of communicators that rank 0 made (their names carry its pid).
std::vector<std::string> rendezvous_left(long creator) {
  struct stat st {};
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm"
                           : tmp != nullptr && *tmp != '\0'                    ? tmp
                                                                               : "/tmp";
  const std::string prefix = "devicekit-sim-nccl-" + std::to_string(creator) + "-";
  std::vector<std::string> found;
  if (DIR* d = ::opendir(base.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(base + "/" + e->d_name);
    }
    ::closedir(d);
  }
  return found;
}

long rank0_pid() {
  long pid = static_cast<long>(::getpid());
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return pid;
}

template <class T>
std::vector<T> values(std::size_t n, T first, T step) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(first + static_cast<T>(i) * step);
  return v;
}

// --- one rank per simulated device -------------------------------------------------------------

MPI_TEST("collectives: from_mpi gives one rank per process on its own simulated device") {
  auto& c = comm();
  CHECK_EQ(c.size(), size_);
  CHECK_EQ(c.rank(), rank_);
  CHECK_EQ(c.local_ranks(), 1);
  CHECK(c.device_of() == my_gpu());
}

MPI_TEST("collectives: all_reduce sum of float, int64 and double leaves, every bucket size") {
  const int n = size_;
  const float fr = static_cast<float>(rank_);
  for (const std::size_t bucket : bucket_sizes) {
    comm().set_bucket_bytes(bucket);
    auto tree = dk::place(std::make_tuple(values<float>(37, fr, 0.5f), values<std::int64_t>(9, 1000 * rank_, 1),
                                          values<double>(50, 0.25 * rank_, -1.0)),
                          my_gpu());
    dk::all_reduce(comm(), tree, dk::reduce_op::sum);
    const auto [f, l, d] = dk::to_host(tree);
    const int tri = n * (n - 1) / 2;
    int wrong = 0;
    for (std::size_t i = 0; i < f.size(); ++i)
      wrong += f[i] != static_cast<float>(tri) + static_cast<float>(n * i) * 0.5f;
    for (std::size_t i = 0; i < l.size(); ++i) wrong += l[i] != 1000 * tri + n * static_cast<std::int64_t>(i);
    for (std::size_t i = 0; i < d.size(); ++i) wrong += d[i] != 0.25 * tri - static_cast<double>(n * i);
    CHECK_EQ(wrong, 0);
  }
  comm().set_bucket_bytes(dk::default_bucket_bytes);
}

MPI_TEST("collectives: all_reduce average (float) and max (int32)") {
  const int n = size_;
  auto avg = dk::place(std::make_tuple(values<float>(21, 2.0f * static_cast<float>(rank_), 1.0f)), my_gpu());
  dk::all_reduce(comm(), avg, dk::reduce_op::average);
  auto mx = dk::place(std::make_tuple(values<std::int32_t>(13, 10 * rank_, 1)), my_gpu());
  dk::all_reduce(comm(), mx, dk::reduce_op::max);
  const auto [a] = dk::to_host(avg);
  const auto [m] = dk::to_host(mx);
  int wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i) wrong += a[i] != static_cast<float>(n - 1) + static_cast<float>(i);
  for (std::size_t i = 0; i < m.size(); ++i) wrong += m[i] != 10 * (n - 1) + static_cast<std::int32_t>(i);
  CHECK_EQ(wrong, 0);
}

MPI_TEST("collectives: broadcast from the last rank") {
  const int root = size_ - 1;
  for (const std::size_t bucket : bucket_sizes) {
    comm().set_bucket_bytes(bucket);
    auto tree = dk::place(
        std::make_tuple(values<float>(40, static_cast<float>(rank_), 1.0f), values<std::int64_t>(3, 7 * rank_, 2)),
        my_gpu());
    dk::broadcast(comm(), tree, root);
    const auto [f, l] = dk::to_host(tree);
    CHECK(f == values<float>(40, static_cast<float>(root), 1.0f));
    CHECK(l == values<std::int64_t>(3, 7 * root, 2));
  }
  comm().set_bucket_bytes(dk::default_bucket_bytes);
}

MPI_TEST("collectives: all_gather, rank-major") {
  const auto n = static_cast<std::size_t>(size_);
  for (const std::size_t bucket : bucket_sizes) {
    comm().set_bucket_bytes(bucket);
    const auto in = dk::place(std::make_tuple(values<float>(5, 10.0f * static_cast<float>(rank_), 1.0f),
                                              values<std::int64_t>(2, 100 * rank_, 1)),
                              my_gpu());
    auto out = dk::place(std::make_tuple(std::vector<float>(5 * n), std::vector<std::int64_t>(2 * n)), my_gpu());
    dk::all_gather(comm(), in, out);
    const auto [f, l] = dk::to_host(out);
    int wrong = 0;
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < 5; ++i)
        wrong += f[r * 5 + i] != 10.0f * static_cast<float>(r) + static_cast<float>(i);
      for (std::size_t i = 0; i < 2; ++i) wrong += l[r * 2 + i] != static_cast<std::int64_t>(100 * r + i);
    }
    CHECK_EQ(wrong, 0);
  }
  comm().set_bucket_bytes(dk::default_bucket_bytes);
}

MPI_TEST("collectives: reduce_scatter sum, each rank its part") {
  const int n = size_;
  for (const std::size_t bucket : bucket_sizes) {
    comm().set_bucket_bytes(bucket);
    const auto in = dk::place(
        std::make_tuple(values<float>(3 * static_cast<std::size_t>(n), static_cast<float>(rank_), 1.0f)), my_gpu());
    auto out = dk::place(std::make_tuple(std::vector<float>(3)), my_gpu());
    dk::reduce_scatter(comm(), in, out, dk::reduce_op::sum);
    const auto [f] = dk::to_host(out);
    int wrong = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      wrong += f[i] != static_cast<float>(n * (n - 1) / 2) + static_cast<float>(n * (3 * rank_ + static_cast<int>(i)));
    }
    CHECK_EQ(wrong, 0);
  }
  comm().set_bucket_bytes(dk::default_bucket_bytes);
}

MPI_TEST("collectives: scatter of unequal sizes (ncclSend and ncclRecv across processes)") {
  // Rank r receives r + 1 elements; the root's leaf holds them all, in rank order.
  const auto n = static_cast<std::size_t>(size_);
  const std::size_t total = n * (n + 1) / 2;
  const auto in =
      dk::place(std::make_tuple(rank_ == 0 ? values<float>(total, 0.0f, 1.0f) : std::vector<float>()), my_gpu());
  auto out = dk::place(std::make_tuple(std::vector<float>(static_cast<std::size_t>(rank_) + 1)), my_gpu());
  dk::scatter(comm(), in, out, 0);
  const auto [f] = dk::to_host(out);
  const std::size_t first = static_cast<std::size_t>(rank_) * static_cast<std::size_t>(rank_ + 1) / 2;
  CHECK(f == values<float>(static_cast<std::size_t>(rank_) + 1, static_cast<float>(first), 1.0f));
}

MPI_TEST("collectives: a rank that never joins ends in the timeout on rank 0 and errors on its peers") {
  auto c = dk::nccl_communicator::from_mpi(world(), my_gpu());
  c.set_timeout(std::chrono::milliseconds(500));
  auto tree = dk::place(std::make_tuple(values<float>(16, 1.0f, 1.0f)), my_gpu());
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 0 reduces alone: its peers are in the barrier. devicekit's timeout aborts it, and the
  // abort reaches the peers' processes (the simulator's abort mark).
  if (rank_ == 0) CHECK_THROWS_WITH(dk::all_reduce(c, tree), dk::communication_error, "timed out");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ != 0) CHECK_THROWS_WITH(dk::all_reduce(c, tree), dk::communication_error, "aborted");
  CHECK(c.aborted());
  // Well inside the simulator's own cap (DEVICEKIT_SIM_NCCL_TIMEOUT_S, 60 s by default).
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}

MPI_TEST("collectives: ncclCommInitRank inside a group with another process's id is refused") {
  // Inside a group it may not wait, so it cannot join ranks of other processes: ncclInvalidUsage.
  ncclUniqueId id{};
  if (rank_ == 0) id = dk::nccl_communicator::unique_id();
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank_ != 0) {
    dk::scoped_device on(my_gpu().ordinal());
    ncclComm_t c = nullptr;
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclCommInitRank(&c, size_, id, rank_) == ncclInvalidUsage);
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(std::string(ncclGetLastError(nullptr)).find("only outside a group") != std::string::npos);
  }
}

MPI_TEST("collectives: no rendezvous file is left once the communicators are gone") {
  nccl().reset();
  const long creator = rank0_pid();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto left = rendezvous_left(creator);
  CHECK_EQ(left.size(), std::size_t{0});
  for (const auto& p : left) std::fprintf(stderr, "left behind: %s\n", p.c_str());
}

// --- two ranks on one simulated device (DEVICEKIT_SIM_GPUS=1) ------------------------------------

MPI_TEST("shared gpu: from_mpi refuses ranks on one GPU with a config_error naming both, on every rank") {
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH((void)dk::nccl_communicator::from_mpi(world(), dk::device::cuda(0)), dk::config_error,
                    "ranks 0 and 1 both use the GPU at PCI");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}

MPI_TEST("shared gpu: the simulator's ncclCommInitRank refuses them too (Duplicate GPU detected)") {
  ncclUniqueId id{};
  if (rank_ == 0) id = dk::nccl_communicator::unique_id();
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK_THROWS_WITH((void)dk::nccl_communicator::init_rank(id, size_, rank_, dk::device::cuda(0)),
                    dk::communication_error, "invalid usage");
  CHECK(std::string(ncclGetLastError(nullptr)).find("Duplicate GPU detected") != std::string::npos);
}

MPI_TEST("shared gpu: no rendezvous file is left") {
  const long creator = rank0_pid();
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_EQ(rendezvous_left(creator).size(), std::size_t{0});
}

// --- a peer that never comes (DEVICEKIT_SIM_NCCL_TIMEOUT_S=2) --------------------------------------

MPI_TEST("peer missing: ranks whose peer never joins fail in ncclCommInitRank with ncclRemoteError") {
  ncclUniqueId id{};
  if (rank_ == 0) id = dk::nccl_communicator::unique_id();
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  if (rank_ != size_ - 1) {
    CHECK_THROWS_WITH((void)dk::nccl_communicator::init_rank(id, size_, rank_, my_gpu()), dk::communication_error,
                      "remote process exited");
    const std::string why = ncclGetLastError(nullptr);
    CHECK(why.find("rank(s) " + std::to_string(size_ - 1) + " to join") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}

MPI_TEST("peer missing: a collective whose peer never calls it fails with ncclRemoteError, timeout off") {
  {
    auto c = dk::nccl_communicator::from_mpi(world(), my_gpu());
    c.set_timeout(std::chrono::milliseconds(0));  // devicekit waits for ever: the simulator's limit ends it
    auto tree = dk::place(std::make_tuple(values<float>(16, 1.0f, 1.0f)), my_gpu());
    const auto t0 = std::chrono::steady_clock::now();
    if (rank_ == 0) {
      CHECK_THROWS_WITH(dk::all_reduce(c, tree), dk::communication_error, "no data from rank 1");
      CHECK(c.aborted());
    }
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
    MPI_Barrier(MPI_COMM_WORLD);
  }
  const long creator = rank0_pid();
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_EQ(rendezvous_left(creator).size(), std::size_t{0});
}

/// Ends the process with a failure if the tests are not done within DEVICEKIT_TEST_WATCHDOG_S.
class watchdog {
 public:
  watchdog() : thread_([this] { watch(); }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    done_ = true;
    thread_.join();
  }

 private:
  void watch() const {
    const char* v = std::getenv("DEVICEKIT_TEST_WATCHDOG_S");
    const int limit = v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 60;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limit);
    while (!done_) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr,
                     "FAILED [rank %d] watchdog: the tests did not finish within %d s (%s); did the ranks ever "
                     "meet in ncclCommInitRank?\n",
                     rank_, limit, mpitest::get().current.c_str());
        std::fflush(stderr);
        std::_Exit(3);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  dk::mpi_environment env(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (size_ < 2) {
    if (rank_ == 0) std::printf("run me under mpirun with 2 or more processes\n");
    return 2;
  }
  // The tests of the mode asked for: "collectives: ...", "shared gpu: ..." or "peer missing: ...".
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string prefix = mode == "--shared-gpu"     ? "shared gpu: "
                             : mode == "--peer-missing" ? "peer missing: "
                                                        : "collectives: ";
  auto& tests = mpitest::get().tests;
  tests.erase(std::remove_if(tests.begin(), tests.end(), [&](const auto& t) { return t.name.rfind(prefix, 0) != 0; }),
              tests.end());
  int failures = 0;
  {
    watchdog guard;
    failures = mpitest::run_all(MPI_COMM_WORLD);
  }
  return failures == 0 ? 0 : 1;
}
