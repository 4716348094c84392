// GPU-only placement entries that launch kernels (nvcc; run only with a GPU, else nothing):
//   prefetch.overlap                    batches prefetched while a synthetic kernel as long as one
//                                       batch's copy runs on each: value = max(compute, copy) /
//                                       total, 1.0 = perfect overlap (goal >= 0.9)
//   place.batched_d2d.<n>x<size>        a tree of n leaves in n separate device allocations moved
//                                       into one block: cub::DeviceMemcpy::Batched (what placement
//                                       chooses at and above the threshold) vs one cudaMemcpyAsync
//                                       per leaf; the sizes bracket detail::batched_copy_min_count
//                                       and batched_copy_max_average_bytes
#include "bench_common.hpp"

#include <devicekit/devicekit.hpp>
#include <devicekit/place/batched_copy.cuh>

#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

__global__ void spin_kernel(long long cycles, int* sink) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
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

void overlap(const bench::options& opt, bench::report& report, dk::device gpu) {
  const dk::stream consumer(gpu);
  int* sink = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaMalloc(&sink, sizeof(int)));
  const int batches = opt.quick ? 16 : 64;
  const std::size_t floats = std::size_t{16} << 20;  // 64 MiB per batch
  std::vector<std::vector<float>> data(4, std::vector<float>(floats, 1.f));
  std::vector<const std::vector<float>*> source;
  for (int i = 0; i < batches; ++i) source.push_back(&data[static_cast<std::size_t>(i) % data.size()]);
  auto deref = source | std::views::transform([](const std::vector<float>* p) -> const std::vector<float>& { return *p; });

  // Copy alone: the prefetch loop with no work.
  const double copy = bench::median_seconds(1, [&] {
    for (auto& b : dk::prefetch(deref, gpu, 2, consumer)) (void)b;
    consumer.synchronize();
  });
  const long long cycles = cycles_for(copy / batches, consumer, sink);
  const double compute = bench::median_seconds(1, [&] {
    for (int i = 0; i < batches; ++i) spin_kernel<<<1, 1, 0, consumer.native_handle()>>>(cycles, sink);
    consumer.synchronize();
  });
  const double total = bench::median_seconds(1, [&] {
    for (auto& b : dk::prefetch(deref, gpu, 2, consumer)) {
      (void)b;
      spin_kernel<<<1, 1, 0, consumer.native_handle()>>>(cycles, sink);
    }
    consumer.synchronize();
  });
  const double value = std::max(compute, copy) / total;
  report.add({"prefetch.overlap", "cuda", "max(compute, copy) / total", value, "ratio",
              "perfect overlap", 1.0, value,
              "goal >= 0.9; copy " + std::to_string(copy * 1e3) + " ms, compute " + std::to_string(compute * 1e3) +
                  " ms, total " + std::to_string(total * 1e3) + " ms for " + std::to_string(batches) + " x 64 MiB"});
  DEVICEKIT_CUDA_CHECK(cudaFree(sink));
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
    const double cub = bench::median_seconds(samples, [&] {
      dk::batched_copy(srcs, dsts, sizes, s);
      s.synchronize();
    });
    const double loop = bench::median_seconds(samples, [&] {
      for (std::size_t i = 0; i < sh.count; ++i) {
        DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyDeviceToDevice, s.native_handle()));
      }
      s.synchronize();
    });
    const bool chosen = sh.count >= dk::detail::batched_copy_min_count &&
                        sh.bytes <= dk::detail::batched_copy_max_average_bytes;
    report.add({"place.batched_d2d." + std::to_string(sh.count) + "x" + std::to_string(sh.bytes >> 10) + "KiB", "cuda",
                "time to copy the leaves into one block", cub * 1e6, "us", "one cudaMemcpyAsync per leaf", loop * 1e6,
                loop / cub, chosen ? "placement uses the batched copy here" : "placement uses per-leaf copies here"});
    DEVICEKIT_CUDA_CHECK(cudaFree(block));
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
  } else {
    std::printf("bench_place_cuda: no GPU, nothing to measure\n");
  }
  report.write(opt.json_path);
  return 0;
}
