// Distribution benchmarks, device cpu, over MPI with 2 processes (the program relaunches itself
// under mpirun when it is started directly, as scripts/bench does):
//   distribute.allreduce_tree.vs_raw              a tree of 4 x 16 MiB float leaves, all-reduced
//                                                 (sum) by devicekit, vs one raw MPI_Allreduce of
//                                                 the same 64 MiB. Goal >= 0.9.
//   distribute.allreduce_small_leaves.vs_per_leaf 1000 leaves x 1 KiB, one devicekit all_reduce
//                                                 (bucketed) vs one MPI_Allreduce per leaf. Goal >= 5.
//   distribute.allreduce_small_leaves.vs_packed_raw the same all_reduce vs one raw MPI_Allreduce of
//                                                 the same 1000 KiB already packed in one buffer:
//                                                 what reaching the leaves where they lie and the
//                                                 structure check cost. Goal >= 0.8.
// With NCCL and more than one GPU, rank 0 also prints algbw and busbw (as nccl-tests defines
// them) of devicekit's NCCL collectives over all local GPUs. With NCCL and a GPU, rank 0 also
// measures, on GPU 0 alone (a one-rank communicator: the host's work is all there is to time):
//   overhead.allreduce.vs_hand_written.<shape>    dk::all_reduce(comm, placed tree) vs the
//                                                 hand-written NCCL program: the same floats
//                                                 packed in one buffer, one ncclAllReduce, one
//                                                 cudaStreamSynchronize; shapes 1x16f, 100x16f,
//                                                 10000x16f (leaves of 16 floats). Goal >= 0.95.
//
// Timing: every sample starts after a barrier, and a sample's time is the slowest rank's; the
// figure is the median over samples. Both sides run in the same process, interleaved.
#include "bench_common.hpp"

#include <devicekit/distribute/mpi.hpp>
#include <devicekit/distribute/tree_collectives.hpp>
#if DEVICEKIT_HAS_NCCL
#  include <devicekit/distribute/nccl.hpp>
#  include <devicekit/place/place.hpp>

#  include <nccl.h>
#endif

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#if DEVICEKIT_HAS_MPI

namespace dk = devicekit;

