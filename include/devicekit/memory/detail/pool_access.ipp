#pragma once
/// \file
/// The definitions behind memory/detail/pool_access.hpp: granting peer access to devicekit's driver pools.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION
/// (core/config.hpp).
#include <devicekit/memory/detail/pool_access.hpp>

#include <mutex>

namespace devicekit {

#if DEVICEKIT_HAS_CUDA
namespace detail {

DEVICEKIT_DECL void pool_peer_access::add_pool(int owner, cudaMemPool_t pool) {
  std::lock_guard lock(mutex_);
  for (const int accessor : accessors_[owner]) set_access(pool, accessor);
  pools_[owner].push_back(pool);
}

DEVICEKIT_DECL void pool_peer_access::grant(int accessor, int owner) {
  if (accessor == owner) return;
  std::lock_guard lock(mutex_);
  if (!accessors_[owner].insert(accessor).second) return;
  for (const cudaMemPool_t pool : pools_[owner]) set_access(pool, accessor);
}

DEVICEKIT_DECL void pool_peer_access::set_access(cudaMemPool_t pool, int accessor) {
  cudaMemAccessDesc desc{};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = accessor;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  DEVICEKIT_CUDA_CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
}

}  // namespace detail
#endif

}  // namespace devicekit
