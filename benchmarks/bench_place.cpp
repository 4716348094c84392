// Placement against the raw copies it replaces. Every ratio is baseline time / devicekit time,
// both measured in this run (bigger is better).
//
// cpu (always):
//   place.large_tree.vs_raw_copy         4 leaves x 64 MiB placed on the host (pool block, warm)
//                                        vs one memcpy of the same 256 MiB into a warm buffer;
//                                        its note gives both rates, the page faults per placement
//                                        and whether the copy threads shared it
//   place.large_tree.by_threads          informational: the same placement by 1, 2, 4, 8 and 16
//                                        threads (as many as the CPUs allow), GB/s each
//   host_copy.streaming.vs_memcpy        informational: the streaming copy of 256 MiB (what
//                                        placement uses from 2 MiB) vs memcpy of the same parts,
//                                        by the copy threads (at least 2) and, in the note, by one
//   place.small_leaves.vs_per_leaf_copy  1024 leaves x 4 KiB placed (one pool block) vs a loop of
//                                        per-leaf allocation + memcpy (and the frees, as both
//                                        sides release what they made)
//   staging.pack.vs_one_thread           the host's half of a pageable host-to-device transfer:
//                                        4 x 64 MiB packed into 8 MiB staging chunks by the copy
//                                        threads (host_copy_threads(), at least 2) vs by the
//                                        calling thread alone; .small_leaves: 1024 x 4 KiB into
//                                        one 4 MiB buffer
//   staging.pack.by_threads              informational: the same 4 x 64 MiB packed by 1, 2, 4, 8
//                                        and 16 threads (as many as the CPUs allow), GB/s each
//   place.small_leaves.after_idle        informational: the 1024 x 4 KiB placement 2 ms after the
//                                        last one (the copy threads asleep again) vs right after
//                                        it (still polling): what waking them costs a placement
// cuda (with a GPU; compiled wherever the CUDA toolkit is):
//   ceiling.h2d_pinned, ceiling.d2d      the physical ceilings, measured in the same run
//   place.large_tree.vs_raw_pinned_copy  4 x 64 MiB pinned leaves vs one pinned cudaMemcpyAsync
//   place.small_leaves.vs_per_leaf_copy  1024 x 4 KiB vs per-leaf cudaMemcpyAsync (preallocated)
//   place.small_leaves.pipelined.vs_one_buffer.8MiB, .16MiB  2048 and 4096 x 4 KiB staged in
//                                        pieces (the copy of one overlapping the packing of the
//                                        next) vs in one buffer; up to 4 MiB, one buffer is the
//                                        default (pipelined_stage_min_bytes)
//   place.small_leaves.after_idle        as on the cpu, for the staged 1024 x 4 KiB (the headline
//                                        entry above alternates with a baseline of milliseconds,
//                                        so each of its placements finds the threads asleep)
//   place.pageable.vs_raw_pinned_copy    256 MiB pageable tree (staged in chunks) vs a pinned copy
//   place.pageable.vs_plain_pageable_copy  the same vs cudaMemcpy straight from pageable memory
//   place.pageable.by_threads, place.small_leaves.by_threads  informational: those placements by
//                                        1, 2, 4, 8 and 16 copy threads, GB/s each, the best as a
//                                        fraction of the pinned ceiling
// Placement allocates from a warm memory_pool and the baselines copy into preallocated memory, so
// no side times an allocation; every figure is a median after a warm-up, sides interleaved.
// prefetch.overlap and the batched small-leaf copies are in bench_place_cuda.cu (kernels).
#include "bench_common.hpp"

#include <devicekit/devicekit.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <memory>
#include <vector>

namespace dk = devicekit;