namespace {

/// True when this process was started by an MPI launcher.
bool inside_mpi_job() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

/// Replaces this process with `mpirun -np 2 <this program> <args>`; returns only on failure.
int relaunch_under_mpirun(int argc, char** argv) {
#  ifndef DEVICEKIT_MPIEXEC
#    define DEVICEKIT_MPIEXEC "mpirun"
#  endif
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::vector<std::string> args = {DEVICEKIT_MPIEXEC, "-np", "2"};
#  ifdef OPEN_MPI
  // Oversubscribing makes Open MPI yield while it waits, which slows every call down: only
  // when there are not two cores for the two processes.
  if (std::thread::hardware_concurrency() < 2) args.emplace_back("--oversubscribe");
  if (::geteuid() == 0) args.emplace_back("--allow-run-as-root");
#  endif
  args.emplace_back(n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string(argv[0]));
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> c;
  for (auto& a : args) c.push_back(a.data());
  c.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(c[0], c.data());
  std::perror("bench_distribute: could not start mpirun");
  return 1;
}

std::string fmt_ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", seconds * 1e3);
  return b;
}
std::string fmt_fixed(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

/// Median over `samples` of the slowest rank's time of fn().
template <class Fn>
double timed(MPI_Comm comm, int samples, Fn&& fn) {
  std::vector<double> t;
  for (int i = 0; i < samples; ++i) {
    MPI_Barrier(comm);
    const auto t0 = bench::clock::now();
    fn();
    double mine = bench::seconds_since(t0), slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    t.push_back(slowest);
  }
  return bench::median(t);
}

#  if DEVICEKIT_HAS_NCCL
/// nccl-tests' figures for devicekit's NCCL collectives over every local GPU (rank 0 only).
void nccl_bandwidth(bool quick) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2) {
    (void)cudaGetLastError();
    std::printf("NCCL algbw/busbw: skipped (%d GPU; it needs two or more)\n", gpus);
    return;
  }
  std::vector<dk::device> devs;
  for (int g = 0; g < gpus; ++g) devs.push_back(dk::device::cuda(g));
  auto comm = dk::nccl_communicator::init_all(devs);
  const std::size_t count = (quick ? 16u : 64u) << 20 >> 2;  // floats per rank
  std::vector<float*> buf(static_cast<std::size_t>(gpus)), big(static_cast<std::size_t>(gpus));
  for (int g = 0; g < gpus; ++g) {
    dk::scoped_device on(g);
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&buf[static_cast<std::size_t>(g)], count * sizeof(float)));
    DEVICEKIT_CUDA_CHECK(
        cudaMalloc(&big[static_cast<std::size_t>(g)], count * sizeof(float) * static_cast<std::size_t>(gpus)));
    DEVICEKIT_CUDA_CHECK(cudaMemset(buf[static_cast<std::size_t>(g)], 0, count * sizeof(float)));
  }
  std::vector<std::vector<dk::leaf_span>> leaves, bigs;
  std::vector<std::vector<dk::const_leaf_span>> cleaves, cbigs;
  for (int g = 0; g < gpus; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    leaves.push_back({{buf[gi], count, dk::element_type::float32}});
    cleaves.push_back({{buf[gi], count, dk::element_type::float32}});
    bigs.push_back({{big[gi], count * static_cast<std::size_t>(gpus), dk::element_type::float32}});
    cbigs.push_back({{big[gi], count * static_cast<std::size_t>(gpus), dk::element_type::float32}});
  }
  const double n = gpus;
  const double bytes = static_cast<double>(count * sizeof(float));
  auto report = [&](const char* name, double seconds, double data_bytes, double factor) {
    const double algbw = data_bytes / seconds / 1e9;
    std::printf("NCCL %-15s %d GPUs  %8.1f MB  time %9.3f ms  algbw %8.2f GB/s  busbw %8.2f GB/s\n", name, gpus,
                data_bytes / 1e6, seconds * 1e3, algbw, algbw * factor);
  };
  const int samples = quick ? 5 : 20;
  report("all_reduce", bench::median_seconds(samples, [&] { comm.all_reduce(leaves); }), bytes, 2 * (n - 1) / n);
  report("broadcast", bench::median_seconds(samples, [&] { comm.broadcast(leaves, 0); }), bytes, 1.0);
  // all_gather and reduce_scatter: nccl-tests counts the large buffer's bytes.
  report("all_gather", bench::median_seconds(samples, [&] { comm.all_gather(cleaves, bigs); }), bytes * n, (n - 1) / n);
  report("reduce_scatter", bench::median_seconds(samples, [&] { comm.reduce_scatter(cbigs, leaves); }), bytes * n,
         (n - 1) / n);
  for (int g = 0; g < gpus; ++g) {
    (void)cudaFree(buf[static_cast<std::size_t>(g)]);
    (void)cudaFree(big[static_cast<std::size_t>(g)]);
  }
}

