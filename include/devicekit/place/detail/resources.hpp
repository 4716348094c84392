#pragma once
/// \file
/// Placement's own resources, used until a memory pool is given (the manager gives its pool):
///   host_pool            a thread-safe caching pool of host memory (aligned operator new)
///   pinned_pool          the same over cudaMallocHost: staging areas for host<->device copies,
///                        with release after a CUDA event (the copy that reads it) has completed
///   default_device_pool  a devicekit pool per cuda device (memory/pool.hpp); a placed tree whose
///                        copy may still run when it is dropped waits for that copy first (place.hpp)
/// Nothing here calls CUDA once the process has begun to exit (core/runtime.hpp).
#include <devicekit/core/device.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/pool.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// Rounds a request up to the size class the caching pools keep: powers of two up to 1 MiB, then
/// multiples of 1 MiB, so that similar requests reuse one another's blocks.
[[nodiscard]] inline std::size_t size_class(std::size_t bytes) noexcept {
  if (bytes <= 256) return 256;
  if (bytes <= (std::size_t{1} << 20)) return std::bit_ceil(bytes);
  const std::size_t mib = std::size_t{1} << 20;
  return (bytes + mib - 1) / mib * mib;
}

/// A caching pool over `Upstream` (allocate(bytes) / deallocate(p, bytes), alignment 256 at
/// least). Freed blocks are kept by size class up to `cache_limit` bytes and handed out again;
/// the rest goes back upstream.
template <class Upstream>
class caching_pool {
 public:
  explicit caching_pool(Upstream up = Upstream{}, std::size_t cache_limit = std::size_t{2} << 30)
      : upstream_(std::move(up)), cache_limit_(cache_limit) {}
  caching_pool(const caching_pool&) = delete;
  caching_pool& operator=(const caching_pool&) = delete;
  ~caching_pool() { release_cached(); }

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = 256) {
    if (alignment > 256) throw config_error("placement pool: alignment above 256 bytes is not supported");
    const std::size_t cls = size_class(bytes);
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(cls);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_bytes_ -= cls;
        return p;
      }
    }
    return upstream_.allocate(cls);
  }

  void deallocate(void* p, std::size_t bytes, std::size_t /*alignment*/ = 256) noexcept {
    if (p == nullptr) return;
    const std::size_t cls = size_class(bytes);
    {
      std::lock_guard lock(mutex_);
      if (cached_bytes_ + cls <= cache_limit_) {
        free_.emplace(cls, p);
        cached_bytes_ += cls;
        return;
      }
    }
    upstream_.deallocate(p, cls);
  }

  /// Returns every cached block upstream.
  void release_cached() noexcept {
    std::multimap<std::size_t, void*> blocks;
    {
      std::lock_guard lock(mutex_);
      blocks.swap(free_);
      cached_bytes_ = 0;
    }
    for (auto& [cls, p] : blocks) upstream_.deallocate(p, cls);
  }

  [[nodiscard]] std::size_t cached_bytes() const {
    std::lock_guard lock(mutex_);
    return cached_bytes_;
  }

  friend bool operator==(const caching_pool& a, const caching_pool& b) noexcept { return &a == &b; }

 protected:
  Upstream upstream_;

 private:
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
  std::size_t cached_bytes_ = 0;
  std::size_t cache_limit_;
};

/// Page-aligned for blocks of a page or more: placement lays leaves out by page offset (see
/// detail::page_offset_padding in place.hpp).
struct aligned_new_upstream {
  static constexpr std::size_t alignment(std::size_t bytes) noexcept { return bytes >= 4096 ? 4096 : 256; }
  [[nodiscard]] void* allocate(std::size_t bytes) { return ::operator new(bytes, std::align_val_t{alignment(bytes)}); }
  void deallocate(void* p, std::size_t bytes) noexcept { ::operator delete(p, std::align_val_t{alignment(bytes)}); }
};

/// Host memory, cached.
using host_pool = caching_pool<aligned_new_upstream>;

#if DEVICEKIT_HAS_CUDA
struct pinned_upstream {
  [[nodiscard]] void* allocate(std::size_t bytes) {
    void* p = nullptr;
    DEVICEKIT_CUDA_CHECK(cudaMallocHost(&p, bytes));
    note_cuda_runtime_used();
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept {
    if (cuda_calls_allowed()) (void)cudaFreeHost(p);
  }
};

/// Pinned host memory for staging, cached; a block can be handed back "after this event", for a
/// copy still reading it: it is reused only once the event has completed.
class pinned_pool : public caching_pool<pinned_upstream> {
 public:
  pinned_pool() : caching_pool<pinned_upstream>(pinned_upstream{}, std::size_t{1} << 30) {}
  ~pinned_pool() {
    // Process exit: the runtime may be gone; leave pending blocks to the exit.
    if (!cuda_calls_allowed()) {
      std::lock_guard lock(pending_mutex_);
      pending_.clear();
    } else {
      drain();
    }
  }

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = 256) {
    reclaim(false);
    return caching_pool<pinned_upstream>::allocate(bytes, alignment);
  }

