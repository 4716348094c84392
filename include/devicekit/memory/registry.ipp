#pragma once
/// \file
/// The definitions behind memory/registry.hpp: the process's pools, staging and scratch counts.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/registry.hpp>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL memory_key process_memory::key_of(device dev, memory_kind kind) {
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

DEVICEKIT_DECL device_memory& process_memory::get(device dev, memory_kind kind) {
  const memory_key key = key_of(dev, kind);
  std::lock_guard lock(mutex_);
  slot& s = slots_[key];
  if (!s.pool) s.pool = make_default(key);
  return *s.pool;
}

DEVICEKIT_DECL device_memory& process_memory::adopt(device dev, memory_kind kind, const std::string& signature,
                                                    const factory& make) {
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

DEVICEKIT_DECL device_memory* process_memory::find(device dev, memory_kind kind) const {
  const memory_key key = key_of(dev, kind);
  std::lock_guard lock(mutex_);
  const auto it = slots_.find(key);
  return it == slots_.end() ? nullptr : it->second.pool.get();
}

DEVICEKIT_DECL std::vector<const device_memory*> process_memory::pools(device dev, memory_kind kind) const {
  const memory_key key = key_of(dev, kind);
  std::vector<const device_memory*> out;
  std::lock_guard lock(mutex_);
  const auto it = slots_.find(key);
  if (it == slots_.end()) return out;
  if (it->second.pool) out.push_back(it->second.pool.get());
  for (const auto& p : it->second.retired) out.push_back(p.get());
  return out;
}

DEVICEKIT_DECL std::vector<const device_memory*> process_memory::pinned_pools() const {
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

DEVICEKIT_DECL void process_memory::visit_kept(device dev, memory_kind kind,
                                               const std::function<void(const device_memory&)>& f) const {
  const bool all_pinned = dev.is_cpu() && kind == memory_kind::pinned_host;
  memory_key key{dev, kind};
  if (!all_pinned) {
    try {
      key = key_of(dev, kind);
    } catch (const config_error&) {
      return;  // memory this build cannot have: no pool of it was ever kept
    }
  }
  std::lock_guard lock(mutex_);
  for (const auto& k : kept_) {
    if (all_pinned ? k.key.kind == memory_kind::pinned_host : k.key == key) f(*k.pool);
  }
}

DEVICEKIT_DECL void process_memory::keep_while_allocated(device dev, memory_kind kind,
                                                         std::unique_ptr<device_memory> pool) noexcept {
  if (!pool) return;
  memory_key key{dev, kind};
  try {
    key = key_of(dev, kind);
  } catch (...) {
    // A kind this build cannot serve was never made: the key as given is only a label.
  }
  // Its cache first, without the registry's lock: release_cached() may wait for streams.
  if (pool->has_live_allocations() && cuda_calls_allowed()) {
    try {
      (void)pool->release_cached();
    } catch (...) {
      // A cache that cannot be handed back stays cached: the pool stays usable.
    }
  }
  std::vector<std::unique_ptr<device_memory>> idle;  // destroyed at the end, without the lock
  std::lock_guard lock(mutex_);
  try {
    kept_.reserve(kept_.size() + 1);
    idle.reserve(kept_.size());
  } catch (...) {
    // No room to keep it: leave it to the process's exit rather than destroy memory in use.
    if (pool->has_live_allocations()) (void)pool.release();
    return;
  }
  // Kept pools with nothing live any more: those whose last frees were pending on a stream, and
  // those whose captured graphs went. Their destructors wait for what is pending.
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (it->pool->has_live_allocations()) {
      ++it;
    } else {
      idle.push_back(std::move(it->pool));
      it = kept_.erase(it);
    }
  }
  if (pool->report_when_idle(&process_memory::kept_pool_idle)) kept_.push_back({key, std::move(pool)});
}

DEVICEKIT_DECL void process_memory::kept_pool_idle(device_memory* pool) {
  std::unique_ptr<device_memory> gone;  // destroyed at the end, without the lock
  process_memory& self = instance();
  std::lock_guard lock(self.mutex_);
  for (auto it = self.kept_.begin(); it != self.kept_.end(); ++it) {
    if (it->pool.get() == pool) {
      gone = std::move(it->pool);
      self.kept_.erase(it);
      break;
    }
  }
}

DEVICEKIT_DECL device_memory& process_memory::staging() {
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

DEVICEKIT_DECL void process_memory::note_scratch_taken(device dev, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  scratch_stats& s = scratch_[dev];
  s.in_use_bytes += bytes;
  s.peak_bytes = std::max(s.peak_bytes, s.in_use_bytes);
  ++s.allocations;
}

DEVICEKIT_DECL std::unique_ptr<device_memory> process_memory::make_default(const memory_key& key) {
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
DEVICEKIT_DECL void process_memory::require_cuda_device(const std::string& what) {
  int count = 0;
  const cudaError_t r = cudaGetDeviceCount(&count);
  if (r != cudaSuccess) (void)cudaGetLastError();
  if (r == cudaSuccess && count > 0) return;
  throw config_error(what + " needs a CUDA device to pin memory for, and none is usable (" +
                     (r == cudaSuccess ? std::string("no device") : std::string(cudaGetErrorName(r))) +
                     "); use memory_kind::host (ordinary host memory) instead");
}

#endif

DEVICEKIT_DECL scratch_block::~scratch_block() {
  if (p_ == nullptr) return;
  try {
    pool_->deallocate(p_, bytes_);
  } catch (...) {}
  process_memory::instance().note_scratch_freed(dev_, bytes_);
}

DEVICEKIT_DECL void scratch_block::release(native_stream_handle s) {
  void* p = std::exchange(p_, nullptr);
  if (p == nullptr) return;
  process_memory::instance().note_scratch_freed(dev_, bytes_);
  pool_->deallocate_async(p, bytes_, 256, s);
}

}  // namespace devicekit::detail
