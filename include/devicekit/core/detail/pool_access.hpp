#pragma once
/// \file
/// detail::pool_peer_access: which devices may use the memory of devicekit's driver pools (see
/// the class). In core/ because both the device-wide calls (core/device_ops.hpp) and the
/// resources that create the pools (memory/resources.hpp) use it.
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
  [[nodiscard]] static pool_peer_access& instance() {
    static auto* registry = new pool_peer_access();  // never destroyed: pools may outlive statics
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
  static void set_access(cudaMemPool_t pool, int accessor);

  std::mutex mutex_;
  std::map<int, std::vector<cudaMemPool_t>> pools_;
  std::map<int, std::set<int>> accessors_;
};

}  // namespace devicekit::detail
#endif

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/detail/pool_access.ipp>
#endif