namespace {

std::vector<std::vector<float>> make_leaves(std::size_t count, std::size_t bytes_each) {
  std::vector<std::vector<float>> leaves(count, std::vector<float>(bytes_each / sizeof(float)));
  float x = 1.f;
  for (auto& l : leaves) {
    for (auto& v : l) v = (x += 0.5f);
  }
  return leaves;
}

/// Median seconds per placement of 1024 x 4 KiB leaves, and per round of the per-leaf baseline.
std::pair<double, double> small_leaves_times(const bench::options& opt, dk::device_memory& pool) {
  const dk::stream host_stream;
  const auto leaves = make_leaves(1024, 4096);
  const int reps = opt.quick ? 200 : 1000;
  const int samples = opt.quick ? 9 : 25;
  std::vector<double> ours;
  std::vector<double> base;
  for (int i = 0; i < samples; ++i) {
    ours.push_back(bench::median_seconds(1,
                                         [&] {
                                           for (int r = 0; r < reps; ++r) {
                                             auto placed = dk::place(leaves, dk::device::cpu(), host_stream, pool);
                                             if (placed[1023].data() == nullptr) std::abort();
                                           }
                                         }) /
                   reps);
    base.push_back(bench::median_seconds(1,
                                         [&] {
                                           for (int r = 0; r < reps; ++r) {
                                             std::vector<std::unique_ptr<std::byte[]>> copies;
                                             copies.reserve(leaves.size());
                                             for (const auto& l : leaves) {
                                               copies.emplace_back(new std::byte[l.size() * sizeof(float)]);
                                               std::memcpy(copies.back().get(), l.data(), l.size() * sizeof(float));
                                             }
                                             if (copies[1023] == nullptr) std::abort();
                                           }
                                         }) /
                   reps);
  }
  return {bench::median(ours), bench::median(base)};
}

/// `place_once` (which must finish its copy) timed right after the previous call, while the copy
/// threads still poll for work, and again after 2 ms idle, when they have gone back to sleep on
/// their condition variable (copy_workers polls for 100 us): medians, in that order.
template <class F>
std::pair<double, double> back_to_back_and_after_idle(int samples, F&& place_once) {
  auto idle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  const auto [hot, slept, cold] = bench::interleaved_medians(samples, place_once, idle, place_once);
  (void)slept;
  return {hot, cold};
}

/// The after-idle entry of `device` ("cpu" or "cuda") from back_to_back_and_after_idle's medians.
void report_after_idle(bench::report& report, const char* device, std::pair<double, double> t) {
  const auto [hot, cold] = t;
  report.add({"place.small_leaves.after_idle", device, "time to place 1024 x 4 KiB 2 ms after the previous placement",
              cold * 1e6, "us", "the same right after the previous placement (copy threads still polling)", hot * 1e6,
              hot / cold,
              "informational; " + std::to_string(dk::host_copy_threads()) +
                  " copy threads; below 1: what 2 ms idle costs the next placement (the threads' wake-up, an idle "
                  "core's caches and clock)"});
}

/// The same in a fresh child process whose malloc never trims ("--child-warm [--quick]").
std::pair<double, double> warm_small_leaves_times(const char* self, bool quick) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, -1};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl(self, self, "--child-warm", quick ? "--quick" : "--full", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  char buf[128] = {};
  const ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  double t = -1;
  double b = -1;
  if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || std::sscanf(buf, "%lf %lf", &t, &b) != 2)
    return {-1, -1};
  return {t, b};
}

/// Packs `leaves` (laid out back to back in the staging space) chunk by chunk into `buffers`, as a
/// staged host-to-device transfer does before each chunk's copy (transfer/detail/host_to_device).
/// `shared`: for_each_part_shared (the copy threads), else for_each_part (the calling thread alone).
void pack_staged(const std::vector<std::vector<float>>& leaves, std::size_t chunk,
                 std::vector<std::vector<std::byte>>& buffers, bool shared) {
  std::vector<dk::detail::staged_range> ranges;
  std::size_t total = 0;
  for (const auto& l : leaves) {
    ranges.push_back({total, l.size() * sizeof(float)});
    total += l.size() * sizeof(float);
  }
  std::size_t cursor = 0;
  std::size_t c = 0;
  for (std::size_t lo = 0; lo < total; lo += chunk, ++c) {
    std::byte* buf = buffers[c % buffers.size()].data();
    auto copy = [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
      dk::detail::bulk_copy_part(buf + to, reinterpret_cast<const std::byte*>(leaves[k].data()) + from, n,
                                 leaves[k].size() * sizeof(float));
    };
    const std::size_t hi = std::min(total, lo + chunk);
    if (shared) {
      dk::detail::for_each_part_shared(ranges, cursor, lo, hi, copy);
    } else {
      dk::detail::for_each_part(ranges, cursor, lo, hi, copy);
    }
  }
}

