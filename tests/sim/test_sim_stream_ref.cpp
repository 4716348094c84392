// stream_ref on simulated GPUs: devicekit's work queued on streams it does not own (a raw
// cudaStream_t, a libcu++ cuda::stream_ref), the way code that owns its streams (PyTorch's
// current stream, cuDF's) calls devicekit. [multi] cases need two devices.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>
#include <devicekit/devicekit.hpp>

#include "../common/test_data.hpp"
#include "sim_test_support.hpp"

#include <cuda/stream_ref>

#include <vector>

namespace dk = devicekit;
namespace sim = devicekit::cuda_sim;
using devicekit::testing::ramp;

namespace {

/// A stream the test owns, as user code would: created and destroyed with the runtime API.
struct raw_stream {
  cudaStream_t handle = nullptr;
  explicit raw_stream(int ordinal) {
    int previous = 0;
    REQUIRE(cudaGetDevice(&previous) == cudaSuccess);
    REQUIRE(cudaSetDevice(ordinal) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaSetDevice(previous) == cudaSuccess);
  }
  raw_stream(const raw_stream&) = delete;
  raw_stream& operator=(const raw_stream&) = delete;
  ~raw_stream() {
    (void)cudaStreamSynchronize(handle);
    (void)cudaStreamDestroy(handle);
  }
};

}  // namespace

TEST_CASE("a stream_ref of a raw stream asks the runtime for its device", "[sim][stream_ref]") {
  const int last = sim::device_count() - 1;
  const raw_stream s(last);
  const dk::stream_ref r(s.handle);
  CHECK(r.get_device() == dk::device::cuda(last));
  CHECK(r.native_handle() == s.handle);
  CHECK(r.idle());
  // A devicekit stream converts, and the reference names the same stream.
  const dk::stream own(dk::device::cuda(last));
  const dk::stream_ref from_own = own;
  CHECK(from_own.get_device() == own.get_device());
  CHECK(from_own.native_handle() == own.native_handle());
  CHECK(from_own != r);
}

TEST_CASE("placement on a user's stream is queued there, behind the user's own work", "[sim][stream_ref][place]") {
  const int last = sim::device_count() - 1;
  const raw_stream s(last);
  const dk::stream_ref r(s.handle);
  // The user's stream is busy (a stand-in for a long kernel): placement must queue behind it.
  sim_test::gate gate;
  REQUIRE(cudaLaunchHostFunc(s.handle, &sim_test::gate::hold, &gate) == cudaSuccess);
  const auto source = ramp(1 << 16, 3.0F);
  auto placed = dk::place(source, dk::device::cuda(last), r);
  CHECK_FALSE(r.idle());
  gate.open = true;
  r.synchronize();
  CHECK(r.idle());
  CHECK(dk::to_host(placed) == source);
}

TEST_CASE("cuda::stream_ref converts to a stream_ref and back", "[sim][stream_ref]") {
  const int last = sim::device_count() - 1;
  const raw_stream s(last);
  const cuda::stream_ref cccl(s.handle);
  const dk::stream_ref r = cccl;
  CHECK(r.get_device() == dk::device::cuda(last));
  const cuda::stream_ref back = r;
  CHECK(back.get() == s.handle);
  // An API that takes a stream_ref takes the libcu++ type directly.
  const auto source = ramp(1000, -1.0F);
  auto placed = dk::place(source, dk::device::cuda(last), cccl);
  // Not cccl.wait(): libcu++ 3.0 compiles its CUDA calls only under a CUDA compiler
  // (_CCCL_TRY_CUDA_API is empty otherwise), so in this g++ translation unit wait() does nothing.
  r.synchronize();
  CHECK(dk::to_host(placed) == source);
  // The cpu inline stream has no CUDA stream to give.
  CHECK_THROWS_AS(static_cast<cuda::stream_ref>(dk::stream_ref{}), dk::config_error);
}

TEST_CASE("a stream_ref with an explicit device trusts it: the legacy default stream", "[sim][stream_ref]") {
  const dk::stream_ref legacy(dk::device::cuda(0), nullptr);
  CHECK(legacy.get_device() == dk::device::cuda(0));
  const auto source = ramp(4096, 7.0F);
  auto placed = dk::place(source, dk::device::cuda(0), legacy);
  legacy.synchronize();
  CHECK(dk::to_host(placed) == source);
}

TEST_CASE("a stream_ref of another device is a device_mismatch naming both", "[sim][stream_ref][multi]") {
  const raw_stream s(1);
  const dk::stream_ref r(s.handle);
  try {
    (void)dk::place(ramp(16, 0.0F), dk::device::cuda(0), r);
    FAIL("placement on cuda:0 accepted a stream of cuda:1");
  } catch (const dk::device_mismatch& e) {
    CHECK(e.expected() == dk::device::cuda(0));
    CHECK(e.actual() == dk::device::cuda(1));
  }
  dk::device_manager<> dm(dk::settings{}.set_device(dk::device::cuda(0)));
  std::vector<std::vector<float>> batches{ramp(8, 0.0F)};
  CHECK_THROWS_AS((void)dm.prefetch(batches, 2, r), dk::device_mismatch);
}

TEST_CASE("pools, buffers and the manager take a stream_ref of a stream they do not own", "[sim][stream_ref][memory]") {
  const int last = sim::device_count() - 1;
  const raw_stream s(last);
  const dk::stream_ref r(s.handle);
  dk::pool_config config;
  config.max_size = std::size_t{16} << 20;
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(last), config};
  {
    dk::device_buffer<float> buffer(1024, pool, r);
    void* p = pool.allocate(4096, r);
    CHECK(p != nullptr);
    pool.deallocate(p, 4096, r);
    void* q = pool.allocate_async(512, 256, r);
    pool.deallocate_async(q, 512, 256, r);
  }
  r.synchronize();
  pool.release_stream(r);
  CHECK(pool.stats().allocated_bytes == 0);

  dk::device_manager<> dm(dk::settings{}.set_device(dk::device::cuda(last)));
  const auto source = ramp(2048, 1.0F);
  auto placed = dm.place(source, r);
  r.synchronize();
  CHECK(dk::to_host(placed) == source);
}
