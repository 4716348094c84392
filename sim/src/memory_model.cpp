// The memory model: device allocations, poison, the quarantine of freed memory, range checks.
// Locking: every function runs with the state's mutex held. Memory is poisoned when made (0xA5)
// and when freed (0xDE), and freed memory is kept a while so stale reads see garbage, not a crash.
#include "memory_model.hpp"

#include "entry.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace devicekit::cuda_sim::detail {
namespace {

constexpr std::size_t quarantine_limit = std::size_t{512} << 20;

}  // namespace

allocation* find_allocation(state& g, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = g.allocations.upper_bound(a);
  if (it == g.allocations.begin()) return nullptr;
  --it;
  return a < it->second.base + std::max<std::size_t>(it->second.size, 1) ? &it->second : nullptr;
}

bool in_quarantine(const state& g, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& [q, n] : g.quarantine) {
    const auto b = reinterpret_cast<std::uintptr_t>(q);
    if (a >= b && a < b + n) return true;
  }
  return false;
}

cudaError_t device_alloc(state& g, void** out, std::size_t size, int device, bool from_pool, const char* api) {
  if (out == nullptr) return cudaErrorInvalidValue;
  ensure_context(g, device);
  const device_spec& d = g.devices[static_cast<std::size_t>(device)];
  const std::size_t n = std::max<std::size_t>(size, 1);
  // Compared, not added: a size near SIZE_MAX would wrap the sum and pass.
  if (n > free_device_bytes(d, g.bytes_in_use[static_cast<std::size_t>(device)])) {
    *out = nullptr;
    return cudaErrorMemoryAllocation;
  }
  const std::size_t rounded = (n + 255) & ~std::size_t{255};
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  std::memset(p, poison_new, rounded);
  g.allocations[reinterpret_cast<std::uintptr_t>(p)] = {
      reinterpret_cast<std::uintptr_t>(p), n, mem_kind::device, device, from_pool, false};
  g.bytes_in_use[static_cast<std::size_t>(device)] += n;
  *out = p;
  (void)api;
  return cudaSuccess;
}

/// Frees a device allocation for good: poisoned and kept a while, so that a late read sees
/// garbage instead of crashing, and a late write corrupts nothing else.
void release_device(state& g, allocation& a) {
  g.bytes_in_use[static_cast<std::size_t>(a.device)] -= a.size;
  void* p = reinterpret_cast<void*>(a.base);
  const std::size_t rounded = (a.size + 255) & ~std::size_t{255};
  std::memset(p, poison_freed, rounded);
  g.allocations.erase(a.base);
  g.quarantine.emplace_back(p, rounded);
  g.quarantine_bytes += rounded;
  while (g.quarantine_bytes > quarantine_limit && g.quarantine.size() > 1) {
    std::free(g.quarantine.front().first);
    g.quarantine_bytes -= g.quarantine.front().second;
    g.quarantine.pop_front();
  }
}

/// Checks that [p, p+n) is all inside one live device allocation or outside all of them.
cudaError_t check_range(state& g, const void* p, std::size_t n, const char* api, allocation*& owner) {
  owner = find_allocation(g, p);
  if (owner == nullptr) {
    if (in_quarantine(g, p)) {
      violation(g, api, "device memory used after it was freed");
      return cudaErrorInvalidValue;
    }
    return cudaSuccess;  // host memory
  }
  if (owner->free_pending) {
    violation(g, api, "device memory used after cudaFreeAsync was queued on it");
    return cudaErrorInvalidValue;
  }
  if (reinterpret_cast<std::uintptr_t>(p) + n > owner->base + owner->size) {
    violation(g, api, "a copy or set runs past the end of its allocation");
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace devicekit::cuda_sim::detail