/// An informational entry: `run` (which moves `bytes`) timed with 1, 2, 4, 8 and 16 copy threads
/// (as many as the CPUs allow), GB/s each; the best against the calling thread alone. Leaves the
/// thread count at its default.
template <class Run>
bench::entry by_threads_entry(const std::string& name, const std::string& metric, double bytes, int samples,
                              Run&& run) {
  const std::size_t cpus = std::max(1u, std::thread::hardware_concurrency());
  std::string sweep;
  double one = 0;
  double best = 0;
  std::size_t best_threads = 1;
  for (std::size_t n = 1; n <= std::min<std::size_t>(cpus, 16); n *= 2) {
    dk::set_host_copy_threads(n);
    run();  // the threads started
    const double gbs = bytes / bench::median_seconds(samples, run) / 1e9;
    if (n == 1) one = gbs;
    if (gbs > best) {
      best = gbs;
      best_threads = n;
    }
    char part[64];
    std::snprintf(part, sizeof part, "%s%zu: %.1f GB/s", sweep.empty() ? "" : ", ", n, gbs);
    sweep += part;
  }
  dk::set_host_copy_threads(0);
  return {name,
          "cpu",
          metric,
          best,
          "GB/s",
          "the calling thread alone",
          one,
          best / one,
          "informational; " + sweep + "; best at " + std::to_string(best_threads) + " of " + std::to_string(cpus) +
              " CPUs; default here: " + std::to_string(dk::host_copy_threads()) + " threads"};
}

/// staging.pack.vs_one_thread(.small_leaves): the copy threads against the calling thread alone,
/// interleaved, on the same leaves and buffers.
void staging_pack_entries(const bench::options& opt, bench::report& report) {
  // At least two threads, so that the entry measures the sharing even where the default turns it
  // off (fewer than four CPUs); the note says how many and what the default is.
  const std::size_t by_default = dk::host_copy_threads();
  const std::size_t threads = std::max<std::size_t>(2, by_default);
  dk::set_host_copy_threads(threads);
  struct shape {
    const char* suffix;
    std::size_t count;
    std::size_t bytes_each;
    std::size_t chunk;
    int samples;
  };
  for (const shape& sh : {shape{"", 4, std::size_t{64} << 20, std::size_t{8} << 20, opt.quick ? 7 : 21},
                          shape{".small_leaves", 1024, 4096, std::size_t{4} << 20, opt.quick ? 51 : 201}}) {
    const auto leaves = make_leaves(sh.count, sh.bytes_each);
    std::vector<std::vector<std::byte>> buffers(4, std::vector<std::byte>(sh.chunk, std::byte{0}));
    std::vector<double> shared;
    std::vector<double> alone;
    pack_staged(leaves, sh.chunk, buffers, true);  // the threads started, the buffers touched
    for (int i = 0; i < sh.samples; ++i) {
      shared.push_back(bench::median_seconds(1, [&] { pack_staged(leaves, sh.chunk, buffers, true); }));
      alone.push_back(bench::median_seconds(1, [&] { pack_staged(leaves, sh.chunk, buffers, false); }));
    }
    const double t = bench::median(shared);
    const double b = bench::median(alone);
    const double bytes = static_cast<double>(sh.count * sh.bytes_each);
    char note[192];
    std::snprintf(note, sizeof note, "%zu copy threads (default here: %zu): %.1f GB/s vs %.1f GB/s", threads,
                  by_default, bytes / t / 1e9, bytes / b / 1e9);
    report.add({std::string("staging.pack.vs_one_thread") + sh.suffix, "cpu",
                std::to_string(sh.count) + " leaves packed into staging", t * 1e6, "us", "the calling thread alone",
                b * 1e6, b / t, note});
  }
  // How packing scales with the thread count, 1 to 16 (as many as the CPUs allow): whether the
  // default (half the CPUs, at most 8) leaves host bandwidth unused where a pageable transfer is
  // bound by its packing (place.pageable.vs_raw_pinned_copy).
  {
    const auto leaves = make_leaves(4, std::size_t{64} << 20);
    const std::size_t chunk = std::size_t{8} << 20;
    std::vector<std::vector<std::byte>> buffers(4, std::vector<std::byte>(chunk, std::byte{0}));
    const double bytes = 4.0 * static_cast<double>(std::size_t{64} << 20);
    auto pack = [&] { pack_staged(leaves, chunk, buffers, dk::host_copy_threads() > 1); };
    report.add(by_threads_entry("staging.pack.by_threads", "GB/s packing 4 x 64 MiB, best thread count", bytes,
                                opt.quick ? 5 : 15, pack));
  }
  dk::set_host_copy_threads(0);
}

