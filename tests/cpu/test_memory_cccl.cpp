// CCCL interop: the pools model the installed CCCL's (3.0) cuda::mr::resource and
// cuda::mr::async_resource concepts, with the accessibility properties of their upstream, and
// work through CCCL's type-erased resource_ref. The experimental memory resource API must be
// switched on before the first include, so this file is its own translation unit.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE

#include <devicekit/memory/pool.hpp>

#include <catch2/catch.hpp>

namespace dk = devicekit;

#if DEVICEKIT_HAS_CCCL_MR

using host_pool = dk::memory_pool<dk::host_resource>;
using pinned_pool = dk::memory_pool<dk::pinned_host_resource>;
using device_pool = dk::memory_pool<dk::cuda_device_resource>;

static_assert(cuda::mr::resource<host_pool>);
static_assert(cuda::mr::async_resource<host_pool>);
static_assert(cuda::mr::resource_with<host_pool, cuda::mr::host_accessible>);
static_assert(!cuda::mr::resource_with<host_pool, cuda::mr::device_accessible>);
static_assert(cuda::mr::async_resource_with<device_pool, cuda::mr::device_accessible>);
static_assert(!cuda::mr::resource_with<device_pool, cuda::mr::host_accessible>);
static_assert(cuda::mr::async_resource_with<pinned_pool, cuda::mr::host_accessible, cuda::mr::device_accessible>);
// The upstreams are resources too.
static_assert(cuda::mr::resource_with<dk::host_resource, cuda::mr::host_accessible>);
static_assert(cuda::mr::async_resource_with<dk::cuda_device_resource, cuda::mr::device_accessible>);
static_assert(
    cuda::mr::resource_with<dk::pinned_host_resource, cuda::mr::host_accessible, cuda::mr::device_accessible>);
// The type-erased pool has no compile-time accessibility: it is a resource, with no properties.
static_assert(cuda::mr::async_resource<dk::device_memory>);

TEST_CASE("a host pool works through CCCL's resource_ref and async_resource_ref", "[memory][cccl]") {
  dk::pool_config cfg;
  cfg.max_size = 64u << 20;
  cfg.tracking = dk::tracking_mode::off;
  host_pool pool(cfg);
  cuda::mr::resource_ref<cuda::mr::host_accessible> ref{pool};
  void* p = ref.allocate(1000, 256);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
  CHECK(pool.stats().allocated_bytes == 1000);
  ref.deallocate(p, 1000, 256);
  cuda::mr::async_resource_ref<cuda::mr::host_accessible> aref{pool};
  void* q = aref.allocate_async(4096, 512, cuda::stream_ref{});
  CHECK(reinterpret_cast<std::uintptr_t>(q) % 512 == 0);
  aref.deallocate_async(q, 4096, 512, cuda::stream_ref{});
  CHECK(pool.stats().allocated_bytes == 0);
  CHECK(pool.stats().allocation_count == 2);
  host_pool other(cfg);
  CHECK(pool == pool);
  CHECK_FALSE(pool == other);
}

#elif DEVICEKIT_HAS_CUDA

TEST_CASE("CCCL's memory resource header is on the include path where CUDA is", "[memory][cccl]") {
  FAIL(
      "cuda/memory_resource was not found although CUDA is: the test build must add the toolkit's cccl include "
      "directory");
}

#endif
