// RMM's resources behind bench_rmm::allocator_iface. Only RMM (and its own CCCL) is included
// here; see allocator_iface.hpp.
#include "allocator_iface.hpp"

#include <rmm/cuda_device.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/version_config.hpp>

#include <cuda/stream_ref>

namespace bench_rmm {
namespace {

template <class Resource>
class rmm_allocator final : public allocator_iface {
 public:
  explicit rmm_allocator(Resource r) : resource_(std::move(r)) {}
  void* allocate(std::size_t bytes, cudaStream_t s) override {
    return resource_.allocate(::cuda::stream_ref{s}, bytes, 256);
  }
  void deallocate(void* p, std::size_t bytes, cudaStream_t s) override {
    resource_.deallocate(::cuda::stream_ref{s}, p, bytes, 256);
  }

 private:
  Resource resource_;
};

}  // namespace

std::unique_ptr<allocator_iface> make_rmm_pool() {
  // RMM's benchmarks/random_allocations: pool over cuda_memory_resource with 50% of free memory.
  const std::size_t initial = rmm::percent_of_free_device_memory(50);
  return std::make_unique<rmm_allocator<rmm::mr::pool_memory_resource>>(
      rmm::mr::pool_memory_resource(rmm::mr::cuda_memory_resource{}, initial));
}

std::unique_ptr<allocator_iface> make_rmm_arena(std::size_t arena_bytes) {
  return std::make_unique<rmm_allocator<rmm::mr::arena_memory_resource>>(
      rmm::mr::arena_memory_resource(rmm::mr::cuda_memory_resource{}, arena_bytes));
}

const char* rmm_version() { return RMM_VERSION; }

}  // namespace bench_rmm
