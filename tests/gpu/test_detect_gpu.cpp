// GPU detection against the runtime's own answers (runs only where a CUDA device is present).
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>

#include <cstring>

namespace dk = devicekit;

TEST_CASE("attribute-based properties agree with cudaGetDeviceProperties", "[detect][gpu]") {
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
