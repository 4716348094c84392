// The caching pool against its upstreams on RMM's `random_allocations` trace
// (random_allocations.hpp; sizes 1 B .. 1 MiB), replayed identically through each resource. One
// operation = one allocate or one free. The comparison with RMM itself is benchmarks/rmm.
//
//   pool.random_allocations.vs_upstream (cpu)   memory_pool<host_resource> vs host_resource alone
//                                               (aligned operator new = glibc), ns per operation
//   pool.fragmentation (cpu)                    peak reserved / peak live bytes of a fresh pool on
//                                               the N = 10,000 trace (1.0 would be perfect)
//   pool.trace.overhead (cpu)                   the pool while a memory trace records it
//                                               (DEVICEKIT_TRACE, memory/trace.hpp) vs not recording,
//                                               N = 100,000; goal ratio >= 0.95
//   pool.random_allocations.vs_cudaMalloc        (GPU only) pool on cuda_device_resource, synchronous
//   pool.random_allocations.vs_cudaMallocAsync   (GPU only) stream-ordered, one stream, vs the
//                                               default driver pool with its release threshold
//                                               raised (so it caches too)
//   pool.random_allocations.vs_cub_caching      (GPU only) vs cub::CachingDeviceAllocator (bins
//                                               8^3..8^7, unlimited cache), same stream
//   pool.capture_query                          (GPU only, informational) one capture_of of a stream
//                                               that does not capture (the driver's
//                                               cuStreamIsCapturing), the only CUDA call a
//                                               stream-ordered pool operation on one stream makes,
//                                               vs that operation (N=10,000); the note gives the
//                                               runtime's cudaStreamGetCaptureInfo and
//                                               cudaStreamIsCapturing beside it
//   pool.random_allocations.ordered.without_capture_query
//                                               (GPU only, informational) the stream-ordered pool
//                                               through an upstream that answers the capture query
//                                               itself ("not capturing") vs the pool asking
//                                               capture_of: what the query costs in place, where the
//                                               pool's own work has taken the caches (N=10,000)
//
// The pool is warm (it is built once and keeps its chunks between repetitions, as in a training
// loop); the cold first run is in the note. Timings are medians over alternating blocks of
// repetitions (pool block, baseline block, ...). The cpu entries are timed in thread CPU time:
// on a shared machine wall-clock time mostly measures the other processes (the workload is
// single-threaded and makes no system call in steady state, so CPU time is its cost); the GPU
// entries use wall-clock time, which includes the final stream synchronisation.
// N: 10,000 in --quick mode (plus 1,000 and 100,000 for the cpu pair); 1,000 / 10,000 / 100,000
// in the full mode.
#include "bench_common.hpp"
#include "random_allocations.hpp"

#include <devicekit/devicekit.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <cuda.h>  // the driver's types, for its capture query through cudaGetDriverEntryPointByVersion
#endif
#if DEVICEKIT_HAS_CUDA && __has_include(<cub/util_allocator.cuh>)
#  include <cub/util_allocator.cuh>
#  define DEVICEKIT_BENCH_CUB 1
#else
#  define DEVICEKIT_BENCH_CUB 0
#endif

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace dk = devicekit;

