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
/// The registry also keeps the pools of managers that are gone while something allocated from
/// them lives (keep_while_allocated): a placed tree or a buffer may outlive the manager that made
/// it, and is freed into its pool when it goes. Such a pool is destroyed by the free that leaves
/// nothing of it live; until then visit_kept() shows it to the figures of every manager.
///
/// Scratch (CUB temporary storage, NCCL scratch buffers) comes from (cuda:k, device) and is also
/// counted on its own (`scratch_memory_stats(dev)`), so a report can show what it takes.
#include <devicekit/core/detail/device_exists.hpp>
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
  // Written out: nvcc's front end passes the == that a defaulted <=> declares to the host
  // compiler without its body, and GCC then warns that it is used but never defined.
  friend bool operator==(const memory_key& a, const memory_key& b) { return a.dev == b.dev && a.kind == b.kind; }
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
  [[nodiscard]] static memory_key key_of(device dev, memory_kind kind);

  /// The pool of (dev, kind), made with the default configuration on first use.
  [[nodiscard]] device_memory& get(device dev, memory_kind kind);

  /// The pool of (dev, kind) as made by `make` under `signature` (a text that identifies the
  /// configuration): the pool there is returned if it was made under the same signature;
  /// otherwise a new one is made and the old one is retired (its unused memory released; it
  /// stays alive, so what was allocated from it can still be freed into it). What the global
  /// manager uses, so that its strategy and allocator kind apply to the process's pools.
  [[nodiscard]] device_memory& adopt(device dev, memory_kind kind, const std::string& signature, const factory& make);

  /// The pool of (dev, kind) if it has been made; null otherwise (stats must not make pools).
  [[nodiscard]] device_memory* find(device dev, memory_kind kind) const;

  /// Every pool made for (dev, kind), the current one first, then those retired by adopt().
  [[nodiscard]] std::vector<const device_memory*> pools(device dev, memory_kind kind) const;

  /// Every pinned pool (those of each device's pinned_host kind, and staging), for the host's
  /// figures: pinned memory is host memory.
  [[nodiscard]] std::vector<const device_memory*> pinned_pools() const;

  /// Takes `pool`, of (dev, kind), from its owner, a manager being destroyed (manager/detail/pools.hpp),
  /// so that what was allocated from it and outlives the manager - a placed tree, a buffer - can
  /// still be freed into it. A pool with nothing live is destroyed now, as its owner would have.
  /// Any other first hands its cached memory back (release_cached(), which waits for the frees
  /// pending on streams; skipped once the process is exiting) and is kept until the free after
  /// which nothing allocated from it is live or pending: that free destroys it, with no cost to
  /// other frees (one test of a byte the free path tests anyway). A pool whose last frees were
  /// still pending on a stream then (queued work may still use those blocks) is destroyed by the
  /// next call of this function, which waits for them as a pool's destructor does, or is left to
  /// the process's exit, like the registry's own pools. Thread-safe; never throws.
  void keep_while_allocated(device dev, memory_kind kind, std::unique_ptr<device_memory> pool) noexcept;

  /// Calls `f` with each pool kept for (dev, kind) by keep_while_allocated (for (cpu, pinned_host):
  /// every kept pinned pool, as pinned_pools()), under the registry's lock, so that none is
  /// destroyed meanwhile: unlike the pools above, a kept pool goes with its last allocation, so
  /// no pointer to one is handed out. `f` must not call the registry.
  void visit_kept(device dev, memory_kind kind, const std::function<void(const device_memory&)>& f) const;

  /// The copy engine's pinned staging pool (made on first use; needs CUDA).
  [[nodiscard]] device_memory& staging();
  /// The staging pool if it has been made; null otherwise.
  [[nodiscard]] device_memory* find_staging() const {
    std::lock_guard lock(mutex_);
    return staging_.get();
  }

  /// Records `bytes` of scratch taken from the pool of `dev` (given back: note_scratch_freed).
  void note_scratch_taken(device dev, std::size_t bytes);
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

  /// A pool keep_while_allocated() holds for what is still allocated from it.
  struct kept_pool {
    memory_key key;
    std::unique_ptr<device_memory> pool;
  };

  process_memory() = default;

  static std::unique_ptr<device_memory> make_default(const memory_key& key);

  /// A kept pool's report_when_idle callback: destroys `pool` if it is still kept (a sweep may
  /// have destroyed it first; `pool` is then only compared, never used).
  static void kept_pool_idle(device_memory* pool);

#if DEVICEKIT_HAS_CUDA
  /// Page-locked memory needs a working CUDA runtime with a device (cudaMallocHost fails
  /// otherwise): config_error now, saying what to use instead, rather than a cuda_error later.
  static void require_cuda_device(const std::string& what);
#endif

  mutable std::mutex mutex_;
  std::map<memory_key, slot> slots_;
  std::unique_ptr<device_memory> staging_;
  std::map<device, scratch_stats> scratch_;
  std::vector<kept_pool> kept_;
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
  ~scratch_block();
  [[nodiscard]] void* get() const noexcept { return p_; }
  void release(native_stream_handle s);

 private:
  device_memory* pool_;
  device dev_;
  std::size_t bytes_;
  void* p_ = nullptr;
};

}  // namespace detail

/// The process's pool of `kind` memory for `dev` (see the file comment): what placement and the
/// other facilities use when given no resource, and what the global manager's memory(dev, kind)
/// returns. Made on first use; lives until the process exits. config_error for device or pinned
/// memory of a device the process does not have (core/detail/device_exists.hpp; host memory is the
/// host's whatever the device), and for a kind `dev` cannot have in this build (no CUDA), saying
/// what to use instead.
[[nodiscard]] inline device_memory& default_memory(device dev, memory_kind kind = memory_kind::device) {
  if (kind != memory_kind::host) detail::check_device_exists(dev, "default_memory");
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

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/registry.ipp>
#endif
