// GPU-only placement entries that launch kernels (nvcc; run only with a GPU, else nothing):
//   prefetch.overlap                    batches prefetched while a synthetic kernel as long as one
//                                       batch's copy runs on each: value = max(compute, copy) /
//                                       total, 1.0 = perfect overlap (goal >= 0.9); each figure a
//                                       median after a warm-up; `.pool`: a memory_pool resource.
//                                       The first batch's copy precedes any compute, so with n
//                                       batches the ratio cannot pass n / (n + 1): 32 batches in
//                                       the quick mode (0.970), 64 in the full one (0.985)
//   place.batched_d2d.vs_per_leaf_memcpy.<n>x<size>
//                                       n leaves in n separate device allocations copied into one
//                                       block: dk::batched_copy (cub::DeviceMemcpy::Batched with
//                                       its tables staged per call, what placement does at and
//                                       above the threshold) vs one cudaMemcpyAsync per leaf; the
//                                       note gives the CUB kernel alone. The sizes bracket
//                                       detail::batched_copy_min_count and _max_average_bytes
//   shard.device_resident.vs_via_host.<n>x<size>
//                                       a tree of n leaves already on cuda:0 sharded over the GPUs
//                                       present (every device twice when there is one): from the
//                                       devices (dk::shard of the placed tree) vs the old way,
//                                       to_host then shard of the host tree; goal: ratio > 1
//   copy_planner.<path>.<n>x<size>      n device-to-device runs copied by one path the planner
//                                       may choose (cudaMemcpyBatchAsync, one CUB launch) vs one
//                                       cudaMemcpyAsync per run: the data that should set
//                                       detail::batch_api_min_count and the CUB thresholds
//                                       (copy_planner.hpp), still owed on a GPU
#include "bench_common.hpp"

#include <devicekit/devicekit.hpp>
#include <devicekit/transfer/batched_copy.cuh>

#include <cub/device/device_memcpy.cuh>

#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

__global__ void spin_kernel(long long cycles, int* sink) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
  if (threadIdx.x == 0 && blockIdx.x == 0) *sink = 1;
}

/// Kernel cycles that take about `seconds` on the current device.
long long cycles_for(double seconds, const dk::stream& s, int* sink) {
  const long long probe = 10'000'000;
  const double t = bench::median_seconds(3, [&] {
    spin_kernel<<<1, 1, 0, s.native_handle()>>>(probe, sink);
    s.synchronize();
  });
  return static_cast<long long>(static_cast<double>(probe) * seconds / t);
}

