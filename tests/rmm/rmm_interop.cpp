// devicekit's side of RMM (devicekit/rmm/resource.hpp) beyond RMM's own suites: the budget holds
// for RMM's allocations, RMM's per-device resources reach each GPU's own pool, and bad input
// (a free through the wrong route, a pool gone under RMM, a host pool) is refused with an error
// that says what to do, the pool unchanged.
// First: this unit also checks that the header compiles on its own (headers.self_contained
// leaves rmm/ out, as it needs RMM).
#include <devicekit/rmm/resource.hpp>
// second include: the include guard
#include <devicekit/rmm/resource.hpp>

#include <devicekit/memory/pool.hpp>

#include <rmm/cuda_device.hpp>
#include <rmm/cuda_stream.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/per_device_resource.hpp>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

namespace dk = devicekit;

namespace {

using gpu_pool = dk::memory_pool<dk::cuda_device_resource>;

dk::pool_config capped(std::size_t max_size) {
  dk::pool_config c;
  c.max_size = max_size;
  return c;
}

std::shared_ptr<gpu_pool> pool_of(int ordinal, std::size_t max_size) {
  return std::make_shared<gpu_pool>(dk::cuda_device_resource(ordinal), capped(max_size));
}

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

TEST(RmmResource, DeviceBufferPastTheBudgetIsRmmOutOfMemoryWithDevicekitsFigures) {
  auto pool = pool_of(0, 32u << 20);
  dk::rmm_resource mr{pool};
  const rmm::cuda_stream stream;
  rmm::device_buffer a(8u << 20, stream.view(), rmm::device_async_resource_ref{mr});
  EXPECT_GE(pool->stats().in_use_bytes, std::size_t{8} << 20);
  const auto clients = pool->client_stats();  // RMM's buffer is the client rmm's, not devicekit's
  ASSERT_EQ(clients.size(), 2u);
  EXPECT_EQ(clients[0].client, "devicekit");
  EXPECT_EQ(clients[0].bytes_in_use, 0u);
  EXPECT_EQ(clients[1].client, "rmm");
  EXPECT_EQ(clients[1].bytes_in_use, std::uint64_t{8} << 20);
  try {
    rmm::device_buffer b(64u << 20, stream.view(), rmm::device_async_resource_ref{mr});
    FAIL() << "a buffer past the pool's 32 MiB budget was allocated";
  } catch (const rmm::out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out_of_memory"), std::string::npos) << what;
    EXPECT_NE(what.find("client rmm"), std::string::npos) << what;
    EXPECT_NE(what.find("budget"), std::string::npos) << what;
  }
  EXPECT_GE(pool->stats().in_use_bytes, std::size_t{8} << 20);  // the first buffer is untouched
  pool->check_consistency();
}

TEST(RmmResource, PerDeviceResourcesReachEachGpusOwnPool) {
  const int n = device_count();
  ASSERT_GE(n, 1);
  std::vector<std::shared_ptr<gpu_pool>> pools;
  for (int d = 0; d < n; ++d) {
    pools.push_back(pool_of(d, 64u << 20));
    rmm::mr::set_per_device_resource(rmm::cuda_device_id{d}, dk::rmm_resource{pools.back()});
  }
  for (int d = 0; d < n; ++d) {
    ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
    const rmm::cuda_stream stream;
    const std::size_t before = pools[static_cast<std::size_t>(d)]->stats().in_use_bytes;
    {
      rmm::device_buffer b((1u << 20) * static_cast<unsigned>(d + 1), stream.view());  // the current resource
      for (int other = 0; other < n; ++other) {
        const std::size_t in_use = pools[static_cast<std::size_t>(other)]->stats().in_use_bytes;
        if (other == d) {
          EXPECT_EQ(in_use, before + (std::size_t{1} << 20) * static_cast<std::size_t>(d + 1));
        } else {
          EXPECT_EQ(in_use, 0u) << "device " << d << "'s buffer reached the pool of device " << other;
        }
      }
      stream.synchronize();
    }
    EXPECT_EQ(pools[static_cast<std::size_t>(d)]->stats().in_use_bytes, before);
  }
  for (int d = 0; d < n; ++d) rmm::mr::reset_per_device_resource(rmm::cuda_device_id{d});
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST(RmmResource, AFreeThroughTheWrongRouteIsRefusedAndCountedThePoolUnchanged) {
  auto pool = pool_of(0, 32u << 20);
  dk::rmm_resource mr{pool};
  rmm::device_async_resource_ref ref{mr};
  void* mine = ref.allocate_sync(4096, 256);
  rmm::mr::cuda_memory_resource other;
  void* foreign = other.allocate_sync(4096, 256);
  const auto before = pool->stats();
  ref.deallocate_sync(foreign, 4096, 256);  // memory of another resource
  ref.deallocate_sync(mine, 1000, 256);     // the wrong size
  EXPECT_EQ(mr.refused_frees(), 2u);
  EXPECT_NE(mr.last_refusal().find("wrong size"), std::string::npos) << mr.last_refusal();
  EXPECT_EQ(pool->stats().in_use_bytes, before.in_use_bytes);
  pool->check_consistency();
  ref.deallocate_sync(mine, 4096, 256);
  other.deallocate_sync(foreign, 4096, 256);
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
  EXPECT_EQ(pool->client_stats().at(1).bytes_in_use, 0u);  // refused frees counted nothing
  EXPECT_EQ(pool->client_stats().at(1).num_allocs, 1u);
}

TEST(RmmResource, ABorrowedPoolGoneUnderRmmIsAnErrorNotACrash) {
  auto pool = pool_of(0, 32u << 20);
  dk::rmm_resource mr{*pool};  // borrowed, as a manager's pool is
  rmm::device_async_resource_ref ref{mr};
  void* p = ref.allocate_sync(4096, 256);
  ref.deallocate_sync(p, 4096, 256);
  EXPECT_TRUE(mr.pool_alive());
  pool.reset();
  EXPECT_FALSE(mr.pool_alive());
  try {
    (void)ref.allocate_sync(4096, 256);
    FAIL() << "an allocation from a destroyed pool succeeded";
  } catch (const rmm::bad_alloc& e) {
    EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
  }
  ref.deallocate_sync(p, 4096, 256);
  EXPECT_EQ(mr.refused_frees(), 1u);
}

TEST(RmmResource, AHostPoolIsRefusedWithWhatToDo) {
  dk::memory_pool<dk::host_resource> host;
  try {
    dk::rmm_resource mr{host};
    FAIL() << "a host pool became an RMM device resource";
  } catch (const dk::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("device memory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dk::rmm_resource{std::shared_ptr<dk::device_memory>{}}, dk::config_error);
}

TEST(RmmUpstream, ADevicekitPoolTakesItsChunksFromRmm) {
  rmm::mr::cuda_memory_resource upstream;
  dk::memory_pool<dk::rmm_upstream> pool{dk::rmm_upstream(rmm::device_async_resource_ref{upstream}, 0),
                                         capped(64u << 20)};
  const rmm::cuda_stream stream;
  void* p = pool.allocate(1u << 20, dk::stream_ref(dk::device::cuda(0), stream.value()));
  EXPECT_GE(pool.stats().reserved_bytes, std::size_t{1} << 20);
  pool.deallocate(p, 1u << 20, dk::stream_ref(dk::device::cuda(0), stream.value()));
  stream.synchronize();
  EXPECT_THROW((void)pool.allocate(128u << 20), dk::out_of_memory);
  pool.check_consistency();
}

}  // namespace
