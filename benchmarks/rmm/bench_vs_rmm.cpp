// devicekit's caching pool against RMM and the CUDA allocators, on RMM's `random_allocations`
// trace (../random_allocations.hpp: sizes 1 B .. 1 MiB, live bytes capped at 16,000 MiB as in
// RMM's benchmark). One operation = one allocate or one free.
//
// The trace is generated once, outside the timing, and replayed identically through every
// allocator, each behind the same virtual interface (allocator_iface.hpp). "4 streams": each
// allocation is made on one of four non-blocking streams (drawn with the trace) and freed on the
// same stream, so blocks move between streams through the allocators' cross-stream reuse paths.
// Every replay ends by synchronising the streams it used, inside the timed region.
//
// Entries (ratio = their time / ours, bigger is better; the goals are the project's targets):
//   pool.random_allocations.vs_rmm_pool         rmm::mr::pool_memory_resource     goal >= 1.5
//   pool.random_allocations.vs_rmm_arena        rmm::mr::arena_memory_resource    goal >= 1.5
//   pool.random_allocations.vs_cudaMallocAsync  default driver pool, threshold raised, goal >= 3
//   pool.random_allocations.vs_cub_caching      cub::CachingDeviceAllocator       goal >= 3
//   pool.random_allocations.vs_cudaMalloc       cudaMalloc / cudaFree             goal >= 100
// and ours <= 100 ns per operation. The headline name is N = 10,000 on one stream; the others
// carry `.n<N>` and `.s4` suffixes. `--quick` leaves out N = 100,000: there RMM's pool and arena
// take 50 to 180 us per operation, so those rows alone took over five minutes on an H200, most
// of a lent machine's time.
//
// Method: every allocator (ours included) is warmed by one full replay before timing; then
// `rounds` rounds alternate one replay of ours with one of the baseline; medians. Built and run
// only on a GPU machine by scripts/gpu-check (RMM comes from the librmm-cu13 wheel; it is never a
// dependency of devicekit or its tests).
#include "allocator_iface.hpp"
#include "bench_common.hpp"
#include "random_allocations.hpp"

#include <devicekit/devicekit.hpp>

#include <cub/util_allocator.cuh>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) dk::check_cuda(e, what);
}

using trace = bench::alloc_trace;
using step = bench::alloc_step;

constexpr std::size_t max_size = 1u << 20;
constexpr std::size_t max_usage = 16'000ull << 20;  // RMM's benchmark: 16,000 MiB

double wall_seconds() { return std::chrono::duration<double>(bench::clock::now().time_since_epoch()).count(); }

/// One replay of `t` through `a` on `streams`; seconds, the final synchronisation included.
double replay(const trace& t, bench_rmm::allocator_iface& a, const std::vector<cudaStream_t>& streams) {
  struct live_block {
    void* p;
    std::uint32_t bytes;
    std::uint8_t stream;
  };
  std::vector<live_block> live;
  live.reserve(t.n);
  const double t0 = wall_seconds();
  for (const step& s : t.steps) {
    if (s.allocate) {
      live.push_back({a.allocate(s.value, streams[s.stream]), s.value, s.stream});
    } else {
      const live_block victim = live[s.value];
      live[s.value] = live.back();
      live.pop_back();
      a.deallocate(victim.p, victim.bytes, streams[victim.stream]);
    }
  }
  for (const live_block& b : live) a.deallocate(b.p, b.bytes, streams[b.stream]);
  for (int i = 0; i < t.streams; ++i)
    check(cudaStreamSynchronize(streams[static_cast<std::size_t>(i)]), "cudaStreamSynchronize");
  return wall_seconds() - t0;
}

// --- the allocators behind the common interface ---------------------------------------------------

class devicekit_pool final : public bench_rmm::allocator_iface {
 public:
  devicekit_pool() : pool_(dk::cuda_device_resource(0)) {}
  void* allocate(std::size_t bytes, cudaStream_t s) override { return pool_.allocate_async(bytes, 256, s); }
  void deallocate(void* p, std::size_t bytes, cudaStream_t s) override { pool_.deallocate_async(p, bytes, 256, s); }
  dk::memory_pool<dk::cuda_device_resource>& pool() { return pool_; }

 private:
  dk::memory_pool<dk::cuda_device_resource> pool_;
};

class cuda_malloc_async final : public bench_rmm::allocator_iface {
 public:
  cuda_malloc_async() {
    check(cudaDeviceGetDefaultMemPool(&pool_, 0), "cudaDeviceGetDefaultMemPool");
    check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &saved_), "cudaMemPoolGetAttribute");
    // With the default threshold (0) the driver pool gives its memory back at every
    // synchronisation and would not cache at all (CUDA programming guide, "Stream Ordered Memory
    // Allocator", physical page caching behaviour).
    std::uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  }
  ~cuda_malloc_async() override {
    (void)cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &saved_);
    (void)cudaMemPoolTrimTo(pool_, 0);
  }
  void* allocate(std::size_t bytes, cudaStream_t s) override {
    void* p = nullptr;
    check(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync");
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t s) override { check(cudaFreeAsync(p, s), "cudaFreeAsync"); }

 private:
  cudaMemPool_t pool_ = nullptr;
  std::uint64_t saved_ = 0;
};

class cub_caching final : public bench_rmm::allocator_iface {
 public:
  void* allocate(std::size_t bytes, cudaStream_t s) override {
    void* p = nullptr;
    check(alloc_.DeviceAllocate(&p, bytes, s), "cub::CachingDeviceAllocator::DeviceAllocate");
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t) override {
    check(alloc_.DeviceFree(p), "cub::CachingDeviceAllocator::DeviceFree");
  }