/// devicekit's all-reduce of a placed tree on one GPU against the hand-written NCCL program (rank
/// 0 only; see the file's comment).
void nccl_hand_written(bool quick, bench::report& report) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) {
    (void)cudaGetLastError();
    std::printf("overhead.allreduce.vs_hand_written (cuda): owed (no GPU here)\n");
    return;
  }
  const dk::device gpu = dk::device::cuda(0);
  dk::scoped_device on(0);
  const std::vector<dk::device> one_gpu{gpu};
  auto comm = dk::nccl_communicator::init_all(one_gpu);
  ncclComm_t hand_comm = nullptr;
  const int ordinal = 0;
  DEVICEKIT_CUDA_CHECK(cudaSetDevice(0));
  if (ncclCommInitAll(&hand_comm, 1, &ordinal) != ncclSuccess) {
    std::printf("overhead.allreduce.vs_hand_written (cuda): ncclCommInitAll failed\n");
    return;
  }
  cudaStream_t s = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int samples = quick ? 15 : 61;
  for (const std::size_t leaves : {std::size_t{1}, std::size_t{100}, std::size_t{10000}}) {
    constexpr std::size_t floats_each = 16;
    const std::vector<std::vector<float>> tree(leaves, std::vector<float>(floats_each, 1.f));
    auto placed = dk::place(tree, gpu);
    const std::size_t count = leaves * floats_each;
    float* packed = nullptr;
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&packed, count * sizeof(float)));
    DEVICEKIT_CUDA_CHECK(cudaMemset(packed, 0, count * sizeof(float)));
    const int reps = leaves == 1 ? 20 : leaves == 100 ? 10 : 2;
    auto ours = [&] {
      for (int r = 0; r < reps; ++r) dk::all_reduce(comm, placed);
    };
    auto hand = [&] {
      for (int r = 0; r < reps; ++r) {
        if (ncclAllReduce(packed, packed, count, ncclFloat32, ncclSum, hand_comm, s) != ncclSuccess) std::abort();
        DEVICEKIT_CUDA_CHECK(cudaStreamSynchronize(s));
      }
    };
    ours();
    hand();
    const dk::collective_options checked = comm.options();
    dk::collective_options unchecked = checked;
    unchecked.check_structure = false;
    auto ours_unchecked = [&] {
      comm.set_options(unchecked);
      for (int r = 0; r < reps; ++r) dk::all_reduce(comm, placed);
      comm.set_options(checked);
    };
    const auto [o, h, ou] = bench::interleaved_medians(samples, ours, hand, ours_unchecked);
    const double n = static_cast<double>(leaves) * reps;
    const std::string shape = std::to_string(leaves) + "x16f";
    char note[320];
    std::snprintf(note, sizeof note,
                  "goal >= 0.95; one GPU (a one-rank communicator), sum; per leaf: devicekit %.1f ns, hand-written "
                  "%.1f ns; devicekit without the structure check (check_structure false): %.1f ns",
                  o * 1e9 / n, h * 1e9 / n, ou * 1e9 / n);
    report.add({"overhead.allreduce.vs_hand_written." + shape, "cuda", "time of all_reduce " + shape, o / reps * 1e6,
                "us", "the floats packed in one buffer, one ncclAllReduce, one cudaStreamSynchronize", h / reps * 1e6,
                h / o, note});
    (void)cudaFree(packed);
  }
  (void)cudaStreamDestroy(s);
  (void)ncclCommDestroy(hand_comm);
}
#  endif

}  // namespace