/// One measurement of prefetch overlap through `res`: copy alone, compute alone, both together.
template <class Res>
void overlap_with(const bench::options& opt, bench::report& report, dk::device gpu, Res& res, const std::string& name,
                  const std::string& what) {
  const dk::stream consumer(gpu);
  int* sink = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaMalloc(&sink, sizeof(int)));
  // Enough batches that filling the pipeline (one batch's copy with nothing to overlap) is a
  // small part of the total: at 16 it alone held the ratio to 0.941.
  const int batches = opt.quick ? 32 : 64;
  const int samples = opt.quick ? 5 : 11;
  const std::size_t floats = std::size_t{16} << 20;  // 64 MiB per batch
  std::vector<std::vector<float>> data(4, std::vector<float>(floats, 1.f));
  std::vector<const std::vector<float>*> source;
  for (int i = 0; i < batches; ++i) source.push_back(&data[static_cast<std::size_t>(i) % data.size()]);
  auto deref =
      source | std::views::transform([](const std::vector<float>* p) -> const std::vector<float>& { return *p; });

  auto copy_only = [&] {
    for (auto& b : dk::prefetch(deref, gpu, 2, res, consumer.native_handle())) (void)b;
    consumer.synchronize();
  };
  copy_only();  // warm-up: staging buffers, the resource's memory, the copy engines
  const double copy = bench::median_seconds(samples, copy_only);
  // A kernel as long as one batch's (warm, median) copy.
  const long long cycles = cycles_for(copy / batches, consumer, sink);
  auto compute_only = [&] {
    for (int i = 0; i < batches; ++i) spin_kernel<<<1, 1, 0, consumer.native_handle()>>>(cycles, sink);
    DEVICEKIT_CUDA_CHECK(cudaGetLastError());
    consumer.synchronize();
  };
  auto both = [&] {
    for (auto& b : dk::prefetch(deref, gpu, 2, res, consumer.native_handle())) {
      (void)b;
      spin_kernel<<<1, 1, 0, consumer.native_handle()>>>(cycles, sink);
    }
    DEVICEKIT_CUDA_CHECK(cudaGetLastError());
    consumer.synchronize();
  };
  const auto [compute, total] = bench::interleaved_medians(samples, compute_only, both);
  const double value = std::max(compute, copy) / total;
  report.add({name, "cuda", "max(compute, copy) / total", value, "ratio", "perfect overlap", 1.0, value,
              "goal >= 0.9 (at most " + std::to_string(batches) + "/" + std::to_string(batches + 1) +
                  " with this many batches); " + what + "; medians of " + std::to_string(samples) +
                  " after a warm-up: copy " + std::to_string(copy * 1e3) + " ms, compute " +
                  std::to_string(compute * 1e3) + " ms, total " + std::to_string(total * 1e3) + " ms for " +
                  std::to_string(batches) + " x 64 MiB"});
  DEVICEKIT_CUDA_CHECK(cudaFree(sink));
}

void overlap(const bench::options& opt, bench::report& report, dk::device gpu) {
  overlap_with(opt, report, gpu, dk::default_placement_resource(gpu), "prefetch.overlap",
               "default placement resource (what dk::prefetch(range, dev) uses)");
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(gpu.ordinal())};
  overlap_with(opt, report, gpu, pool, "prefetch.overlap.pool", "a memory_pool<cuda_device_resource> as the resource");
}