  /// Gives `p` back once `done` (recorded after the last use of p) has completed. Takes
  /// ownership of the event.
  void deallocate_after(void* p, std::size_t bytes, cudaEvent_t done) {
    std::lock_guard lock(pending_mutex_);
    pending_.push_back({p, bytes, done});
  }

  /// Waits for every pending block and returns it to the cache.
  void drain() { reclaim(true); }

 private:
  struct pending_block {
    void* p;
    std::size_t bytes;
    cudaEvent_t done;
  };

  void reclaim(bool wait) {
    std::vector<pending_block> ready;
    {
      std::lock_guard lock(pending_mutex_);
      auto it = std::stable_partition(pending_.begin(), pending_.end(), [&](const pending_block& b) {
        if (wait) (void)cudaEventSynchronize(b.done);
        const cudaError_t r = cudaEventQuery(b.done);
        if (r == cudaErrorNotReady) return true;  // keep; a status, not the last error
        return false;
      });
      ready.assign(it, pending_.end());
      pending_.erase(it, pending_.end());
    }
    for (auto& b : ready) {
      (void)cudaEventDestroy(b.done);
      caching_pool<pinned_upstream>::deallocate(b.p, b.bytes);
    }
  }

  std::mutex pending_mutex_;
  std::vector<pending_block> pending_;
};

/// The process's pool of device memory on cuda:`ordinal`: what placement allocates from when
/// given no resource. A devicekit pool (memory/pool.hpp) over a driver pool of its own, so that
/// freeing a placed tree never synchronises the GPU: cudaFree waits for all work on the device
/// (CUDA runtime API, "cudaFree"), which stalled the copies of a prefetch running meanwhile. The
/// balanced budget applies, and stats() / live_allocations() see placements. Never destroyed
/// (see core/runtime.hpp): placed trees may outlive static objects.
struct default_device_pools {
  std::mutex mutex;
  std::map<int, std::unique_ptr<device_memory>> pools;
};
[[nodiscard]] inline default_device_pools& default_device_pool_registry() {
  static auto* registry = new default_device_pools();
  return *registry;
}
[[nodiscard]] inline device_memory& default_device_pool(int ordinal) {
  auto& r = default_device_pool_registry();
  std::lock_guard lock(r.mutex);
  auto& slot = r.pools[ordinal];
  if (!slot) slot = std::make_unique<memory_pool<cuda_device_resource>>(cuda_device_resource(ordinal));
  return *slot;
}
/// The pool default_device_pool(ordinal) would return, if it has been made (null otherwise):
/// for memory statistics, which must not create one.
[[nodiscard]] inline device_memory* find_default_device_pool(int ordinal) {
  auto& r = default_device_pool_registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.pools.find(ordinal);
  return it == r.pools.end() ? nullptr : it->second.get();
}

/// The process's staging pool. Never destroyed (see core/runtime.hpp): blocks are left to exit.
[[nodiscard]] inline pinned_pool& staging_pool() {
  static pinned_pool* pool = new pinned_pool();
  return *pool;
}
#endif  // DEVICEKIT_HAS_CUDA

/// A resource of either kind behind one type: what `default_placement_resource` hands out.
class any_placement_resource {
 public:
  explicit any_placement_resource(host_pool* host) noexcept : host_(host) {}
  explicit any_placement_resource(device_memory* device_pool) noexcept : device_(device_pool) {}
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = 256) {
    if (device_ != nullptr) return device_->allocate(bytes, alignment);
    return host_->allocate(bytes, alignment);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = 256) {
    if (device_ != nullptr) return device_->deallocate(p, bytes, alignment);
    host_->deallocate(p, bytes, alignment);
  }
  /// The devicekit pool behind a cuda device's resource; null for the host's.
  [[nodiscard]] device_memory* device_pool() const noexcept { return device_; }

 private:
  host_pool* host_ = nullptr;
  device_memory* device_ = nullptr;
};

[[nodiscard]] inline host_pool& default_host_pool() {
  static host_pool* pool = new host_pool();  // never destroyed: placed trees may outlive statics
  return *pool;
}

[[nodiscard]] inline any_placement_resource& default_resource_for(device dev) {
  static std::mutex mutex;
  static auto* table = new std::map<device, std::unique_ptr<any_placement_resource>>();
  std::lock_guard lock(mutex);
  const device key = dev.is_cpu() ? device::cpu() : dev;
  auto& slot = (*table)[key];
  if (!slot) {
    if (dev.is_cpu()) {
      slot = std::make_unique<any_placement_resource>(&default_host_pool());
    } else {
#if DEVICEKIT_HAS_CUDA
      slot = std::make_unique<any_placement_resource>(&default_device_pool(dev.ordinal()));
#else
      throw config_error("cannot place on " + dev.str() + ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)");
#endif
    }
  }
  return *slot;
}

}  // namespace devicekit::detail
