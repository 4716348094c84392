// The caching pool on device memory: the randomized model check against a reference model,
// stream-ordered reuse across two streams (while a kernel still runs), thrust::device_vector on the
// pool, the manager's device pools, and exit safety with a static manager (in a child process).
// Label gpu: skipped (exit 77) without a device.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>
#include <devicekit/memory/thrust_allocator.cuh>

#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace dk = devicekit;

static_assert(cuda::mr::async_resource_with<dk::memory_pool<dk::cuda_device_resource>, cuda::mr::device_accessible>);

namespace {

/// Spins on the GPU for about `cycles` clock cycles, then writes `value` into `out[0..n)`.
__global__ void spin_then_fill(int* out, int n, long long cycles, int value) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) out[i] = value;
}

__global__ void fill(unsigned char* p, std::size_t n, unsigned char v) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    p[i] = v;
  }
}

dk::pool_config device_config(std::size_t max_size) {
  dk::pool_config c;
  c.max_size = max_size;
  c.tracking = dk::tracking_mode::off;
  return c;
}

// --- exit safety: the child half ---------------------------------------------------------------------
// When DEVICEKIT_EXIT_SAFETY_CHILD is set, this runs before main: a static manager is constructed
// *before* the CUDA runtime is initialised (so its destructor runs after the runtime's teardown),
// then it makes a device pool and leaves memory allocated, and the process exits normally. Any
// CUDA call from the destructors after the teardown would crash the child.
int exit_safety_child() {
  const char* mode = std::getenv("DEVICEKIT_EXIT_SAFETY_CHILD");
  if (mode == nullptr) return 0;
  static std::optional<dk::device_manager<>> manager;  // destructor registered before CUDA starts
  manager.emplace(dk::settings{});
  if (!manager->has_gpu()) std::_Exit(3);
  dk::device_memory& mem = manager->memory(dk::device::cuda(0));
  void* leaked = mem.allocate(1 << 20);  // still live at exit
  dk::stream s(dk::device::cuda(0));
  void* pending = mem.allocate(1 << 20, s);
  mem.deallocate(pending, 1 << 20, s);  // a stream-ordered free still pending at exit
  static dk::device_buffer<float> buffer(1024, mem);
  (void)leaked;
  std::exit(0);
}
const int exit_safety_hook = exit_safety_child();

}  // namespace

