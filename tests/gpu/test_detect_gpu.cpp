// GPU detection against the runtime's own answers (runs only where a CUDA device is present).
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>

#include <cstring>

namespace dk = devicekit;

TEST_CASE("detected properties agree with cudaGetDeviceProperties and with attribute reads", "[detect][gpu]") {
  dk::device_manager<dk::cuda_detector> dm{dk::settings{}};
  REQUIRE(dm.gpu_count() > 0);
  for (const auto& p : dm.capabilities().devices) {
    cudaDeviceProp prop{};
    REQUIRE(cudaGetDeviceProperties(&prop, p.id.ordinal()) == cudaSuccess);
    INFO(p.id.str() << " " << p.name);
    CHECK(p.name == prop.name);
    CHECK(p.total_memory_bytes == prop.totalGlobalMem);
    CHECK(p.cc.major == prop.major);
    CHECK(p.cc.minor == prop.minor);
    CHECK(p.multiprocessor_count == prop.multiProcessorCount);
    CHECK(p.memory_bus_width_bits == prop.memoryBusWidth);
    CHECK(p.l2_cache_bytes == prop.l2CacheSize);
    CHECK(p.async_engine_count == prop.asyncEngineCount);
    CHECK(p.ecc_enabled == (prop.ECCEnabled != 0));
    CHECK(p.pci_bus == prop.pciBusID);
    CHECK(p.pci_domain == prop.pciDomainID);
    unsigned char uuid[16];
    std::memcpy(uuid, prop.uuid.bytes, 16);
    CHECK(p.uuid == dk::format_gpu_uuid(uuid));
    char bus_id[32] = {};
    REQUIRE(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, p.id.ordinal()) == cudaSuccess);
    // The runtime prints a 4-digit domain; nvidia-smi (and devicekit) an 8-digit one.
    CHECK(p.pci_bus_id.substr(4) == std::string(bus_id));

    // The attribute-by-attribute path (runtimes before CUDA 13) reads the same device the same way.
    const auto a = dk::detail::query_device_properties_by_attributes(p.id.ordinal(), dm.gpu_count());
    CHECK(a.name == p.name);
    CHECK(a.uuid == p.uuid);
    CHECK(a.pci_bus_id == p.pci_bus_id);
    CHECK(a.total_memory_bytes == p.total_memory_bytes);
    CHECK(a.cc == p.cc);
    CHECK(a.multiprocessor_count == p.multiprocessor_count);
    CHECK(a.memory_bus_width_bits == p.memory_bus_width_bits);
    CHECK(a.l2_cache_bytes == p.l2_cache_bytes);
    CHECK(a.async_engine_count == p.async_engine_count);
    CHECK(a.ecc_enabled == p.ecc_enabled);
    CHECK(a.max_threads_per_block == p.max_threads_per_block);
    CHECK(a.warp_size == p.warp_size);
    CHECK(a.integrated == p.integrated);
    CHECK(a.managed_memory == p.managed_memory);
    CHECK(a.concurrent_managed_access == p.concurrent_managed_access);
    CHECK(a.peer_access == p.peer_access);

    // Clock rates: not detected, read when asked.
    int sm_khz = 0;
    REQUIRE(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, p.id.ordinal()) == cudaSuccess);
    const auto clocks = dk::query_clock_rates(p.id);
    CHECK(clocks.sm_khz == sm_khz);
    CHECK(clocks.sm_khz > 0);
    CHECK(clocks.memory_khz > 0);
  }
}

TEST_CASE("free memory is available on request and bounded by the total", "[detect][gpu]") {
  const auto info = dk::query_free_memory(dk::device::cuda(0));
  CHECK(info.total_bytes > 0);
  CHECK(info.free_bytes <= info.total_bytes);
}

TEST_CASE("a cuda stream runs and reports idle", "[core][gpu]") {
  dk::stream s(dk::device::cuda(0));
  REQUIRE(s.native_handle() != nullptr);
  s.synchronize();
  CHECK(s.idle());
}
