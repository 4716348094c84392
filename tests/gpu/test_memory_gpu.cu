// The caching pool on device memory: the randomized model check against a reference model (the
// body shared with the host test, ../cpu/memory_model_check.hpp),
// stream-ordered reuse across two streams (while a kernel still runs), thrust::device_vector on the
// pool, the manager's device pools, and exit safety with a static manager (in a child process).
// Label gpu: skipped (exit 77) without a device.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>
#include <devicekit/report/json.hpp>
#include <devicekit/memory/thrust_allocator.cuh>

#include "../cpu/memory_model_check.hpp"

#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
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
  while (clock64() - start < cycles) {}
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) out[i] = value;
}

__global__ void fill(unsigned char* p, std::size_t n, unsigned char v) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
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

/// The model check's backend (../cpu/memory_model_check.hpp) on device memory: two real streams;
/// an allocation is tagged whole by a kernel (in order on s1, then synchronised), and the tag is
/// read back from its first and last bytes by copies.
struct device_backend {
  dk::memory_pool<dk::cuda_device_resource> pool_;
  dk::stream s1{dk::device::cuda(0)};
  dk::stream s2{dk::device::cuda(0)};

  explicit device_backend(dk::pool_config cfg) : pool_(dk::cuda_device_resource(0), std::move(cfg)) {}

  dk::memory_pool<dk::cuda_device_resource>& pool() { return pool_; }
  static std::size_t stream_count() { return 2; }
  dk::native_stream_handle stream(std::size_t i) { return (i == 0 ? s1 : s2).native_handle(); }

  /// Never 0, so that memory nobody wrote is not taken for a tag.
  static unsigned char byte_of(std::uint64_t tag) { return static_cast<unsigned char>((tag >> 56) | 1u); }
  void write_tag(std::uintptr_t a, std::size_t bytes, std::uint64_t tag) {
    fill<<<64, 256, 0, s1.native_handle()>>>(reinterpret_cast<unsigned char*>(a), bytes, byte_of(tag));
    DEVICEKIT_CUDA_CHECK(cudaGetLastError());
    s1.synchronize();
  }
  bool tag_intact(std::uintptr_t a, std::size_t bytes, std::uint64_t tag) {
    unsigned char ends[2] = {0, 0};
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(&ends[0], reinterpret_cast<void*>(a), 1, cudaMemcpyDeviceToHost));
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(&ends[1], reinterpret_cast<void*>(a + bytes - 1), 1, cudaMemcpyDeviceToHost));
    return ends[0] == byte_of(tag) && ends[1] == byte_of(tag);
  }

  void complete_events() {
    s1.synchronize();
    s2.synchronize();
  }
  void complete_events(dk::native_stream_handle s) { (s == s1.native_handle() ? s1 : s2).synchronize(); }
  std::optional<std::size_t> upstream_outstanding() const { return std::nullopt; }
};

}  // namespace

TEST_CASE("model check on device memory", "[gpu][memory][model]") {
  REQUIRE(exit_safety_hook == 0);
  device_backend backend(device_config(512u << 20));
  dk_test::model_options options;
  options.ops = dk_test::env_number("DEVICEKIT_MODEL_CHECK_OPS", 20000);
  options.target_live = 256u << 20;
  options.max_bytes = 8u << 20;
  options.max_alignment_log2 = 14;
  options.check_every = 1000;
  options.seed = 7;
  dk_test::run_model_check(backend, options);
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
  // s2 running short asked s1 for an event; s1's next use of the pool records it (nothing was
  // recorded at the frees: the stream reused them itself). Once it has completed, s2 gets p back.
  pool.deallocate(pool.allocate(256, s1), 256, s1);
  s1.synchronize();
  int* r = static_cast<int*>(pool.allocate(n * sizeof(int), s2));
  CHECK(r == p);
  CHECK(pool.stats().stream_fences == 0);
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
