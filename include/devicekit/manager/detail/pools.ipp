#pragma once
/// \file
/// The definitions behind manager/detail/pools.hpp: pool signatures, and making and finding a manager's pools.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/manager/detail/pools.hpp>

#include <devicekit/manager/detail/errors.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/registry.hpp>
#include <devicekit/memory/resources.hpp>

#include <algorithm>
#include <cstdint>

namespace devicekit::detail {

DEVICEKIT_DECL std::string pool_signature(const pool_config& c, allocator_kind a) {
  std::string s = std::string(to_string(a));
  auto add = [&](const auto& v) { s += "|" + std::to_string(v); };
  add(c.initial_size);
  add(c.growth_factor);
  add(c.max_size.value_or(0));
  add(c.defrag_threshold);
  add(c.min_chunk_size);
  add(c.max_chunk_size);
  add(c.small_size_limit);
  add(static_cast<int>(c.tracking));
  add(static_cast<int>(c.release_on_free));
  add(static_cast<int>(static_cast<bool>(c.on_out_of_memory)));
  add(static_cast<int>(static_cast<bool>(c.on_leak)));
  if (c.budget) {
    add(c.budget->total_bytes);
    add(c.budget->budget_bytes);
    add(c.budget->headroom_bytes);
    add(c.budget->start_bytes);
    add(c.budget->fraction);
  }
  return s;
}

DEVICEKIT_DECL void check_pinned(device d, bool has_gpu, const std::string& fallback_reason) {
  if (pinned_available(d, has_gpu)) return;
  if constexpr (!DEVICEKIT_HAS_CUDA) {
    throw pinned_without_cuda_error(d);
  } else {
    throw pinned_without_gpu_error(d, fallback_reason);
  }
}

DEVICEKIT_DECL manager_pools::state::~state() {
  process_memory& registry = process_memory::instance();
  for (owned_pool& p : pools) registry.keep_while_allocated(p.dev, p.kind, std::move(p.pool));
}

DEVICEKIT_DECL device_memory& manager_pools::get_or_make(device d, memory_kind slot_kind, allocator_kind a,
                                                         pool_config (*config)(void*), void* context) {
  if (process_) {
    auto& registry = process_memory::instance();
    if (slot_kind == memory_kind::pinned_host) return registry.get(d, memory_kind::pinned_host);
    if (!state_) state_ = std::make_unique<state>();
    std::lock_guard lock(state_->mutex);
    for (const auto& [dev, pool] : state_->adopted) {
      if (dev == d) return *pool;
    }
    const pool_config c = config(context);
    device_memory& pool =
        registry.adopt(d, memory_kind::device, pool_signature(c, a), [&] { return make_device_pool(d, c, a); });
    state_->adopted.emplace_back(d, &pool);
    return pool;
  }
  if (!state_) state_ = std::make_unique<state>();
  std::lock_guard lock(state_->mutex);
  for (auto& p : state_->pools) {
    if (p.dev == d && p.kind == slot_kind) return *p.pool;
  }
  std::unique_ptr<device_memory> pool;
  if (slot_kind == memory_kind::pinned_host) {
#if DEVICEKIT_HAS_CUDA
    pool = std::make_unique<memory_pool<pinned_host_resource>>(pinned_host_resource{}, exact_pinned_config());
#endif
  } else {
    pool = make_device_pool(d, config(context), a);
  }
  state_->pools.push_back({d, slot_kind, std::move(pool)});
  return *state_->pools.back().pool;
}

DEVICEKIT_DECL const device_memory* manager_pools::find(device d, memory_kind kind) const {
  if (process_) {
#if !DEVICEKIT_HAS_CUDA
    if (d.is_cuda() || kind == memory_kind::pinned_host) return nullptr;
#endif
    return process_memory::instance().find(d, kind);
  }
  if (!state_) return nullptr;
  std::lock_guard lock(state_->mutex);
  for (const auto& p : state_->pools) {
    if (p.dev == d && p.kind == kind) return p.pool.get();
  }
  return nullptr;
}

DEVICEKIT_DECL std::vector<std::pair<device, pool_stats>> manager_pools::device_stats(
    const std::vector<device>& devices) const {
  std::vector<std::pair<device, pool_stats>> out;
  if (process_) {
    for (const device d : devices) {
      if (const device_memory* m = find(d)) out.emplace_back(d, m->stats());
    }
    return out;
  }
  if (!state_) return out;
  std::lock_guard lock(state_->mutex);
  for (const auto& p : state_->pools) {
    if (p.kind == memory_kind::device) out.emplace_back(p.dev, p.pool->stats());
  }
  return out;
}

DEVICEKIT_DECL std::vector<const device_memory*> manager_pools::pools_of(device d) const {
  std::vector<const device_memory*> out = pools_of(d, memory_kind::device);
  if (d.is_cpu()) {
    for (const device_memory* m : pools_of(d, memory_kind::pinned_host)) {
      if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
    }
  }
  return out;
}

DEVICEKIT_DECL void manager_pools::for_each_pool_of(device d,
                                                    const std::function<void(const device_memory&)>& f) const {
  for (const device_memory* m : pools_of(d)) f(*m);
  const process_memory& registry = process_memory::instance();
  registry.visit_kept(d, memory_kind::device, f);
  if (d.is_cpu()) registry.visit_kept(d, memory_kind::pinned_host, f);  // pinned memory is host memory
}

DEVICEKIT_DECL void manager_pools::for_each_pool_of(device d, memory_kind kind,
                                                    const std::function<void(const device_memory&)>& f) const {
  for (const device_memory* m : pools_of(d, kind)) f(*m);
  process_memory::instance().visit_kept(d, kind, f);
}

DEVICEKIT_DECL std::vector<const device_memory*> manager_pools::pools_of(device d, memory_kind kind) const {
  std::vector<const device_memory*> out;
  auto add = [&](const device_memory* m) {
    if (m != nullptr && std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  };
  [[maybe_unused]] auto& registry = process_memory::instance();
  if (kind == memory_kind::host || (d.is_cpu() && kind == memory_kind::device)) {
    // The manager's host pool and the process's (with those the global manager retired): where
    // dk::place(tree, cpu) puts a tree without a resource, as it does on a GPU.
    add(find(device::cpu()));
    for (const device_memory* m : registry.pools(device::cpu(), memory_kind::host)) add(m);
    return out;
  }
#if DEVICEKIT_HAS_CUDA
  if (kind == memory_kind::pinned_host) {
    if (d.is_cpu()) {
      if (state_ && !process_) {
        std::lock_guard lock(state_->mutex);
        for (const auto& p : state_->pools) {
          if (p.kind == memory_kind::pinned_host) add(p.pool.get());
        }
      }
      for (const device_memory* m : registry.pinned_pools()) add(m);
    } else {
      add(find(d, memory_kind::pinned_host));
      for (const device_memory* m : registry.pools(d, memory_kind::pinned_host)) add(m);
    }
    return out;
  }
  add(find(d));
  for (const device_memory* m : registry.pools(d, memory_kind::device)) add(m);
#else
  add(find(d, kind));
#endif
  return out;
}

}  // namespace devicekit::detail
