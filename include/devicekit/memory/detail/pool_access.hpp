#pragma once
/// \file
/// detail::pool_peer_access: which devices may use the memory of devicekit's driver pools (see
/// the class). The resources that create the pools (memory/cuda_resources.hpp) register them; the
/// device-wide enable_peer_access (core/device_ops.hpp) reaches it through the peer access
/// listener it installs, since core knows nothing of pools.
#include <devicekit/core/device_ops.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>

#include <map>
#include <mutex>
#include <set>
#include <vector>

#if DEVICEKIT_HAS_CUDA
namespace devicekit::detail {

/// Peer access to the memory of pools made with cudaMemPoolCreate. cudaDeviceEnablePeerAccess
/// does not apply to them: each pool grants access itself, with cudaMemPoolSetAccess (CUDA
/// programming guide, "Stream Ordered Memory Allocator", device accessibility for multi-GPU
/// support), and only to other devices (the owner always has it; RMM learnt that setting it for
/// the owner fails, rapidsai/rmm#1753). This registry keeps the pools devicekit created on each
/// device and the devices that have been given access to that device's memory: a new pool grants
/// access to those at once, a newly granted device gets it from every pool.
class pool_peer_access {
 public:
  /// The registry, made at the first pool, when it starts listening to enable_peer_access.
  [[nodiscard]] static pool_peer_access& instance() {
    static pool_peer_access* const registry = [] {
      auto* r = new pool_peer_access();  // never destroyed: pools may outlive statics
      set_peer_access_listener(&on_enabled, r);
      return r;
    }();
    return *registry;
  }

  void add_pool(int owner, cudaMemPool_t pool);

  void remove_pool(int owner, cudaMemPool_t pool) noexcept {
    std::lock_guard lock(mutex_);
    std::erase(pools_[owner], pool);
  }

  /// From now on `accessor` may read and write the memory of every devicekit pool on `owner`
  /// (the caller has checked cudaDeviceCanAccessPeer).
  void grant(int accessor, int owner);

 private:
  static void on_enabled(void* registry, int accessor, int owner) {
    static_cast<pool_peer_access*>(registry)->grant(accessor, owner);
  }
  static void set_access(cudaMemPool_t pool, int accessor);

  std::mutex mutex_;
  std::map<int, std::vector<cudaMemPool_t>> pools_;
  std::map<int, std::set<int>> accessors_;
};

}  // namespace devicekit::detail
#endif

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/pool_access.ipp>
#endif
