#pragma once
/// \file
/// The process's memory: one registry of devicekit pools (memory/pool.hpp), keyed by device and
/// memory kind (core/memory_kind.hpp), made on first use and never destroyed. It is what every
/// facility allocates from when given no resource: placement, replicate, shard, prefetch and
/// the copy engine's staging and scratch, NCCL's scratch, and the global manager
/// (default_manager()); a manager a program constructs keeps pools of its own.
///
///   devicekit::device_memory& gpu = devicekit::default_memory(devicekit::device::cuda(0));
///   devicekit::device_memory& pin = devicekit::default_memory(devicekit::device::cuda(0),
///                                                             devicekit::memory_kind::pinned_host);
///
///   (cuda:k, device)       memory_pool<cuda_device_resource>: a driver pool of its own, so that
///                          freeing never synchronises the GPU (cudaFree waits for all work on the
///                          device: CUDA runtime API, "cudaFree")
///   (cuda:k, pinned_host)  memory_pool<pinned_host_resource>: host memory cuda:k reads directly
///   (any, host), (cpu, device)
///                          memory_pool<host_resource>: the host's memory (one pool)
///   staging_memory()       memory_pool<pinned_host_resource>: the copy engine's staging buffers,
///                          sized exactly (no size classes: PyTorch's CachingHostAllocator
///                          rounds pinned requests up to a power of two, which can waste up to
///                          half of the pinned memory it holds), freed in stream order after the
///                          copy that reads them is queued
///
/// Pools are never destroyed, like PyTorch's caching allocators and the CUDA runtime's own default
/// pools: placed trees and static objects may outlive any static destructor, and one running after
/// the CUDA runtime has shut down must not call it (core/runtime.hpp).
///
/// Scratch (CUB temporary storage, NCCL scratch buffers) comes from (cuda:k, device) and is also
/// counted on its own (`scratch_memory_stats(dev)`), so a report can show what it takes.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/resources.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

/// Scratch memory one device's operations took from its pool (CUB temporary storage and tables,
/// NCCL scratch buffers): live bytes now, the highest figure seen, and how many were taken.
struct scratch_stats {
  std::size_t in_use_bytes = 0;
  std::size_t peak_bytes = 0;
  std::uint64_t allocations = 0;
  friend bool operator==(const scratch_stats&, const scratch_stats&) = default;
};

namespace detail {

/// The pool configuration of the process's pinned pools: no size classes, so every block is its
/// request rounded to the pool's 256-byte granule.
[[nodiscard]] inline pool_config exact_pinned_config() {
  pool_config c;
  c.small_size_limit = 0;
  return c;
}

/// A slot's key after normalisation: host memory is the host's whatever device it is for.
struct memory_key {
  device dev;
  memory_kind kind;
  friend auto operator<=>(const memory_key&, const memory_key&) = default;
};

/// The registry behind default_memory() (see the file comment).
class process_memory {
 public:
  using factory = std::function<std::unique_ptr<device_memory>()>;

  [[nodiscard]] static process_memory& instance() {
    static auto* registry = new process_memory();  // never destroyed: see the file comment
    return *registry;
  }

  /// The key (dev, kind) is served by, or config_error saying what to use instead.
  [[nodiscard]] static memory_key key_of(device dev, memory_kind kind) {
    if (kind == memory_kind::host || (dev.is_cpu() && kind == memory_kind::device)) {
      return {device::cpu(), memory_kind::host};
    }
#if DEVICEKIT_HAS_CUDA
    if (dev.is_cpu()) return {device::cpu(), memory_kind::pinned_host};
    return {dev, kind};
#else
    if (kind == memory_kind::pinned_host) {
      throw config_error("memory kind pinned_host on " + dev.str() +
                         " needs CUDA (page-locked memory comes from cudaMallocHost), but devicekit was built without "
                         "it (DEVICEKIT_HAS_CUDA is 0); use memory_kind::host, or build with the CUDA toolkit");
    }
    throw config_error("cannot use the memory of " + dev.str() +
                       ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0); use cpu devices, or build with "
                       "the CUDA toolkit");
#endif
  }

  /// The pool of (dev, kind), made with the default configuration on first use.
  [[nodiscard]] device_memory& get(device dev, memory_kind kind) {
    const memory_key key = key_of(dev, kind);
    std::lock_guard lock(mutex_);
    slot& s = slots_[key];
    if (!s.pool) s.pool = make_default(key);
    return *s.pool;
  }

