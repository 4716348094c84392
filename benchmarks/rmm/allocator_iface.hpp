#pragma once
// The one interface every allocator in bench_vs_rmm is driven through, so that each side pays
// the same indirect call. It names no CCCL type: RMM's translation unit (rmm_side.cpp) is built
// against RMM's own CCCL (3.5, shipped in the librmm wheel) and devicekit's against the
// toolkit's (3.0), and the two must never meet in one translation unit.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

// rmm_side is a shared library built with hidden visibility, so that its instantiations of RMM's
// CCCL stay inside it; only these factories are exported.
#define BENCH_RMM_EXPORT __attribute__((visibility("default")))

namespace bench_rmm {

class allocator_iface {
 public:
  virtual ~allocator_iface() = default;
  virtual void* allocate(std::size_t bytes, cudaStream_t s) = 0;
  virtual void deallocate(void* p, std::size_t bytes, cudaStream_t s) = 0;
};

/// rmm::mr::pool_memory_resource over cuda_memory_resource, initial pool = half the free memory
/// (what RMM's own random_allocations benchmark builds).
BENCH_RMM_EXPORT std::unique_ptr<allocator_iface> make_rmm_pool();
/// rmm::mr::arena_memory_resource over cuda_memory_resource with a global arena of `arena_bytes`
/// (RMM's benchmark gives it all free memory less 64 MiB; here it shares the GPU with our pool).
BENCH_RMM_EXPORT std::unique_ptr<allocator_iface> make_rmm_arena(std::size_t arena_bytes);
/// RMM's version string ("26.10.00").
BENCH_RMM_EXPORT const char* rmm_version();

}  // namespace bench_rmm