void batched(const bench::options& opt, bench::report& report, dk::device gpu) {
  const dk::stream s(gpu);
  const int samples = opt.quick ? 9 : 31;
  struct shape {
    std::size_t count;
    std::size_t bytes;
  };
  for (const shape sh : {shape{8, 4096}, shape{16, 4096}, shape{100, 4096}, shape{1024, 4096}, shape{64, 256 << 10},
                         shape{4, 16 << 20}}) {
    std::vector<dk::device_array<float>> scattered;
    for (std::size_t i = 0; i < sh.count; ++i) {
      scattered.push_back(dk::place(std::vector<float>(sh.bytes / sizeof(float), static_cast<float>(i + 1)), gpu));
    }
    std::vector<const void*> srcs;
    std::vector<void*> dsts;
    std::vector<std::size_t> sizes;
    void* block = nullptr;
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&block, sh.count * sh.bytes));
    for (std::size_t i = 0; i < sh.count; ++i) {
      srcs.push_back(scattered[i].data());
      dsts.push_back(static_cast<std::byte*>(block) + i * sh.bytes);
      sizes.push_back(sh.bytes);
    }
    // The CUB kernel alone: the pointer tables and CUB's scratch staged once, outside the timing.
    std::size_t temp_bytes = 0;
    DEVICEKIT_CUDA_CHECK(cub::DeviceMemcpy::Batched(
        nullptr, temp_bytes, static_cast<const void* const*>(nullptr), static_cast<void* const*>(nullptr),
        static_cast<const std::size_t*>(nullptr), sh.count, s.native_handle()));
    void* d_srcs = nullptr;
    void* d_dsts = nullptr;
    void* d_sizes = nullptr;
    void* d_temp = nullptr;
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&d_srcs, sh.count * sizeof(void*)));
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&d_dsts, sh.count * sizeof(void*)));
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&d_sizes, sh.count * sizeof(std::size_t)));
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&d_temp, temp_bytes == 0 ? 1 : temp_bytes));
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(d_srcs, srcs.data(), sh.count * sizeof(void*), cudaMemcpyHostToDevice));
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(d_dsts, dsts.data(), sh.count * sizeof(void*), cudaMemcpyHostToDevice));
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(d_sizes, sizes.data(), sh.count * sizeof(std::size_t), cudaMemcpyHostToDevice));

    auto cub_only = [&] {
      DEVICEKIT_CUDA_CHECK(cub::DeviceMemcpy::Batched(
          d_temp, temp_bytes, static_cast<const void* const*>(d_srcs), static_cast<void* const*>(d_dsts),
          static_cast<const std::size_t*>(d_sizes), sh.count, s.native_handle()));
      s.synchronize();
    };
    auto ours = [&] {  // what placement calls: tables staged per call, scratch stream-ordered
      dk::batched_copy(srcs, dsts, sizes, s);
      s.synchronize();
    };
    auto loop = [&] {
      for (std::size_t i = 0; i < sh.count; ++i) {
        DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyDeviceToDevice, s.native_handle()));
      }
      s.synchronize();
    };
    const auto [t, l, k] = bench::interleaved_medians(samples, ours, loop, cub_only);
    const auto planned = dk::detail::plan_copy(dk::detail::copy_direction::device_to_device, sh.count,
                                               sh.count * sh.bytes, dk::detail::paths_available(s.native_handle()));
    report.add({"place.batched_d2d.vs_per_leaf_memcpy." + std::to_string(sh.count) + "x" +
                    std::to_string(sh.bytes >> 10) + "KiB",
                "cuda", "time to copy the leaves into one block (dk::batched_copy)", t * 1e6, "us",
                "one cudaMemcpyAsync per leaf", l * 1e6, l / t,
                std::string("placement uses ") + dk::detail::to_string(planned) + " here; CUB kernel alone " +
                    std::to_string(k * 1e6) + " us (ratio " + std::to_string(l / k) + ")"});
    DEVICEKIT_CUDA_CHECK(cudaFree(d_srcs));
    DEVICEKIT_CUDA_CHECK(cudaFree(d_dsts));
    DEVICEKIT_CUDA_CHECK(cudaFree(d_sizes));
    DEVICEKIT_CUDA_CHECK(cudaFree(d_temp));
    DEVICEKIT_CUDA_CHECK(cudaFree(block));
  }
}

/// shard of a device-resident tree: on the devices vs through the host.
void device_resident_shard(const bench::options& opt, bench::report& report) {
  std::vector<dk::device> gpus;
  const int n = dk::cuda_detector{}.detect(dk::settings{}).gpu_count;
  for (int i = 0; i < n; ++i) gpus.push_back(dk::device::cuda(i));
  if (gpus.size() == 1) gpus.push_back(gpus[0]);  // two shards on one GPU: still no host detour
  const int samples = opt.quick ? 3 : 7;
  struct shape {
    std::size_t count;
    std::size_t bytes;
  };
  for (const shape sh : {shape{100, std::size_t{1} << 20}, shape{1000, 4096}}) {
    const std::size_t rows = 64 * gpus.size();
    std::vector<std::vector<float>> host(sh.count, std::vector<float>(sh.bytes / sizeof(float), 1.f));
    for (auto& v : host) v.resize(sh.bytes / sizeof(float) / rows * rows);
    const auto on_gpu = dk::place(host, gpus[0]);
    auto direct = [&] { (void)dk::shard(on_gpu, gpus); };
    auto via_host = [&] { (void)dk::shard(dk::to_host(on_gpu), gpus); };
    const auto [d, h] = bench::interleaved_medians(samples, direct, via_host);
    report.add(
        {"shard.device_resident.vs_via_host." + std::to_string(sh.count) + "x" + std::to_string(sh.bytes >> 10) + "KiB",
         "cuda", "time to shard a tree on cuda:0 over " + std::to_string(gpus.size()) + " devices", d * 1e3, "ms",
         "to_host, then shard the host tree", h * 1e3, h / d, "goal: ratio > 1 (no host detour)"});
  }
}

