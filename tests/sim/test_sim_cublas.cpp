// A cuBLAS handle's workspace from a devicekit pool (memory/cublas_workspace.hpp) on simulated GPUs,
// whose cuBLAS keeps the handle's bookkeeping and checks cuBLAS's workspace rules (sim/src/cublas.cpp):
// the workspace is under the pool's budget and counted as the client "cublas", a handle gets one
// devicekit workspace at a time, and what cuBLAS refuses leaves nothing behind.
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <devicekit/memory/cublas_workspace.hpp>

#include <cublas_v2.h>

#include <cstdint>
#include <string>

namespace {

std::uint64_t cublas_bytes(const dk::device_memory& pool) {
  for (const auto& c : pool.client_stats()) {
    if (c.client == "cublas") return c.bytes_in_use;
  }
  return 0;
}

dk::pool_config capped(std::size_t max_size) {
  dk::pool_config c;
  c.max_size = max_size;
  return c;
}

struct handle {
  cublasHandle_t h = nullptr;
  handle() { REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~handle() { CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS); }
};

}  // namespace

TEST_CASE("a cuBLAS workspace from the pool, on the handle's stream, counted as cublas", "[cublas]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), capped(64u << 20)};
  const dk::stream s(dk::device::cuda(0));
  const handle h;
  REQUIRE(cublasSetStream(h.h, s.native_handle()) == CUBLAS_STATUS_SUCCESS);
  {
    dk::cublas_workspace ws(h.h, pool, 1u << 20);
    CHECK(ws.size() == (1u << 20));
    CHECK(cublas_bytes(pool) == (1u << 20));
    CHECK(pool.stats().allocated_bytes == (1u << 20));
    // cublasSetStream drops a user workspace (cuBLAS's rule); rebind sets it again.
    REQUIRE(cublasSetStream(h.h, s.native_handle()) == CUBLAS_STATUS_SUCCESS);
    ws.rebind();
  }
  CHECK(cublas_bytes(pool) == 0);
  CHECK(pool.stats().allocated_bytes == 0);
  s.synchronize();
  pool.check_consistency();
}

TEST_CASE("a second devicekit workspace for one handle is refused, the first kept", "[cublas]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), capped(64u << 20)};
  const handle h;
  const dk::cublas_workspace first(h.h, pool, 1u << 20);
  try {
    const dk::cublas_workspace second(h.h, pool, 1u << 20);
    FAIL("a handle got two workspaces");
  } catch (const dk::invalid_request& e) {
    CHECK_THAT(e.what(), Catch::Contains("already has a devicekit workspace"));
  }
  CHECK(cublas_bytes(pool) == (1u << 20));  // only the first
  CHECK(pool.stats().allocated_bytes == (1u << 20));
  const handle other;  // another handle gets its own
  const dk::cublas_workspace its_own(other.h, pool, 2u << 20);
  CHECK(cublas_bytes(pool) == (3u << 20));
}

TEST_CASE("a workspace past the budget is out_of_memory naming cublas, and nothing is left claimed", "[cublas]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), capped(8u << 20)};
  const handle h;
  try {
    const dk::cublas_workspace ws(h.h, pool, 64u << 20);
    FAIL("a 64 MiB workspace fit an 8 MiB budget");
  } catch (const dk::out_of_memory& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("client cublas: "));
    CHECK(e.requested_bytes() == (64u << 20));
  }
  CHECK(cublas_bytes(pool) == 0);
  const dk::cublas_workspace fits(h.h, pool, 4u << 20);  // the handle was not left claimed
  CHECK(cublas_bytes(pool) == (4u << 20));
}

TEST_CASE("memory of another device is refused by cuBLAS, and given back", "[cublas][multi]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const handle h;  // a handle of device 0
  dk::memory_pool<dk::cuda_device_resource> other{dk::cuda_device_resource(1), capped(64u << 20)};
  CHECK_THROWS_AS(dk::cublas_workspace(h.h, other, 1u << 20), dk::cuda_error);
  CHECK(other.stats().allocated_bytes == 0);
  CHECK(cublas_bytes(other) == 0);
  dk::memory_pool<dk::cuda_device_resource> own{dk::cuda_device_resource(0), capped(64u << 20)};
  const dk::cublas_workspace ws(h.h, own, 1u << 20);  // not left claimed
  CHECK(cublas_bytes(own) == (1u << 20));
}

TEST_CASE("a null handle is refused before anything is allocated", "[cublas]") {
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), capped(8u << 20)};
  CHECK_THROWS_AS(dk::cublas_workspace(nullptr, pool, 1u << 20), dk::invalid_request);
  CHECK(pool.stats().allocated_bytes == 0);
}