  /// The pool of (dev, kind) as made by `make` under `signature` (a text that identifies the
  /// configuration): the pool there is returned if it was made under the same signature;
  /// otherwise a new one is made and the old one is retired (its unused memory released; it
  /// stays alive, so what was allocated from it can still be freed into it). What the global
  /// manager uses, so that its strategy and allocator kind apply to the process's pools.
  [[nodiscard]] device_memory& adopt(device dev, memory_kind kind, const std::string& signature, const factory& make) {
    const memory_key key = key_of(dev, kind);
    std::lock_guard lock(mutex_);
    slot& s = slots_[key];
    if (s.pool && s.signature == signature) return *s.pool;
    std::unique_ptr<device_memory> fresh = make();
    if (s.pool) {
      try {
        s.pool->trim();
      } catch (...) {
        // A failure to hand cached memory back leaves it cached: the pool stays usable.
      }
      s.retired.push_back(std::move(s.pool));
    }
    s.pool = std::move(fresh);
    s.signature = signature;
    return *s.pool;
  }

  /// The pool of (dev, kind) if it has been made; null otherwise (stats must not make pools).
  [[nodiscard]] device_memory* find(device dev, memory_kind kind) const {
    const memory_key key = key_of(dev, kind);
    std::lock_guard lock(mutex_);
    const auto it = slots_.find(key);
    return it == slots_.end() ? nullptr : it->second.pool.get();
  }

  /// Every pool made for (dev, kind), the current one first, then those retired by adopt().
  [[nodiscard]] std::vector<const device_memory*> pools(device dev, memory_kind kind) const {
    const memory_key key = key_of(dev, kind);
    std::vector<const device_memory*> out;
    std::lock_guard lock(mutex_);
    const auto it = slots_.find(key);
    if (it == slots_.end()) return out;
    if (it->second.pool) out.push_back(it->second.pool.get());
    for (const auto& p : it->second.retired) out.push_back(p.get());
    return out;
  }

  /// Every pinned pool (those of each device's pinned_host kind, and staging), for the host's
  /// figures: pinned memory is host memory.
  [[nodiscard]] std::vector<const device_memory*> pinned_pools() const {
    std::vector<const device_memory*> out;
    std::lock_guard lock(mutex_);
    for (const auto& [key, s] : slots_) {
      if (key.kind != memory_kind::pinned_host) continue;
      if (s.pool) out.push_back(s.pool.get());
      for (const auto& p : s.retired) out.push_back(p.get());
    }
    if (staging_) out.push_back(staging_.get());
    return out;
  }

  /// The copy engine's pinned staging pool (made on first use; needs CUDA).
  [[nodiscard]] device_memory& staging() {
    std::lock_guard lock(mutex_);
    if (!staging_) {
#if DEVICEKIT_HAS_CUDA
      require_cuda_device("pinned staging memory");
      staging_ = std::make_unique<memory_pool<pinned_host_resource>>(pinned_host_resource{}, exact_pinned_config());
#else
      throw config_error(
          "staging memory is pinned host memory and needs CUDA, but devicekit was built without it "
          "(DEVICEKIT_HAS_CUDA is 0)");
#endif
    }
    return *staging_;
  }
  /// The staging pool if it has been made; null otherwise.
  [[nodiscard]] device_memory* find_staging() const {
    std::lock_guard lock(mutex_);
    return staging_.get();
  }

  /// Records `bytes` of scratch taken from the pool of `dev` (given back: note_scratch_freed).
  void note_scratch_taken(device dev, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    scratch_stats& s = scratch_[dev];
    s.in_use_bytes += bytes;
    s.peak_bytes = std::max(s.peak_bytes, s.in_use_bytes);
    ++s.allocations;
  }
  void note_scratch_freed(device dev, std::size_t bytes) noexcept {
    std::lock_guard lock(mutex_);
    scratch_stats& s = scratch_[dev];
    s.in_use_bytes -= std::min(bytes, s.in_use_bytes);
  }
  [[nodiscard]] scratch_stats scratch(device dev) const {
    std::lock_guard lock(mutex_);
    const auto it = scratch_.find(dev);
    return it == scratch_.end() ? scratch_stats{} : it->second;
  }

 private:
  struct slot {
    std::unique_ptr<device_memory> pool;
    std::string signature;  ///< empty: made with the default configuration
    std::vector<std::unique_ptr<device_memory>> retired;
  };