TEST_CASE("model check on device memory", "[gpu][memory][model]") {
  REQUIRE(exit_safety_hook == 0);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), device_config(512u << 20)};
  dk::stream s1(dk::device::cuda(0));
  dk::stream s2(dk::device::cuda(0));
  std::mt19937_64 rng(7);
  auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); };
  struct entry {
    std::size_t bytes;
    unsigned char tag;
  };
  std::map<std::uintptr_t, entry> live;
  std::size_t allocated = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || pick(0, 99) < 52) {
      const std::size_t bytes = pick(0, 3) == 0 ? pick(16 * 1024, 8 * 1024 * 1024) : pick(1, 16 * 1024);
      const std::size_t alignment = pick(0, 4) == 0 ? std::size_t{1} << pick(0, 14) : 256;
      const int which = static_cast<int>(pick(0, 2));
      void* p = nullptr;
      try {
        p = which == 0 ? pool.allocate(bytes, alignment)
                       : pool.allocate_async(bytes, alignment, (which == 1 ? s1 : s2).native_handle());
      } catch (const dk::out_of_memory&) {
        continue;
      }
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      REQUIRE(a % std::max<std::size_t>(alignment, 256) == 0);
      auto next = live.lower_bound(a);
      if (next != live.end()) REQUIRE(a + bytes <= next->first);
      if (next != live.begin()) REQUIRE(std::prev(next)->first + std::prev(next)->second.bytes <= a);
      const auto tag = static_cast<unsigned char>(pick(1, 255));
      // Tag the whole allocation on the device, in order on s1 (synchronised below when checked).
      fill<<<64, 256, 0, s1.native_handle()>>>(static_cast<unsigned char*>(p), bytes, tag);
      DEVICEKIT_CUDA_CHECK(cudaGetLastError());
      s1.synchronize();
      live.emplace(a, entry{bytes, tag});
      allocated += bytes;
      ++allocations;
    } else {
      auto it = live.lower_bound(static_cast<std::uintptr_t>(rng()));
      if (it == live.end()) it = live.begin();
      const auto [a, e] = *it;
      if (pick(0, 15) == 0) {  // the bytes survived every other allocation and free
        unsigned char ends[2] = {0, 0};
        DEVICEKIT_CUDA_CHECK(cudaMemcpy(&ends[0], reinterpret_cast<void*>(a), 1, cudaMemcpyDeviceToHost));
        DEVICEKIT_CUDA_CHECK(cudaMemcpy(&ends[1], reinterpret_cast<void*>(a + e.bytes - 1), 1, cudaMemcpyDeviceToHost));
        REQUIRE(ends[0] == e.tag);
        REQUIRE(ends[1] == e.tag);
      }
      const int which = static_cast<int>(pick(0, 2));
      if (which == 0) {
        pool.deallocate(reinterpret_cast<void*>(a), e.bytes);
      } else {
        pool.deallocate_async(reinterpret_cast<void*>(a), e.bytes, 256, (which == 1 ? s1 : s2).native_handle());
      }
      live.erase(it);
      allocated -= e.bytes;
      ++frees;
    }
    if (i % 1000 == 0) {
      const auto st = pool.stats();
      REQUIRE(st.allocated_bytes == allocated);
      REQUIRE(st.active_blocks == live.size());
      REQUIRE(st.allocation_count == allocations);
      REQUIRE(st.free_count == frees);
      REQUIRE(st.reserved_bytes <= st.max_size);
      pool.check_consistency();
    }
    if (i % 5000 == 0) pool.trim();
  }
  for (const auto& [a, e] : live) pool.deallocate(reinterpret_cast<void*>(a), e.bytes);
  pool.check_consistency();
  pool.clear();
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("a block freed on one stream is reused on another only after the first stream's work",
          "[gpu][memory][stream]") {
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), device_config(256u << 20)};
  dk::stream s1(dk::device::cuda(0));
  dk::stream s2(dk::device::cuda(0));
  constexpr int n = 1 << 20;
  int* p = static_cast<int*>(pool.allocate(n * sizeof(int), s1));
  // About a second of work on s1 that writes p at its end; then p is freed on s1, in stream order.
  spin_then_fill<<<1, 256, 0, s1.native_handle()>>>(p, n, 2'000'000'000LL, 7);
  DEVICEKIT_CUDA_CHECK(cudaGetLastError());
  pool.deallocate(p, n * sizeof(int), s1);
  // Same stream: reusable at once, since stream order protects it.
  int* again = static_cast<int*>(pool.allocate(n * sizeof(int), s1));
  CHECK(again == p);
  pool.deallocate(again, n * sizeof(int), s1);
  // Another stream while the kernel still runs: not p.
  int* q = static_cast<int*>(pool.allocate(n * sizeof(int), s2));
  REQUIRE(cudaStreamQuery(s1.native_handle()) == cudaErrorNotReady);
  (void)cudaGetLastError();
  CHECK(q != p);
  DEVICEKIT_CUDA_CHECK(cudaMemsetAsync(q, 0, n * sizeof(int), s2.native_handle()));
  s1.synchronize();
  // The kernel's writes landed in p and were not disturbed by s2.
  std::vector<int> host(n);
  DEVICEKIT_CUDA_CHECK(cudaMemcpy(host.data(), p, n * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(host.front() == 7);
  CHECK(host.back() == 7);
  // Now that s1's work is done, s2 gets p back (the event completed).
  int* r = static_cast<int*>(pool.allocate(n * sizeof(int), s2));
  CHECK(r == p);
  pool.deallocate(q, n * sizeof(int), s2);
  pool.deallocate(r, n * sizeof(int), s2);
  s2.synchronize();
  CHECK(pool.stats().allocated_bytes == 0);
}

TEST_CASE("thrust::device_vector and device_buffer on the manager's device pool", "[gpu][memory][thrust]") {
  dk::device_manager<> dm{dk::settings{}};
  REQUIRE(dm.has_gpu());
  dk::device_memory& mem = dm.memory(dk::device::cuda(0));
  CHECK(mem.get_device() == dk::device::cuda(0));
  CHECK(mem.budget().headroom_bytes > 0);
  {
    using alloc = dk::thrust_allocator<int>;
    thrust::device_vector<int, alloc> v(1 << 20, 0, alloc(mem));
    thrust::sequence(v.begin(), v.end());
    const long long sum = thrust::reduce(v.begin(), v.end(), 0LL);
    CHECK(sum == (1LL << 20) * ((1LL << 20) - 1) / 2);
    CHECK(mem.stats().allocated_bytes >= (1u << 20) * sizeof(int));
  }
  cudaDeviceSynchronize();
  mem.trim();
  {
    dk::device_buffer<int> b(4096, mem);
    CHECK(b.get_device() == dk::device::cuda(0));
    CHECK_THROWS_AS(b.host_span(), dk::config_error);
    DEVICEKIT_CUDA_CHECK(cudaMemset(b.data(), 0, b.size_bytes()));
  }
  CHECK(mem.stats().allocated_bytes == 0);
  const auto j = dk::to_json(dm.report());
  CHECK(j.at("devices").at(0).at("memory").at("pool").at("allocation_count").get<std::uint64_t>() >= 2);
}

TEST_CASE("exit safety: a static manager with live device memory exits cleanly", "[gpu][memory][exit]") {
  char path[4096] = {};
  const ssize_t len = readlink("/proc/self/exe", path, sizeof path - 1);
  REQUIRE(len > 0);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.emplace_back("DEVICEKIT_EXIT_SAFETY_CHILD=1");
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  char* argv[] = {path, nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, path, nullptr, nullptr, argv, envp.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child status " << status);
  REQUIRE(WIFEXITED(status));  // not killed by a signal from a CUDA call after teardown
  CHECK(WEXITSTATUS(status) == 0);
}