/// Minor page faults of this process so far: a placement into a warm pool block takes none, so a
/// count above zero says the destination was mapped afresh (on a virtual machine whose memory is
/// backed on first touch, each fault is costly).
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/// place.large_tree.vs_raw_copy, and what explains it where it misses: how many copy threads the
/// placement had, whether it faulted, how it scales with the threads (.by_threads), and one
/// thread's streaming copy against its memcpy (host_copy.streaming.vs_memcpy), since placement on
/// the host streams copies of 2 MiB and more (transfer/detail/host_copy.hpp).
void large_tree_entries(const bench::options& opt, bench::report& report, const dk::stream& host_stream,
                        dk::device_memory& pool) {
  const std::size_t leaf_bytes = std::size_t{64} << 20;
  const auto leaves = make_leaves(4, leaf_bytes);
  const auto tree = std::make_tuple(leaves[0], leaves[1], leaves[2], leaves[3]);
  std::vector<std::byte> src(4 * leaf_bytes, std::byte{1});
  std::vector<std::byte> dst(4 * leaf_bytes, std::byte{0});
  const double bytes = static_cast<double>(src.size());
  const int samples = opt.quick ? 7 : 21;
  auto place_once = [&] { (void)dk::place(tree, dk::device::cpu(), host_stream, pool); };
  auto& workers = dk::detail::copy_workers::instance();
  // Interleaved so that both sides see the same machine state.
  std::vector<double> ours;
  std::vector<double> base;
  place_once();  // warm the pool
  long faults = 0;
  const std::uint64_t shared_before = workers.shared_jobs();
  for (int i = 0; i < samples; ++i) {
    const long f0 = minor_faults();
    ours.push_back(bench::median_seconds(1, place_once));
    faults += minor_faults() - f0;
    base.push_back(bench::median_seconds(1, [&] { std::memcpy(dst.data(), src.data(), src.size()); }));
  }
  const double t = bench::median(ours);
  const double b = bench::median(base);
  char note[256];
  std::snprintf(note, sizeof note,
                "goal >= 0.9; copy threads sharing it: %zu; %.1f GB/s vs %.1f GB/s; per placement: %.1f page "
                "faults, %.2f copies shared with the threads",
                dk::host_copy_threads(), bytes / t / 1e9, bytes / b / 1e9, static_cast<double>(faults) / samples,
                static_cast<double>(workers.shared_jobs() - shared_before) / samples);
  report.add({"place.large_tree.vs_raw_copy", "cpu", "time to place 4 x 64 MiB", t * 1e3, "ms", "one memcpy of 256 MiB",
              b * 1e3, b / t, note});

  // The same placement by 1 to 16 threads (as many as the CPUs allow).
  report.add(by_threads_entry("place.large_tree.by_threads", "GB/s placing 4 x 64 MiB, best thread count", bytes,
                              opt.quick ? 5 : 15, place_once));

  // The streaming copy placement uses against memcpy, same bytes, same warm buffers: by the copy
  // threads (at least two, parts as placement slices them), and by one thread in the note.
  {
    const std::size_t threads = std::max<std::size_t>(2, dk::host_copy_threads());
    auto copy_by = [&](bool shared, bool streaming) {
      const dk::detail::staged_range whole{0, src.size()};
      std::size_t cursor = 0;
      auto part = [&](std::size_t, std::size_t from, std::size_t, std::size_t n) {
        if (streaming) {
          dk::detail::bulk_copy_part(dst.data() + from, src.data() + from, n, src.size());
        } else {
          std::memcpy(dst.data() + from, src.data() + from, n);
        }
      };
      if (shared) {
        dk::detail::for_each_part_shared({&whole, 1}, cursor, 0, src.size(), part);
      } else {
        dk::detail::for_each_part({&whole, 1}, cursor, 0, src.size(), part);
      }
    };
    dk::set_host_copy_threads(threads);
    const auto [ts, tm, ts1, tm1] = bench::interleaved_medians(
        samples, [&] { copy_by(true, true); }, [&] { copy_by(true, false); }, [&] { copy_by(false, true); },
        [&] { copy_by(false, false); });
    dk::set_host_copy_threads(0);
    std::snprintf(note, sizeof note,
                  "informational; 256 MiB into a warm buffer by %zu threads: %.1f GB/s vs %.1f GB/s; by one "
                  "thread: %.1f vs %.1f; below 1, memcpy beats the streaming stores on this CPU",
                  threads, bytes / ts / 1e9, bytes / tm / 1e9, bytes / ts1 / 1e9, bytes / tm1 / 1e9);
    report.add({"host_copy.streaming.vs_memcpy", "cpu", "time to copy 256 MiB (streaming stores)", ts * 1e3, "ms",
                "memcpy of the same parts", tm * 1e3, tm / ts, note});
  }
}

