// cub::DeviceMemcpy::Batched through devicekit::batched_copy, and placement choosing it for many
// small leaves spread over several allocations (runs only where a CUDA device is present).
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>
#include <devicekit/transfer/batched_copy.cuh>

#include <random>
#include <vector>

namespace dk = devicekit;

namespace {
std::vector<std::uint32_t> random_words(std::size_t n, std::mt19937& g) {
  std::uniform_int_distribution<std::uint32_t> dist(1, 0xffffffffu);  // never zero
  std::vector<std::uint32_t> v(n);
  for (auto& x : v) x = dist(g);
  return v;
}
}  // namespace

TEST_CASE("batched_copy moves many small device buffers in one launch", "[batched][gpu]") {
  std::mt19937 g(7);
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  constexpr std::size_t count = 300;
  std::vector<std::vector<std::uint32_t>> host;
  std::vector<const void*> srcs;
  std::vector<void*> dsts;
  std::vector<std::size_t> sizes;
  std::vector<void*> owned;
  for (std::size_t i = 0; i < count; ++i) {
    host.push_back(random_words(1 + (i * 37) % 1000, g));
    const std::size_t bytes = host.back().size() * 4;
    void* src = nullptr;
    void* dst = nullptr;
    REQUIRE(cudaMalloc(&src, bytes) == cudaSuccess);
    REQUIRE(cudaMalloc(&dst, bytes) == cudaSuccess);
    REQUIRE(cudaMemcpy(src, host.back().data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemset(dst, 0, bytes) == cudaSuccess);
    srcs.push_back(src);
    dsts.push_back(dst);
    sizes.push_back(bytes);
    owned.push_back(src);
    owned.push_back(dst);
  }
  dk::batched_copy(srcs, dsts, sizes, s);
  s.synchronize();
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<std::uint32_t> got(host[i].size());
    REQUIRE(cudaMemcpy(got.data(), dsts[i], sizes[i], cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(got == host[i]);
  }
  for (void* p : owned) CHECK(cudaFree(p) == cudaSuccess);
  CHECK_THROWS_AS(dk::batched_copy(srcs, dsts, std::vector<std::size_t>(3), s), dk::config_error);
}

TEST_CASE("placement takes the batched path for many small leaves in separate allocations", "[batched][gpu]") {
  std::mt19937 g(11);
  const dk::device gpu = dk::device::cuda(0);
  std::vector<std::vector<std::uint32_t>> host;
  for (int i = 0; i < 64; ++i) host.push_back(random_words(64 + static_cast<std::size_t>(i), g));
  // Each leaf placed on its own: 64 allocations, so no run can merge them.
  std::vector<dk::device_array<std::uint32_t>> scattered;
  for (const auto& h : host) scattered.push_back(dk::place(h, gpu));
  REQUIRE(dk::detail::batched_copy_hook.load() != nullptr);
  const auto launches = dk::detail::stats().batched_launches.load();
  const auto gathered = dk::place(scattered, gpu);
  CHECK(dk::detail::stats().batched_launches.load() - launches == 1);
  CHECK(dk::to_host(gathered) == host);
  CHECK(gathered[0].owner() == gathered[63].owner());  // now one block
}