 private:
  // Bins 8^3 .. 8^7 bytes (512 B .. 2 MiB, so every request of the trace is binned), no cache cap.
  cub::CachingDeviceAllocator alloc_{8, 3, 7, static_cast<std::size_t>(-1), false};
};

class cuda_malloc final : public bench_rmm::allocator_iface {
 public:
  void* allocate(std::size_t bytes, cudaStream_t) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void deallocate(void* p, std::size_t, cudaStream_t) override { check(cudaFree(p), "cudaFree"); }
};

std::string fmt(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

struct baseline {
  std::string key;   ///< entry name after "vs_"
  std::string what;  ///< description
  double goal;       ///< ratio goal
  bool slow;         ///< cudaMalloc: fewer repetitions
};

int rounds_for(std::size_t n, bool quick, bool slow) {
  if (slow) return n >= 100'000 ? 1 : 3;
  if (n >= 100'000) return quick ? 3 : 7;
  if (n >= 10'000) return quick ? 7 : 15;
  return quick ? 15 : 41;
}

}  // namespace

int main(int argc, char** argv) {
  const auto opt = bench::parse(argc, argv);
  // Each row is printed as it is measured; line buffering keeps them when a run is cut short.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bench::report report;
  if (dk::cuda_detector{}.detect(dk::settings{}).gpu_count == 0) {
    std::printf("bench_vs_rmm: no GPU, nothing to measure\n");
    report.write(opt.json_path);
    return 0;
  }
  check(cudaSetDevice(0), "cudaSetDevice(0)");
  std::printf("bench_vs_rmm: RMM %s\n", bench_rmm::rmm_version());

  std::vector<cudaStream_t> streams(4);
  for (auto& s : streams) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");

  std::vector<std::size_t> sizes = {10'000, 1'000, 100'000};  // the first is the headline
  if (opt.quick) sizes.pop_back();
  const std::vector<int> stream_counts = {1, 4};
  std::vector<trace> traces;
  for (const std::size_t n : sizes) {
    for (const int sc : stream_counts) traces.push_back(bench::make_alloc_trace(n, max_size, max_usage, 42, sc));
  }

  {
    devicekit_pool ours;
    for (const trace& t : traces) (void)replay(t, ours, streams);  // warm: the pool keeps its chunks
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");

    const std::vector<baseline> baselines = {
        {"rmm_pool",
         std::string("rmm::mr::pool_memory_resource (RMM ") + bench_rmm::rmm_version() + "), initial 50% of free", 1.5,
         false},
        {"rmm_arena",
         std::string("rmm::mr::arena_memory_resource (RMM ") + bench_rmm::rmm_version() + "), arena 50% of free", 1.5,
         false},
        {"cudaMallocAsync", "cudaMallocAsync / cudaFreeAsync, default pool, release threshold raised", 3.0, false},
        {"cub_caching", "cub::CachingDeviceAllocator(8, 3, 7, unlimited)", 3.0, false},
        {"cudaMalloc", "cudaMalloc / cudaFree", 100.0, true},
    };
    for (const baseline& b : baselines) {
      std::unique_ptr<bench_rmm::allocator_iface> base;
      if (b.key == "rmm_pool") base = bench_rmm::make_rmm_pool();
      if (b.key == "rmm_arena") {
        check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
        base = bench_rmm::make_rmm_arena((free_bytes / 2) & ~std::size_t{255});
      }
      if (b.key == "cudaMallocAsync") base = std::make_unique<cuda_malloc_async>();
      if (b.key == "cub_caching") base = std::make_unique<cub_caching>();
      if (b.key == "cudaMalloc") base = std::make_unique<cuda_malloc>();
      for (const trace& t : traces) {
        const double cold = replay(t, *base, streams);  // the baseline's warm-up
        const int rounds = rounds_for(t.n, opt.quick, b.slow);
        std::vector<double> a;
        std::vector<double> c;
        for (int r = 0; r < rounds; ++r) {
          a.push_back(replay(t, ours, streams));
          c.push_back(replay(t, *base, streams));
        }
        const double ours_s = bench::median(a);
        const double base_s = bench::median(c);
        const double ops = static_cast<double>(t.operations);
        std::string name = "pool.random_allocations.vs_" + b.key;
        if (t.n != sizes.front()) name += ".n" + std::to_string(t.n);
        if (t.streams != 1) name += ".s" + std::to_string(t.streams);
        report.add({name, "cuda", "ns per allocate or free, warm (median of " + std::to_string(rounds) + ")",
                    ours_s / ops * 1e9, "ns", b.what, base_s / ops * 1e9, base_s / ours_s,
                    "N=" + std::to_string(t.n) + ", " + std::to_string(t.streams) + " stream(s), " +
                        std::to_string(t.operations) + " ops, sizes 1 B..1 MiB; baseline first run " +
                        fmt(cold / ops * 1e9) + " ns/op; goal ratio >= " + fmt(b.goal) + ", ours <= 100 ns/op"});
      }
    }
    const auto s = ours.pool().stats();
    std::printf("devicekit pool after the run: peak allocated %.1f MiB, peak reserved %.1f MiB, %zu upstream chunks\n",
                static_cast<double>(s.peak_allocated_bytes) / (1 << 20),
                static_cast<double>(s.peak_reserved_bytes) / (1 << 20),
                static_cast<std::size_t>(s.upstream_allocations));
  }
  // The streams outlive every allocator that ordered work on them.
  for (auto& s : streams) check(cudaStreamDestroy(s), "cudaStreamDestroy");
  report.write(opt.json_path);
  return 0;
}