void cpu_entries(const bench::options& opt, bench::report& report, const char* self) {
  const dk::stream host_stream;
  auto& pool = dk::default_memory(dk::device::cpu());
  {
    // The baseline frees what it allocated each round, like a loop that places a batch per step.
    // With glibc's default trim threshold (128 KiB) that memory goes back to the kernel every
    // round and the next round page-faults it in again: that is the entry as specified. A second,
    // informational entry keeps the allocator warm (M_TRIM_THRESHOLD raised at the start of a
    // fresh process). Both sides are then memcpy-bound, and the ratio depends on the page offsets
    // of the baseline's chunks relative to their sources: glibc copies 4 KiB with rep movsb, which
    // on the AMD machines measured runs at a fraction of its speed when the destination sits about
    // 2 KiB ahead of the source modulo the page (the heap layout this loop gets); with other
    // layouts the baseline runs at memcpy speed and the ratio is about 1. Placement chooses its
    // destinations' page offsets (place.hpp, page_offset_padding).
    const auto [t, b] = small_leaves_times(opt, pool);
    report.add({"place.small_leaves.vs_per_leaf_copy", "cpu", "time to place 1024 x 4 KiB", t * 1e6, "us",
                "per-leaf new[] + memcpy (+ delete[]), default glibc malloc", b * 1e6, b / t,
                "goal >= 1.5; the baseline page-faults its freed memory back every round (glibc trim)"});
    const auto [tw, bw] = warm_small_leaves_times(self, opt.quick);
    if (tw > 0 && bw > 0) {
      report.add({"place.small_leaves.vs_per_leaf_copy.warm_malloc", "cpu", "time to place 1024 x 4 KiB", tw * 1e6,
                  "us", "per-leaf new[] + memcpy (+ delete[]), malloc kept warm (fresh process)", bw * 1e6, bw / tw,
                  "informational; ratio depends on where malloc puts the copies relative to their sources"});
    }
    const auto leaves = make_leaves(1024, 4096);
    report_after_idle(report, "cpu", back_to_back_and_after_idle(opt.quick ? 51 : 201, [&] {
                        auto placed = dk::place(leaves, dk::device::cpu(), host_stream, pool);
                        if (placed[1023].data() == nullptr) std::abort();
                      }));
  }
  large_tree_entries(opt, report, host_stream, pool);
  staging_pack_entries(opt, report);
}

#if DEVICEKIT_HAS_CUDA
/// Median seconds of `fn` (which synchronises itself) after one warm-up call.
template <class Fn>
double warm_median(int samples, Fn&& fn) {
  fn();
  return bench::median_seconds(samples, fn);
}