int main(int argc, char** argv) {
  if (!inside_mpi_job()) return relaunch_under_mpirun(argc, argv);
  const auto opt = bench::parse(argc, argv);
  dk::mpi_environment env(&argc, &argv);
  dk::mpi_communicator comm;
  const MPI_Comm world = comm.native_handle();
  const bool root = comm.rank() == 0;
  bench::report report;
  const int samples = opt.quick ? 9 : 31;

  // --- 4 x 16 MiB leaves vs one raw MPI_Allreduce of 64 MiB -------------------------------------
  {
    constexpr std::size_t leaf = (std::size_t{16} << 20) / sizeof(float);
    std::array<std::vector<float>, 4> tree;
    for (auto& l : tree) l.assign(leaf, 0.0f);  // zeros: repeated sums stay finite
    std::vector<float> raw(4 * leaf, 0.0f);
    dk::all_reduce(comm, tree);  // warm-up: pages touched, MPI connections made
    MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(raw.size()), MPI_FLOAT, MPI_SUM, world);
    std::vector<double> t_dk, t_raw;
    for (int i = 0; i < samples; ++i) {  // interleaved, so that drift hits both sides alike
      t_raw.push_back(timed(world, 1, [&] {
        MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(raw.size()), MPI_FLOAT, MPI_SUM, world);
      }));
      t_dk.push_back(timed(world, 1, [&] { dk::all_reduce(comm, tree); }));
    }
    const double dk_s = bench::median(t_dk), raw_s = bench::median(t_raw);
    // The same four leaves, one raw MPI_Allreduce each: what devicekit adds (structure check,
    // traversal) shows against this. One 64 MiB call can be slower than four of 16 MiB because
    // Open MPI allocates a temporary buffer per call, and glibc serves 64 MiB with a fresh mmap
    // (page faults every call) but reuses 16 MiB blocks from the heap.
    const double per_leaf_s = timed(world, samples, [&] {
      for (auto& l : tree) MPI_Allreduce(MPI_IN_PLACE, l.data(), static_cast<int>(l.size()), MPI_FLOAT, MPI_SUM, world);
    });
    if (root) {
      report.add({"distribute.allreduce_tree.vs_raw", "cpu", "time", dk_s * 1e3, "ms", "raw MPI_Allreduce of 64 MiB",
                  raw_s * 1e3, raw_s / dk_s,
                  "4 x 16 MiB float leaves, sum, 2 MPI processes; goal >= 0.9; four raw MPI_Allreduce of the leaves: " +
                      fmt_ms(per_leaf_s) + " (devicekit / that: " + fmt_fixed(dk_s / per_leaf_s) + ")"});
    }
  }

  // --- 1000 leaves x 1 KiB vs one MPI_Allreduce per leaf -----------------------------------------
  {
    std::vector<std::vector<float>> tree(1000, std::vector<float>(256, 0.0f));
    auto per_leaf = tree;
    auto per_leaf_loop = [&] {
      for (auto& l : per_leaf) {
        MPI_Allreduce(MPI_IN_PLACE, l.data(), static_cast<int>(l.size()), MPI_FLOAT, MPI_SUM, world);
      }
    };
    dk::all_reduce(comm, tree);
    per_leaf_loop();
    // What the wire alone costs for the same bytes in one call: the ceiling of any bucketing.
    std::vector<float> flat(1000 * 256, 0.0f);
    auto packed_raw = [&] {
      MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(flat.size()), MPI_FLOAT, MPI_SUM, world);
    };
    packed_raw();
    // The program an expert writes for the tree: pack the leaves into one buffer (kept between
    // calls), one MPI_Allreduce, unpack.
    std::vector<std::vector<float>> hand_tree = tree;
    std::vector<float> hand_buffer(1000 * 256);
    auto hand_written = [&] {
      float* at = hand_buffer.data();
      for (const auto& l : hand_tree) at = std::copy(l.begin(), l.end(), at);
      MPI_Allreduce(MPI_IN_PLACE, hand_buffer.data(), static_cast<int>(hand_buffer.size()), MPI_FLOAT, MPI_SUM, world);
      const float* from = hand_buffer.data();
      for (auto& l : hand_tree) {
        std::copy(from, from + l.size(), l.begin());
        from += l.size();
      }
    };
    hand_written();
    const int reps = opt.quick ? 5 : 20;  // calls per sample: one call is well under a millisecond
    std::vector<double> t_dk, t_loop, t_packed, t_hand;
    for (int i = 0; i < samples * 3; ++i) {
      t_hand.push_back(timed(world, 1,
                             [&] {
                               for (int r = 0; r < reps; ++r) hand_written();
                             }) /
                       reps);
      t_packed.push_back(timed(world, 1,
                               [&] {
                                 for (int r = 0; r < reps; ++r) packed_raw();
                               }) /
                         reps);
      t_loop.push_back(timed(world, 1,
                             [&] {
                               for (int r = 0; r < reps; ++r) per_leaf_loop();
                             }) /
                       reps);
      t_dk.push_back(timed(world, 1,
                           [&] {
                             for (int r = 0; r < reps; ++r) dk::all_reduce(comm, tree);
                           }) /
                     reps);
    }
    const double dk_s = bench::median(t_dk), loop_s = bench::median(t_loop), one_call = bench::median(t_packed);
    const double hand_s = bench::median(t_hand);
    // Smaller buckets, for the record (the entry uses the default, 25 MiB).
    std::string by_bucket;
    for (const std::size_t b : {std::size_t{64} << 10, std::size_t{256} << 10, dk::default_bucket_bytes}) {
      comm.set_bucket_bytes(b);
      const double s = timed(world, samples, [&] { dk::all_reduce(comm, tree); });
      by_bucket += "; bucket " + std::to_string(b >> 10) + " KiB: " + fmt_ms(s);
    }
    comm.set_bucket_bytes(dk::default_bucket_bytes);
    // The same call without the structure check (one small collective before the data): what
    // that check costs against the wire time.
    dk::collective_options unchecked = comm.options();
    unchecked.check_structure = false;
    comm.set_options(unchecked);
    const double unchecked_s = timed(world, samples,
                                     [&] {
                                       for (int r = 0; r < reps; ++r) dk::all_reduce(comm, tree);
                                     }) /
                               reps;
    unchecked.check_structure = true;
    comm.set_options(unchecked);
    // The slices devicekit reduces a packed bucket in (leaf boundaries: here 1 KiB multiples).
    constexpr std::size_t slice = dk::detail::mpi_backend::slice_bytes();
    if (root) {
      report.add({"distribute.allreduce_small_leaves.vs_per_leaf", "cpu", "time", dk_s * 1e3, "ms",
                  "one MPI_Allreduce per leaf", loop_s * 1e3, loop_s / dk_s,
                  "1000 x 1 KiB float leaves, 2 MPI processes; goal >= 5; one raw MPI_Allreduce of all 1000 KiB: " +
                      fmt_ms(one_call) + " (ceiling " + fmt_fixed(loop_s / one_call) + "x)" + by_bucket});
      report.add({"overhead.allreduce.vs_hand_written.1000x1KiB", "cpu", "time", dk_s * 1e3, "ms",
                  "pack into one buffer, one MPI_Allreduce, unpack", hand_s * 1e3, hand_s / dk_s,
                  "1000 x 1 KiB float leaves, sum, 2 MPI processes; goal >= 0.95; per leaf: devicekit " +
                      fmt_fixed(dk_s * 1e9 / 1000) + " ns, hand-written " + fmt_fixed(hand_s * 1e9 / 1000) +
                      " ns; the same bytes already packed, one MPI_Allreduce: " + fmt_ms(one_call)});
      report.add({"distribute.allreduce_small_leaves.vs_packed_raw", "cpu", "time", dk_s * 1e3, "ms",
                  "one raw MPI_Allreduce of the same bytes, packed", one_call * 1e3, one_call / dk_s,
                  "1000 x 1 KiB float leaves, 2 MPI processes; goal >= 0.8; devicekit reduces them where they lie "
                  "in " +
                      std::to_string((1000 * 1024 + slice - 1) / slice) + " slice(s) of up to " +
                      std::to_string(slice >> 10) +
                      " KiB (mpi_backend::slice_bytes), each a ring of MPI_Sendrecv over MPI datatypes "
                      "(mpi_backend::all_reduce_leaves), after the structure check; without the check: " +
                      fmt_ms(unchecked_s)});
    }
  }

#  if DEVICEKIT_HAS_NCCL
  if (root) nccl_bandwidth(opt.quick);
  if (root) nccl_hand_written(opt.quick, report);
#  endif
  MPI_Barrier(world);
  if (root) report.write(opt.json_path);
  return 0;
}

#else  // no MPI

int main() {
  std::printf("bench_distribute: devicekit was built without MPI (DEVICEKIT_HAS_MPI 0): nothing to measure\n");
  return 0;
}

#endif
