// GPU-only entry of the collectives' bucket packing (nvcc; runs only with a GPU, else it says
// the value is owed):
//   collective.pack.vs_per_leaf   1000 leaves of 1 KiB in separate device allocations packed into
//                                 one bucket buffer on a stream, by detail::pack as the NCCL
//                                 backend runs it (copy_batch: one multi-run copy through
//                                 transfer/detail/copy.hpp, CUB's batched memcpy since this file
//                                 includes transfer/batched_copy.cuh) vs one cudaMemcpyAsync per leaf
//                                 (what the NCCL backend did before). Each figure is the median
//                                 of the time to queue the pack and synchronize.
#include "bench_common.hpp"

#include <devicekit/devicekit.hpp>
#include <devicekit/distribute/detail/pack.hpp>
#include <devicekit/transfer/batched_copy.cuh>
#include <devicekit/transfer/detail/copy.hpp>

#include <cstdio>
#include <span>
#include <vector>

namespace dk = devicekit;

namespace {

/// The NCCL backend's copies without NCCL: the batched form (copy_batch) and the per-leaf one.
struct batched_backend {
  dk::device dev;
  cudaStream_t s;
  void copy_batch(std::size_t, std::span<const dk::detail::copy_span> runs) {
    std::vector<dk::detail::copy_run> list;
    for (const auto& r : runs) {
      list.push_back({static_cast<const std::byte*>(r.src), dev, static_cast<std::byte*>(r.dst), r.bytes});
    }
    dk::detail::copy_same_device(std::span<const dk::detail::copy_run>(list), s);
  }
};
struct per_leaf_backend {
  cudaStream_t s;
  void copy(std::size_t, void* dst, const void* src, std::size_t bytes) {
    DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  }
};

void pack_entry(const bench::options& opt, bench::report& report, dk::device gpu) {
  constexpr std::size_t leaves = 1000, leaf_bytes = 1024;
  const dk::stream st(gpu);
  const cudaStream_t s = st.native_handle();
  std::vector<void*> src(leaves);
  for (auto& p : src) DEVICEKIT_CUDA_CHECK(cudaMalloc(&p, leaf_bytes));
  void* buf = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaMalloc(&buf, leaves * leaf_bytes));
  std::vector<dk::leaf_span> spans;
  dk::bucket bk{dk::element_type::opaque, {}, leaves * leaf_bytes};
  for (std::size_t i = 0; i < leaves; ++i) {
    spans.push_back({src[i], leaf_bytes, dk::element_type::opaque});
    bk.leaves.push_back(i);
  }
  const auto part = dk::detail::whole(std::span<const dk::leaf_span>(spans));
  batched_backend batched{gpu, s};
  per_leaf_backend per_leaf{s};
  const int samples = opt.quick ? 11 : 51;
  auto run_batched = [&] {
    dk::detail::pack(batched, 0, bk, buf, part);
    st.synchronize();
  };
  auto run_per_leaf = [&] {
    dk::detail::pack(per_leaf, 0, bk, buf, part);
    st.synchronize();
  };
  run_batched();
  run_per_leaf();
  const double t_batched = bench::median_seconds(samples, run_batched);
  const double t_per_leaf = bench::median_seconds(samples, run_per_leaf);
  report.add({"collective.pack.vs_per_leaf", "cuda", "time", t_batched * 1e3, "ms", "one cudaMemcpyAsync per leaf",
              t_per_leaf * 1e3, t_per_leaf / t_batched,
              "1000 x 1 KiB device leaves packed into one bucket buffer (the NCCL backend's pack)"});
  for (auto* p : src) (void)cudaFree(p);
  (void)cudaFree(buf);
}

}  // namespace

int main(int argc, char** argv) {
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  if (dk::cuda_detector{}.detect(dk::settings{}).gpu_count > 0) {
    const dk::device gpu = dk::device::cuda(0);
    dk::scoped_device on(gpu.ordinal());
    pack_entry(opt, report, gpu);
  } else {
    std::printf("bench_distribute_cuda: no GPU; collective.pack.vs_per_leaf is owed (run it on a GPU machine)\n");
  }
  report.write(opt.json_path);
  return 0;
}