/// A by_threads_entry for a placement on a GPU: the device is the GPU's, and the note gives the best
/// rate as a fraction of the pinned host-to-device ceiling measured in the same run.
bench::entry by_threads_on_gpu(bench::entry e, double h2d_gbs) {
  e.device = "cuda";
  char part[96];
  std::snprintf(part, sizeof part, "; best: %.3f of the pinned H2D ceiling (%.1f GB/s)", e.value / h2d_gbs, h2d_gbs);
  e.note += part;
  return e;
}

void cuda_entries(const bench::options& opt, bench::report& report, dk::device gpu) {
  dk::scoped_device on(gpu.ordinal());
  const dk::stream s(gpu);
  // Placement allocates from a warm caching pool, and every baseline copies into memory allocated
  // before the timing: neither side pays for an allocation inside the timed region. (The default
  // placement resource is timed separately below, as the informational `.default_resource`.)
  dk::memory_pool<dk::cuda_device_resource> res{dk::cuda_device_resource(gpu.ordinal())};
  const int samples = opt.quick ? 9 : 21;

  // The physical ceilings, measured in this run: a 1 GiB pinned host-to-device copy and a 1 GiB
  // device-to-device copy (bytes read plus bytes written, as METHOD.md and nvbandwidth count it).
  const std::size_t big = std::size_t{1} << 30;
  void* pinned_big = nullptr;
  void* dev_a = nullptr;
  void* dev_b = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaMallocHost(&pinned_big, big));
  DEVICEKIT_CUDA_CHECK(cudaMalloc(&dev_a, big));
  DEVICEKIT_CUDA_CHECK(cudaMalloc(&dev_b, big));
  std::memset(pinned_big, 3, big);
  const double h2d_s = warm_median(samples, [&] {
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dev_a, pinned_big, big, cudaMemcpyHostToDevice, s.native_handle()));
    s.synchronize();
  });
  const double d2d_s = warm_median(samples, [&] {
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dev_b, dev_a, big, cudaMemcpyDeviceToDevice, s.native_handle()));
    s.synchronize();
  });
  const double h2d_gbs = static_cast<double>(big) / h2d_s / 1e9;
  const double d2d_gbs = 2.0 * static_cast<double>(big) / d2d_s / 1e9;
  report.add({"ceiling.h2d_pinned", "cuda", "GB/s of a 1 GiB pinned host-to-device cudaMemcpyAsync", h2d_gbs, "GB/s",
              "(physical ceiling, measured)", h2d_gbs, 1.0, "placement entries below give their fraction of it"});
  report.add({"ceiling.d2d", "cuda", "GB/s of a 1 GiB device-to-device copy, read + written", d2d_gbs, "GB/s",
              "(physical ceiling, measured)", d2d_gbs, 1.0, "bytes read plus bytes written"});
  DEVICEKIT_CUDA_CHECK(cudaFreeHost(pinned_big));
  DEVICEKIT_CUDA_CHECK(cudaFree(dev_a));
  DEVICEKIT_CUDA_CHECK(cudaFree(dev_b));
  auto of_h2d = [&](std::size_t bytes, double seconds) {
    return std::to_string(static_cast<double>(bytes) / seconds / 1e9 / h2d_gbs).substr(0, 5) +
           " of the pinned H2D ceiling";
  };

  {
    const std::size_t leaf_bytes = std::size_t{64} << 20;
    auto leaves = make_leaves(4, leaf_bytes);
    for (auto& l : leaves) DEVICEKIT_CUDA_CHECK(cudaHostRegister(l.data(), leaf_bytes, cudaHostRegisterDefault));
    const auto tree = std::make_tuple(std::span<const float>(leaves[0]), std::span<const float>(leaves[1]),
                                      std::span<const float>(leaves[2]), std::span<const float>(leaves[3]));
    void* pinned = nullptr;
    void* dev = nullptr;
    DEVICEKIT_CUDA_CHECK(cudaMallocHost(&pinned, 4 * leaf_bytes));
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&dev, 4 * leaf_bytes));
    std::memset(pinned, 1, 4 * leaf_bytes);
    auto ours = [&] {
      auto placed = dk::place(tree, gpu, s, res);
      s.synchronize();
    };
    auto raw = [&] {
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dev, pinned, 4 * leaf_bytes, cudaMemcpyHostToDevice, s.native_handle()));
      s.synchronize();
    };
    const auto [t, base] = bench::interleaved_medians(samples, ours, raw);
    report.add({"place.large_tree.vs_raw_pinned_copy", "cuda", "time to place 4 x 64 MiB (pinned leaves), warm pool",
                t * 1e3, "ms", "one pinned cudaMemcpyAsync of 256 MiB", base * 1e3, base / t,
                "goal >= 0.95; " + of_h2d(4 * leaf_bytes, t)});

    // Pageable sources: the same bytes in ordinary vectors.
    for (auto& l : leaves) DEVICEKIT_CUDA_CHECK(cudaHostUnregister(l.data()));
    const auto pageable = std::make_tuple(leaves[0], leaves[1], leaves[2], leaves[3]);
    std::vector<std::byte> plain(4 * leaf_bytes, std::byte{1});
    auto ours_pageable = [&] {
      auto placed = dk::place(pageable, gpu, s, res);
      s.synchronize();
    };
    auto plain_copy = [&] {
      DEVICEKIT_CUDA_CHECK(cudaMemcpy(dev, plain.data(), plain.size(), cudaMemcpyHostToDevice));
    };
    const auto [tp, bp, br] = bench::interleaved_medians(samples, ours_pageable, plain_copy, raw);
    report.add({"place.pageable.vs_raw_pinned_copy", "cuda", "time to place 4 x 64 MiB pageable, warm pool", tp * 1e3,
                "ms", "one pinned cudaMemcpyAsync of 256 MiB", br * 1e3, br / tp,
                "goal >= 0.85; " + of_h2d(4 * leaf_bytes, tp)});
    report.add({"place.pageable.vs_plain_pageable_copy", "cuda", "time to place 4 x 64 MiB pageable, warm pool",
                tp * 1e3, "ms", "cudaMemcpy of 256 MiB from pageable memory", bp * 1e3, bp / tp, "goal >= 1.5"});
    // The same placement by 1 to 16 copy threads: how many the host needs for the goal (the
    // staging is bound by its packing, staging.pack.by_threads, while the copy engine waits).
    report.add(by_threads_on_gpu(
        by_threads_entry("place.pageable.by_threads", "GB/s placing 4 x 64 MiB pageable, best thread count",
                         4.0 * static_cast<double>(leaf_bytes), opt.quick ? 5 : 15, ours_pageable),
        h2d_gbs));

    // What a user gets with no resource given (the default placement resource).
    auto& def = dk::default_placement_resource(gpu);
    const double td = warm_median(samples, [&] {
      auto placed = dk::place(tree, gpu, s, def);
      s.synchronize();
    });
    report.add({"place.large_tree.vs_raw_pinned_copy.default_resource", "cuda",
                "time to place 4 x 64 MiB (pinned leaves), default placement resource", td * 1e3, "ms",
                "one pinned cudaMemcpyAsync of 256 MiB", base * 1e3, base / td, "informational: allocation included"});
    DEVICEKIT_CUDA_CHECK(cudaFreeHost(pinned));
    DEVICEKIT_CUDA_CHECK(cudaFree(dev));
  }
  {
    const auto leaves = make_leaves(1024, 4096);
    void* block = nullptr;
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&block, leaves.size() * 4096));
    auto ours = [&] {
      auto placed = dk::place(leaves, gpu, s, res);
      s.synchronize();
    };
    auto per_leaf = [&] {
      for (std::size_t i = 0; i < leaves.size(); ++i) {
        DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(block) + i * 4096, leaves[i].data(), 4096,
                                             cudaMemcpyHostToDevice, s.native_handle()));
      }
      s.synchronize();
    };
    auto per_leaf_malloc = [&] {
      std::vector<void*> ptrs(leaves.size());
      for (std::size_t i = 0; i < leaves.size(); ++i) {
        DEVICEKIT_CUDA_CHECK(cudaMalloc(&ptrs[i], 4096));
        DEVICEKIT_CUDA_CHECK(
            cudaMemcpyAsync(ptrs[i], leaves[i].data(), 4096, cudaMemcpyHostToDevice, s.native_handle()));
      }
      s.synchronize();
      for (void* p : ptrs) DEVICEKIT_CUDA_CHECK(cudaFree(p));
    };
    const auto [t, b, c] = bench::interleaved_medians(samples, ours, per_leaf, per_leaf_malloc);
    const auto after_idle = back_to_back_and_after_idle(samples, ours);
    report.add({"place.small_leaves.vs_per_leaf_copy", "cuda", "time to place 1024 x 4 KiB (pageable), warm pool",
                t * 1e6, "us", "per-leaf cudaMemcpyAsync into a preallocated block", b * 1e6, b / t,
                "goal >= 20; " + of_h2d(leaves.size() * 4096, t)});
    report.add({"place.small_leaves.vs_per_leaf_malloc_copy", "cuda",
                "time to place 1024 x 4 KiB (pageable), warm pool", t * 1e6, "us",
                "per-leaf cudaMalloc + cudaMemcpyAsync (+ cudaFree)", c * 1e6, c / t, "informational"});
    report_after_idle(report, "cuda", after_idle);
    report.add(by_threads_on_gpu(
        by_threads_entry("place.small_leaves.by_threads", "GB/s placing 1024 x 4 KiB pageable, best thread count",
                         static_cast<double>(leaves.size() * 4096), opt.quick ? 21 : 61, ours),
        h2d_gbs));
    // Transfers of 8 and 16 MiB of 4 KiB leaves (above pipelined_stage_min_bytes, up to
    // single_stage_limit) staged in the default number of pieces against one buffer and one copy,
    // and in 2 and 8 pieces, interleaved: what overlapping the copy with the packing gains there,
    // and whether another count would gain more. (The 1,024 leaves above go in one buffer: at
    // 4 MiB one buffer was faster than pieces on an H200.)
    const unsigned pieces = dk::detail::staging_pipeline_chunks().load();
    auto staged_in = [&](const std::vector<std::vector<float>>& tree, unsigned n) {
      return [&, n] {
        const unsigned old = dk::detail::staging_pipeline_chunks().exchange(n);
        auto placed = dk::place(tree, gpu, s, res);
        s.synchronize();
        dk::detail::staging_pipeline_chunks() = old;
      };
    };
    for (const std::size_t mib : {std::size_t{8}, std::size_t{16}}) {
      const auto more = make_leaves(mib * 256, 4096);
      const auto [p_default, p_one, p_two, p_eight] = bench::interleaved_medians(
          samples, staged_in(more, pieces), staged_in(more, 1), staged_in(more, 2), staged_in(more, 8));
      report.add({"place.small_leaves.pipelined.vs_one_buffer." + std::to_string(mib) + "MiB", "cuda",
                  "time to place " + std::to_string(more.size()) + " x 4 KiB (pageable) staged in " +
                      std::to_string(pieces) + " pieces, warm pool",
                  p_default * 1e6, "us", "the same staged in one buffer, one copy", p_one * 1e6, p_one / p_default,
                  "informational; 2 pieces: " + std::to_string(static_cast<int>(p_two * 1e6)) +
                      " us, 8 pieces: " + std::to_string(static_cast<int>(p_eight * 1e6)) + " us, " +
                      std::to_string(dk::host_copy_threads()) + " copy threads; " +
                      of_h2d(more.size() * 4096, std::min({p_default, p_one, p_two, p_eight})) + " at best"});
    }
    DEVICEKIT_CUDA_CHECK(cudaFree(block));
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--child-warm") == 0) {
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    bench::options o;
    o.quick = argc >= 3 && std::strcmp(argv[2], "--quick") == 0;
    const auto [t, b] = small_leaves_times(o, dk::default_memory(dk::device::cpu()));
    std::printf("%.9f %.9f\n", t, b);
    return 0;
  }
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  cpu_entries(opt, report, argv[0]);
#if DEVICEKIT_HAS_CUDA
  if (dk::cuda_detector{}.detect(dk::settings{}).gpu_count > 0) cuda_entries(opt, report, dk::device::cuda(0));
#endif
  report.write(opt.json_path);
  return 0;
}