namespace {

using trace = bench::alloc_trace;
using step = bench::alloc_step;

trace make_trace(std::size_t n, std::size_t max_size, std::size_t max_usage, std::uint64_t seed) {
  return bench::make_alloc_trace(n, max_size, max_usage, seed);
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double wall_seconds() { return std::chrono::duration<double>(bench::clock::now().time_since_epoch()).count(); }

/// Replays `t`: alloc(size) -> pointer, release(pointer, size). Returns seconds of `now`.
template <class Alloc, class Release, class Finish>
double replay(double (*now)(), const trace& t, Alloc&& alloc, Release&& release, Finish&& finish) {
  std::vector<std::pair<void*, std::size_t>> live;
  live.reserve(t.n);
  const double t0 = now();
  for (const step& s : t.steps) {
    if (s.allocate) {
      live.emplace_back(alloc(s.value), s.value);
    } else {
      const auto victim = live[s.value];
      live[s.value] = live.back();
      live.pop_back();
      release(victim.first, victim.second);
    }
  }
  for (const auto& [p, n] : live) release(p, n);
  finish();
  return now() - t0;
}

constexpr std::size_t max_size = 1u << 20;
constexpr std::size_t host_max_usage = 4ull << 30;

struct pair_timing {
  double ours = 0;
  double base = 0;
  double cold = 0;  ///< first pool run, chunks taken from the upstream
};

/// After one cold pool run and one baseline run, `rounds` rounds of `block` pool runs then
/// `block` baseline runs; medians.
template <class Ours, class Base>
pair_timing compare(int rounds, int block, Ours&& ours, Base&& base) {
  pair_timing r;
  r.cold = ours();
  (void)base();  // warms the baseline the same way
  std::vector<double> a;
  std::vector<double> b;
  for (int i = 0; i < rounds; ++i) {
    for (int k = 0; k < block; ++k) a.push_back(ours());
    for (int k = 0; k < block; ++k) b.push_back(base());
  }
  r.ours = bench::median(a);
  r.base = bench::median(b);
  return r;
}

std::string fmt(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void trace_entry(bench::report& report, bool quick);

void cpu_entries(bench::report& report, bool quick) {
  const std::vector<std::size_t> sizes = {10'000, 1'000, 100'000};  // the first is the headline
  for (const std::size_t n : sizes) {
    const trace t = make_trace(n, max_size, host_max_usage, 42);
    dk::memory_pool<dk::host_resource> pool;  // default configuration
    dk::host_resource upstream;
    const int rounds = quick ? 3 : 7;
    const int block = n >= 100'000 ? 1 : (n >= 10'000 ? 3 : 10);
    const auto r = compare(
        rounds, block,
        [&] {
          return replay(
              thread_cpu_seconds, t, [&](std::size_t bytes) { return pool.allocate(bytes); },
              [&](void* p, std::size_t bytes) { pool.deallocate(p, bytes); }, [] {});
        },
        [&] {
          return replay(
              thread_cpu_seconds, t, [&](std::size_t bytes) { return upstream.allocate(bytes, 256); },
              [&](void* p, std::size_t bytes) { upstream.deallocate(p, bytes, 256); }, [] {});
        });
    const double ops = static_cast<double>(t.operations);
    const double ns = r.ours / ops * 1e9;
    const double base_ns = r.base / ops * 1e9;
    const std::string name = n == sizes.front() ? "pool.random_allocations.vs_upstream"
                                                : "pool.random_allocations.vs_upstream.n" + std::to_string(n);
    report.add({name, "cpu", "ns (thread CPU time) per allocate or free, warm pool (median)", ns, "ns",
                "host_resource (aligned operator new) alone", base_ns, r.base / r.ours,
                "N=" + std::to_string(n) + ", sizes 1 B..1 MiB, " + std::to_string(t.operations) +
                    " ops; cold first run " + fmt(r.cold / ops * 1e9) + " ns/op; goal ratio >= 5, <= 100 ns/op"});

    if (n == sizes.front()) {
      dk::memory_pool<dk::host_resource> fresh;
      (void)replay(
          thread_cpu_seconds, t, [&](std::size_t bytes) { return fresh.allocate(bytes); },
          [&](void* p, std::size_t bytes) { fresh.deallocate(p, bytes); }, [] {});
      const auto s = fresh.stats();
      const double ratio = static_cast<double>(s.peak_reserved_bytes) / static_cast<double>(s.peak_allocated_bytes);
      report.add({"pool.fragmentation", "cpu", "peak reserved / peak live bytes, fresh pool", ratio, "x",
                  "ideal (reserved = live)", 1.0, 1.0 / ratio,
                  "N=" + std::to_string(n) + ": peak live " +
                      fmt(static_cast<double>(s.peak_allocated_bytes) / (1 << 20)) + " MiB, peak reserved " +
                      fmt(static_cast<double>(s.peak_reserved_bytes) / (1 << 20)) + " MiB in " +
                      std::to_string(s.upstream_allocations) + " chunks; goal <= 1.15"});
    }
  }
  trace_entry(report, quick);
}

/// pool.trace.overhead: the warm pool on the N = 100,000 trace while a memory trace records it
/// (memory/trace.hpp) against the same pool not recording, interleaved. Each recording run opens
/// and closes its own file (about 8 ms of work around it; the file is written in 1 MiB blocks, and
/// the time to write it counts).
void trace_entry(bench::report& report, bool quick) {
  const trace t = make_trace(100'000, max_size, host_max_usage, 42);
  dk::memory_pool<dk::host_resource> pool;
  const std::string path = (std::filesystem::temp_directory_path() / "devicekit_bench_memory_trace.dkt").string();
  auto run = [&] {
    return replay(
        thread_cpu_seconds, t, [&](std::size_t bytes) { return pool.allocate(bytes); },
        [&](void* p, std::size_t bytes) { pool.deallocate(p, bytes); }, [] {});
  };
  const auto r = compare(
      quick ? 3 : 7, 1,
      [&] {
        const double t0 = thread_cpu_seconds();
        dk::start_memory_trace(path);
        (void)run();
        dk::stop_memory_trace();
        return thread_cpu_seconds() - t0;
      },
      run);
  std::remove(path.c_str());
  const double ops = static_cast<double>(t.operations);
  report.add({"pool.trace.overhead", "cpu", "ns (thread CPU time) per allocate or free while a memory trace records",
              r.ours / ops * 1e9, "ns", "the same warm pool, not recording", r.base / ops * 1e9, r.base / r.ours,
              "N=100000, " + std::to_string(t.operations) +
                  " ops, the trace file opened and closed in each recording run; goal ratio >= 0.95 (at most 5% "
                  "slower); recording off costs one relaxed load and a branch per operation"});
}

#if DEVICEKIT_HAS_CUDA
/// cuda_device_resource that says itself that its streams never capture: the pool then asks
/// CUDA nothing (memory/resources.hpp, capture_of). For measurement only: a pool on it would
/// serve a capturing stream from eager memory.
struct never_capturing_resource : dk::cuda_device_resource {
  using dk::cuda_device_resource::cuda_device_resource;
  dk::capture_state capture_of(dk::native_stream_handle) const noexcept { return {}; }
};

void gpu_entries(bench::report& report, bool quick) {
  const std::vector<std::size_t> sizes =
      quick ? std::vector<std::size_t>{10'000} : std::vector<std::size_t>{10'000, 1'000, 100'000};
  dk::check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
  cudaStream_t s = nullptr;
  dk::check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  // The default driver pool keeps what it caches (its default threshold, 0, would release at every sync).
  cudaMemPool_t driver_pool = nullptr;
  dk::check_cuda(cudaDeviceGetDefaultMemPool(&driver_pool, 0), "cudaDeviceGetDefaultMemPool");
  std::uint64_t keep = UINT64_MAX;
  dk::check_cuda(cudaMemPoolSetAttribute(driver_pool, cudaMemPoolAttrReleaseThreshold, &keep),
                 "cudaMemPoolSetAttribute");
  auto check = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess) dk::check_cuda(e, what);
  };
  double stream_op_ns = 0;  // the pool's stream-ordered ns/op at the first N
  {                         // the pool (which ordered work on `s`) goes before the stream does
    dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
    for (const std::size_t n : sizes) {
      const std::size_t max_usage = 4ull << 30;
      const trace t = make_trace(n, max_size, max_usage, 42);
      const double ops = static_cast<double>(t.operations);
      const std::string suffix = n == sizes.front() ? "" : ".n" + std::to_string(n);
      auto ours_sync = [&] {
        return replay(
            wall_seconds, t, [&](std::size_t b) { return pool.allocate(b); },
            [&](void* p, std::size_t b) { pool.deallocate(p, b); }, [] {});
      };
      auto ours_stream = [&] {
        return replay(
            wall_seconds, t, [&](std::size_t b) { return pool.allocate_async(b, 256, s); },
            [&](void* p, std::size_t b) { pool.deallocate_async(p, b, 256, s); },
            [&] { check(cudaStreamSynchronize(s), "cudaStreamSynchronize"); });
      };
      auto add = [&](const std::string& base_name, const std::string& what, const pair_timing& r,
                     const std::string& goal) {
        report.add({"pool.random_allocations.vs_" + base_name + suffix, "cuda",
                    "ns per allocate or free, warm pool (median)", r.ours / ops * 1e9, "ns", what, r.base / ops * 1e9,
                    r.base / r.ours,
                    "N=" + std::to_string(n) + ", sizes 1 B..1 MiB; cold first run " + fmt(r.cold / ops * 1e9) +
                        " ns/op; goal " + goal + ", <= 100 ns/op"});
      };

      const int slow_reps = quick ? 1 : (n >= 100'000 ? 1 : 3);
      add("cudaMalloc", "cudaMalloc / cudaFree",
          compare(slow_reps, 1, ours_sync,
                  [&] {
                    return replay(
                        wall_seconds, t,
                        [&](std::size_t b) {
                          void* p = nullptr;
                          check(cudaMalloc(&p, b), "cudaMalloc");
                          return p;
                        },
                        [&](void* p, std::size_t) { check(cudaFree(p), "cudaFree"); }, [] {});
                  }),
          "ratio >= 100");

      const int reps = quick ? 5 : 11;
      const pair_timing vs_async = compare(reps, 1, ours_stream, [&] {
        return replay(
            wall_seconds, t,
            [&](std::size_t b) {
              void* p = nullptr;
              check(cudaMallocAsync(&p, b, s), "cudaMallocAsync");
              return p;
            },
            [&](void* p, std::size_t) { check(cudaFreeAsync(p, s), "cudaFreeAsync"); },
            [&] { check(cudaStreamSynchronize(s), "cudaStreamSynchronize"); });
      });
      add("cudaMallocAsync", "cudaMallocAsync / cudaFreeAsync, one stream, threshold raised", vs_async, "ratio >= 3");
      if (n == sizes.front()) {
        stream_op_ns = vs_async.ours / ops * 1e9;
        dk::memory_pool<never_capturing_resource> bare{never_capturing_resource(0)};
        const pair_timing r = compare(
            reps, 1,
            [&] {
              return replay(
                  wall_seconds, t, [&](std::size_t b) { return bare.allocate_async(b, 256, s); },
                  [&](void* p, std::size_t b) { bare.deallocate_async(p, b, 256, s); },
                  [&] { check(cudaStreamSynchronize(s), "cudaStreamSynchronize"); });
            },
            ours_stream);
        report.add({"pool.random_allocations.ordered.without_capture_query", "cuda",
                    "ns per stream-ordered allocate or free, no capture query (upstream answers it)",
                    r.ours / ops * 1e9, "ns", "the same pool asking capture_of at each operation", r.base / ops * 1e9,
                    r.base / r.ours,
                    "informational: the query's cost in place is " + fmt((r.base - r.ours) / ops * 1e9) +
                        " ns per operation; N=" + std::to_string(n)});
      }

#  if DEVICEKIT_BENCH_CUB
      cub::CachingDeviceAllocator cub_alloc(8, 3, 7, static_cast<std::size_t>(-1), false);
      add("cub_caching", "cub::CachingDeviceAllocator(8, 3, 7, unlimited), one stream",
          compare(reps, 1, ours_stream,
                  [&] {
                    return replay(
                        wall_seconds, t,
                        [&](std::size_t b) {
                          void* p = nullptr;
                          check(cub_alloc.DeviceAllocate(&p, b, s), "DeviceAllocate");
                          return p;
                        },
                        [&](void* p, std::size_t) { check(cub_alloc.DeviceFree(p), "DeviceFree"); },
                        [&] { check(cudaStreamSynchronize(s), "cudaStreamSynchronize"); });
                  }),
          "ratio >= 3");
#  endif
      pool.trim();
    }
  }
  {  // what remains of a stream-ordered operation's CUDA calls: the capture query
    constexpr int calls = 100'000;
    // Median ns of one call of `query`, over `calls` calls in a row.
    auto per_call_ns = [&](auto&& query) {
      return bench::median_seconds(quick ? 3 : 9,
                                   [&] {
                                     for (int i = 0; i < calls; ++i) query();
                                   }) /
             calls * 1e9;
    };
    const double q = per_call_ns([&] { (void)dk::capture_of(s); });
    const double get_capture_info = per_call_ns([&] {
      cudaStreamCaptureStatus st{};
      unsigned long long id = 0;
      (void)cudaStreamGetCaptureInfo(s, &st, &id);
    });
    const double is_capturing = per_call_ns([&] {
      cudaStreamCaptureStatus st{};
      (void)cudaStreamIsCapturing(s, &st);
    });
    // The driver's own query, through the runtime's entry point: what the runtime's wrapper adds.
    std::string driver_query = "unavailable";
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess && fn != nullptr) {
      const auto driver_is_capturing = reinterpret_cast<CUresult (*)(CUstream, CUstreamCaptureStatus*)>(fn);
      driver_query = fmt(per_call_ns([&] {
                       CUstreamCaptureStatus st{};
                       (void)driver_is_capturing(s, &st);
                     })) +
                     " ns";
    } else {
      (void)cudaGetLastError();
    }
    std::string note = "informational: the query is the one CUDA call of such an operation on one stream; it takes ";
    note.append(fmt(100.0 * q / stream_op_ns))
        .append("% of it; cudaStreamGetCaptureInfo: ")
        .append(fmt(get_capture_info))
        .append(" ns; cudaStreamIsCapturing: ")
        .append(fmt(is_capturing))
        .append(" ns; cuStreamIsCapturing (driver entry point): ")
        .append(driver_query);
    report.add({"pool.capture_query", "cuda", "ns per capture_of (stream not capturing)", q, "ns",
                "one stream-ordered pool operation (vs_cudaMallocAsync, N=10000)", stream_op_ns, stream_op_ns / q,
                note});
  }
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  cpu_entries(report, opt.quick);
#if DEVICEKIT_HAS_CUDA
  dk::device_manager<> probe{dk::settings{}};
  if (probe.has_gpu()) gpu_entries(report, opt.quick);
#endif
  report.write(opt.json_path);
  return 0;
}
