// Stream-ordered allocation and pools: cudaMallocAsync, cudaFreeAsync, cudaMemPool*.
// Locking: each call holds the state's mutex (SIM_ENTER); a queued free takes it when its stream
// reaches it.
#include "capture.hpp"
#include "entry.hpp"
#include "memory_model.hpp"
#include "scheduler.hpp"

#include <cstdint>
#include <mutex>

using namespace devicekit::cuda_sim::detail;

extern "C" {

namespace {
pool_obj* default_pool_of(state& g, int device) {
  auto& p = g.default_pool[static_cast<std::size_t>(device)];
  if (p == nullptr) {
    p = new pool_obj;
    p->device = device;
    p->is_default = true;
    g.pools.insert(p);
  }
  return p;
}

pool_obj* resolve_pool(state& g, cudaMemPool_t h, const char* api) {
  auto* p = reinterpret_cast<pool_obj*>(h);
  if (g.pools.count(p) == 0 || p->destroyed) {
    violation(g, api, "a memory pool that does not exist (never created, or destroyed)");
    return nullptr;
  }
  return p;
}
}  // namespace

cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  SIM_ENTER("cudaDeviceGetDefaultMemPool");
  if (memPool == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  *memPool = reinterpret_cast<cudaMemPool_t>(default_pool_of(g, device));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* poolProps) {
  SIM_ENTER("cudaMemPoolCreate");
  if (memPool == nullptr || poolProps == nullptr || poolProps->location.type != cudaMemLocationTypeDevice) {
    return fail(cudaErrorInvalidValue);
  }
  if (!valid_device(g, poolProps->location.id)) return fail(cudaErrorInvalidDevice);
  ensure_context(g, poolProps->location.id);
  auto* p = new pool_obj;
  p->device = poolProps->location.id;
  g.pools.insert(p);
  *memPool = reinterpret_cast<cudaMemPool_t>(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) {
  SIM_ENTER("cudaMemPoolDestroy");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolDestroy");
  if (p == nullptr || p->is_default) return fail(cudaErrorInvalidValue);
  p->destroyed = true;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  SIM_ENTER("cudaMemPoolSetAttribute");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolSetAttribute");
  if (p == nullptr || value == nullptr) return fail(cudaErrorInvalidValue);
  if (attr == cudaMemPoolAttrReleaseThreshold) p->release_threshold = *static_cast<std::uint64_t*>(value);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  SIM_ENTER("cudaMemPoolGetAttribute");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolGetAttribute");
  if (p == nullptr || value == nullptr) return fail(cudaErrorInvalidValue);
  if (attr == cudaMemPoolAttrReleaseThreshold) {
    *static_cast<std::uint64_t*>(value) = p->release_threshold;
  } else if (attr == cudaMemPoolReuseFollowEventDependencies || attr == cudaMemPoolReuseAllowOpportunistic ||
             attr == cudaMemPoolReuseAllowInternalDependencies) {
    *static_cast<int*>(value) = 1;
  } else {
    *static_cast<std::uint64_t*>(value) = 0;
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t /*minBytesToKeep*/) {
  SIM_ENTER("cudaMemPoolTrimTo");
  if (resolve_pool(g, memPool, "cudaMemPoolTrimTo") == nullptr) return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc* descList,
                                           size_t count) {
  SIM_ENTER("cudaMemPoolSetAccess");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolSetAccess");
  if (p == nullptr || (descList == nullptr && count != 0)) return fail(cudaErrorInvalidValue);
  for (std::size_t i = 0; i < count; ++i) {
    const int d = descList[i].location.id;
    if (!valid_device(g, d)) return fail(cudaErrorInvalidDevice);
    if (d != p->device && !g.peer_possible[static_cast<std::size_t>(d)][static_cast<std::size_t>(p->device)]) {
      return fail(cudaErrorInvalidDevice);
    }
    if (descList[i].flags == cudaMemAccessFlagsProtNone) {
      p->access.erase(d);
    } else {
      p->access.insert(d);
    }
  }
  return cudaSuccess;
}

// A pool's memory is accessible from its own device, and from the devices it was given access to
// with cudaMemPoolSetAccess; cudaDeviceEnablePeerAccess does not change that (CUDA programming
// guide, "Stream Ordered Memory Allocator", device accessibility for multi-GPU support).
cudaError_t CUDARTAPI cudaMemPoolGetAccess(enum cudaMemAccessFlags* flags, cudaMemPool_t memPool,
                                           struct cudaMemLocation* location) {
  SIM_ENTER("cudaMemPoolGetAccess");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolGetAccess");
  if (p == nullptr || flags == nullptr || location == nullptr) return fail(cudaErrorInvalidValue);
  if (location->type != cudaMemLocationTypeDevice || !valid_device(g, location->id)) return fail(cudaErrorInvalidValue);
  *flags = location->id == p->device || p->access.count(location->id) != 0 ? cudaMemAccessFlagsProtReadWrite
                                                                           : cudaMemAccessFlagsProtNone;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  SIM_ENTER("cudaMallocFromPoolAsync");
  pool_obj* p = resolve_pool(g, memPool, "cudaMallocFromPoolAsync");
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaMallocFromPoolAsync", err);
  if (s == nullptr) return fail(err);
  if (cudaError_t c = capture_use(g, s); c != cudaSuccess) return fail(c);
  if (s->capture != nullptr) return fail(capture_alloc(g, s, ptr, size, p->device, "cudaMallocFromPoolAsync"));
  return fail(device_alloc(g, ptr, size, p->device, true, "cudaMallocFromPoolAsync"));
}

cudaError_t CUDARTAPI cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  SIM_ENTER_STREAM("cudaMallocAsync", stream);
  (void)default_pool_of(g, s->device);
  if (cudaError_t c = capture_use(g, s); c != cudaSuccess) return fail(c);
  // A graph allocation node ("Graph Memory Nodes"): the address is fixed at capture.
  if (s->capture != nullptr) return fail(capture_alloc(g, s, devPtr, size, s->device, "cudaMallocAsync"));
  return fail(device_alloc(g, devPtr, size, s->device, true, "cudaMallocAsync"));
}

cudaError_t CUDARTAPI cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  SIM_ENTER_STREAM("cudaFreeAsync", stream);
  if (cudaError_t c = capture_use(g, s); c != cudaSuccess) return fail(c);
  if (devPtr == nullptr) return cudaSuccess;
  if (s->capture != nullptr) return fail(capture_free(g, s, devPtr));  // a graph free node
  allocation* a = find_allocation(g, devPtr);
  if (a == nullptr || a->base != reinterpret_cast<std::uintptr_t>(devPtr) || a->kind != mem_kind::device ||
      a->free_pending) {
    violation(g, "cudaFreeAsync",
              in_quarantine(g, devPtr) || (a != nullptr && a->free_pending) ? "a pointer freed twice"
                                                                            : "a pointer no allocation call returned");
    return fail(cudaErrorInvalidValue);
  }
  // Graph memory is freed by its graph's free node here (capture_free); CUDA also lets
  // cudaFreeAsync free it outside the graph, which devicekit never does.
  if (a->graph_capture != 0) return fail(cudaErrorNotSupported);
  a->free_pending = true;
  const std::uintptr_t base = a->base;
  // The memory is released when the stream reaches the free, not before (stream-ordered); the
  // free is a write of the whole range for the race detector, so a use not ordered before it races.
  enqueue(g, s,
          [base] {
            state& gs = global();
            std::lock_guard lk(gs.m);
            auto it = gs.allocations.find(base);
            if (it != gs.allocations.end()) release_device(gs, it->second);
          },
          {}, "cudaFreeAsync", {{devPtr, a->size, true, "the allocation freed"}});
  return cudaSuccess;
}

}  // extern "C"