/// The planner's device-to-device paths against single copies, across counts and sizes.
void planner_thresholds(const bench::options& opt, bench::report& report, dk::device gpu) {
  const dk::stream s(gpu);
  const int samples = opt.quick ? 5 : 11;
  for (const std::size_t count : {2, 4, 8, 16, 64, 256, 1024}) {
    for (const std::size_t bytes : {std::size_t{256}, std::size_t{4096}, std::size_t{64} << 10, std::size_t{1} << 20}) {
      if (count * bytes > (std::size_t{512} << 20)) continue;
      void* src = nullptr;
      void* dst = nullptr;
      DEVICEKIT_CUDA_CHECK(cudaMalloc(&src, count * bytes));
      DEVICEKIT_CUDA_CHECK(cudaMalloc(&dst, count * bytes));
      std::vector<dk::detail::copy_run> runs;
      std::vector<const void*> srcs;
      std::vector<void*> dsts;
      std::vector<std::size_t> sizes;
      for (std::size_t i = 0; i < count; ++i) {  // reversed: no two runs merge
        runs.push_back({static_cast<const std::byte*>(src) + i * bytes, gpu,
                        static_cast<std::byte*>(dst) + (count - 1 - i) * bytes, bytes});
        srcs.push_back(runs.back().src);
        dsts.push_back(runs.back().dst);
        sizes.push_back(bytes);
      }
      auto single = [&] {
        for (const auto& r : runs) {
          DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(r.dst, r.src, r.bytes, cudaMemcpyDeviceToDevice, s.native_handle()));
        }
        s.synchronize();
      };
      auto batch_api = [&] {
        if (!dk::detail::copy_runs_batch_api(runs, s.native_handle())) single();
        s.synchronize();
      };
      auto cub = [&] {
        dk::batched_copy(srcs, dsts, sizes, s);
        s.synchronize();
      };
      const auto [b, c, one] = bench::interleaved_medians(samples, batch_api, cub, single);
      const std::string shape = std::to_string(count) + "x" + std::to_string(bytes) + "B";
      const auto planned = dk::detail::plan_copy(dk::detail::copy_direction::device_to_device, count, count * bytes,
                                                 dk::detail::paths_available(s.native_handle()));
      const std::string note = std::string("planner picks ") + dk::detail::to_string(planned) + " here";
      report.add({"copy_planner.batch_api." + shape, "cuda", "time for the runs (cudaMemcpyBatchAsync)", b * 1e6, "us",
                  "one cudaMemcpyAsync per run", one * 1e6, one / b, note});
      report.add({"copy_planner.cub_batched." + shape, "cuda", "time for the runs (cub::DeviceMemcpy::Batched)",
                  c * 1e6, "us", "one cudaMemcpyAsync per run", one * 1e6, one / c, note});
      DEVICEKIT_CUDA_CHECK(cudaFree(src));
      DEVICEKIT_CUDA_CHECK(cudaFree(dst));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  if (dk::cuda_detector{}.detect(dk::settings{}).gpu_count > 0) {
    const dk::device gpu = dk::device::cuda(0);
    dk::scoped_device on(gpu.ordinal());
    overlap(opt, report, gpu);
    batched(opt, report, gpu);
    device_resident_shard(opt, report);
    planner_thresholds(opt, report, gpu);
  } else {
    std::printf(
        "bench_place_cuda: no GPU, nothing to measure; owed on a GPU: prefetch.overlap, "
        "place.batched_d2d.*, shard.device_resident.vs_via_host.*, copy_planner.*\n");
  }
  report.write(opt.json_path);
  return 0;
}