  process_memory() = default;

  static std::unique_ptr<device_memory> make_default(const memory_key& key) {
    if (key.kind == memory_kind::host) return std::make_unique<memory_pool<host_resource>>(host_resource{});
#if DEVICEKIT_HAS_CUDA
    if (key.kind == memory_kind::pinned_host) {
      require_cuda_device("memory kind pinned_host on " + key.dev.str());
      return std::make_unique<memory_pool<pinned_host_resource>>(pinned_host_resource{}, exact_pinned_config());
    }
    return std::make_unique<memory_pool<cuda_device_resource>>(cuda_device_resource(key.dev.ordinal()));
#else
    throw config_error("cannot make a pool for " + key.dev.str() + ": devicekit was built without CUDA");
#endif
  }

#if DEVICEKIT_HAS_CUDA
  /// Page-locked memory needs a working CUDA runtime with a device (cudaMallocHost fails
  /// otherwise): config_error now, saying what to use instead, rather than a cuda_error later.
  static void require_cuda_device(const std::string& what) {
    int count = 0;
    const cudaError_t r = cudaGetDeviceCount(&count);
    if (r != cudaSuccess) (void)cudaGetLastError();
    if (r == cudaSuccess && count > 0) return;
    throw config_error(what + " needs a CUDA device to pin memory for, and none is usable (" +
                       (r == cudaSuccess ? std::string("no device") : std::string(cudaGetErrorName(r))) +
                       "); use memory_kind::host (ordinary host memory) instead");
  }
#endif

  mutable std::mutex mutex_;
  std::map<memory_key, slot> slots_;
  std::unique_ptr<device_memory> staging_;
  std::map<device, scratch_stats> scratch_;
};

/// Scratch taken from the pool of a device for the lifetime of this object, counted in
/// scratch_memory_stats. `release(s)` gives it back in the order of stream `s` (after the work
/// queued on `s` that uses it); the destructor gives back what was not released, at once.
class scratch_block {
 public:
  scratch_block(device dev, std::size_t bytes, native_stream_handle s)
      : pool_(&process_memory::instance().get(dev, memory_kind::device)), dev_(dev), bytes_(bytes) {
    p_ = pool_->allocate_async(bytes, 256, s);
    process_memory::instance().note_scratch_taken(dev_, bytes_);
  }
  scratch_block(const scratch_block&) = delete;
  scratch_block& operator=(const scratch_block&) = delete;
  ~scratch_block() {
    if (p_ == nullptr) return;
    try {
      pool_->deallocate(p_, bytes_);
    } catch (...) {}
    process_memory::instance().note_scratch_freed(dev_, bytes_);
  }
  [[nodiscard]] void* get() const noexcept { return p_; }
  void release(native_stream_handle s) {
    void* p = std::exchange(p_, nullptr);
    if (p == nullptr) return;
    process_memory::instance().note_scratch_freed(dev_, bytes_);
    pool_->deallocate_async(p, bytes_, 256, s);
  }

 private:
  device_memory* pool_;
  device dev_;
  std::size_t bytes_;
  void* p_ = nullptr;
};

}  // namespace detail

/// The process's pool of `kind` memory for `dev` (see the file comment): what placement and the
/// other facilities use when given no resource, and what the global manager's memory(dev, kind)
/// returns. Made on first use; lives until the process exits. config_error for a kind `dev`
/// cannot have in this build (no CUDA), saying what to use instead.
[[nodiscard]] inline device_memory& default_memory(device dev, memory_kind kind = memory_kind::device) {
  return detail::process_memory::instance().get(dev, kind);
}

/// The copy engine's pinned staging pool (made on first use; config_error without CUDA).
[[nodiscard]] inline device_memory& staging_memory() { return detail::process_memory::instance().staging(); }

/// The staging pool's stats; nullopt until a transfer has needed staging.
[[nodiscard]] inline std::optional<pool_stats> staging_memory_stats() {
  if (const device_memory* m = detail::process_memory::instance().find_staging()) return m->stats();
  return std::nullopt;
}

/// Scratch taken from the pool of `dev` by devicekit's own operations (CUB batched copies, NCCL
/// collectives): in use now, peak, count.
[[nodiscard]] inline scratch_stats scratch_memory_stats(device dev) {
  return detail::process_memory::instance().scratch(dev);
}

}  // namespace devicekit
