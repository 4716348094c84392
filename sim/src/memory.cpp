// Memory: cudaMalloc / cudaFree, pinned and registered host memory, cudaPointerGetAttributes.
// Locking: each call holds the state's mutex (SIM_ENTER); the memory model does the rest.
#include "capture.hpp"
#include "entry.hpp"
#include "memory_model.hpp"
#include "race_detector.hpp"
#include "scheduler.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

using namespace devicekit::cuda_sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  SIM_ENTER("cudaMalloc");
  if (cudaError_t c = capture_unsafe_call(g); c != cudaSuccess) return fail(c);
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  return fail(device_alloc(g, devPtr, size, tl_device, false, "cudaMalloc"));
}

cudaError_t CUDARTAPI cudaFree(void* devPtr) {
  SIM_ENTER("cudaFree");
  if (cudaError_t c = capture_unsafe_call(g); c != cudaSuccess) return fail(c);
  if (valid_device(g, tl_device)) bind_current(g);
  if (devPtr == nullptr) return cudaSuccess;
  allocation* a = find_allocation(g, devPtr);
  if (a == nullptr || a->base != reinterpret_cast<std::uintptr_t>(devPtr) || a->kind != mem_kind::device ||
      a->free_pending) {
    violation(g, "cudaFree",
              in_quarantine(g, devPtr) ? "a pointer freed twice" : "a pointer cudaMalloc did not return");
    return fail(cudaErrorInvalidValue);
  }
  // Graph memory belongs to its graph here (capture_alloc); CUDA lets cudaFree release it, which
  // devicekit never does.
  if (a->graph_capture != 0) return fail(cudaErrorNotSupported);
  // cudaFree synchronises: work still using the memory finishes first.
  const int device = a->device;
  wait_device_idle(g, e_.lk, device);
  a = find_allocation(g, devPtr);
  if (a != nullptr) {
    // Freeing is a write of the whole range: a use that the wait did not order before it races.
    host_access(g, {devPtr, a->size, true, "the allocation freed"}, "cudaFree");
    release_device(g, *a);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t size) {
  SIM_ENTER("cudaMallocHost");
  if (cudaError_t c = capture_unsafe_call(g); c != cudaSuccess) return fail(c);
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  if (valid_device(g, tl_device)) bind_current(g);
  const std::size_t n = std::max<std::size_t>(size, 1);
  void* p = std::aligned_alloc(4096, (n + 4095) & ~std::size_t{4095});
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  g.allocations[reinterpret_cast<std::uintptr_t>(p)] = {
      reinterpret_cast<std::uintptr_t>(p), n, mem_kind::pinned_host, -1, false, false};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) {
  SIM_ENTER("cudaFreeHost");
  if (cudaError_t c = capture_unsafe_call(g); c != cudaSuccess) return fail(c);
  if (ptr == nullptr) return cudaSuccess;
  allocation* a = find_allocation(g, ptr);
  if (a == nullptr || a->base != reinterpret_cast<std::uintptr_t>(ptr) || a->kind != mem_kind::pinned_host) {
    violation(g, "cudaFreeHost", "a pointer cudaMallocHost did not return (or one freed twice)");
    return fail(cudaErrorInvalidValue);
  }
  if (queued_copy_uses(*a)) {
    // Undefined (host_range_rule): reported, and the memory is kept until those copies are done
    // (the simulator must not corrupt its own heap); waiting here instead could block for ever.
    violation(g, "cudaFreeHost", host_range_rule);
    a->uses->free_when_done = ptr;
    g.allocations.erase(a->base);
    return cudaSuccess;
  }
  wait_device_idle(g, e_.lk, -1);  // other work finishes first: the call is synchronous here
  a = find_allocation(g, ptr);
  if (a != nullptr) {
    host_access(g, {ptr, a->size, true, "the allocation freed"}, "cudaFreeHost");
    g.allocations.erase(a->base);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostRegister(void* ptr, size_t size, unsigned int /*flags*/) {
  SIM_ENTER("cudaHostRegister");
  if (ptr == nullptr || size == 0) return fail(cudaErrorInvalidValue);
  if (find_allocation(g, ptr) != nullptr) return fail(cudaErrorHostMemoryAlreadyRegistered);
  g.allocations[reinterpret_cast<std::uintptr_t>(ptr)] = {
      reinterpret_cast<std::uintptr_t>(ptr), size, mem_kind::registered_host, -1, false, false};
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostUnregister(void* ptr) {
  SIM_ENTER("cudaHostUnregister");
  allocation* a = find_allocation(g, ptr);
  if (a == nullptr || a->kind != mem_kind::registered_host || a->base != reinterpret_cast<std::uintptr_t>(ptr)) {
    return fail(cudaErrorHostMemoryNotRegistered);
  }
  if (queued_copy_uses(*a)) {
    violation(g, "cudaHostUnregister",
              std::string(host_range_rule) + " (unregistering unpins the pages the queued copy reads or writes)");
  }
  g.allocations.erase(a->base);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  SIM_ENTER("cudaPointerGetAttributes");
  if (attributes == nullptr) return fail(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  const allocation* a = find_allocation(g, ptr);
  if (a == nullptr) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    return cudaSuccess;
  }
  attributes->type = a->kind == mem_kind::device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  attributes->device = a->kind == mem_kind::device ? a->device : 0;
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = a->kind == mem_kind::device ? nullptr : const_cast<void*>(ptr);
  return cudaSuccess;
}

}  // extern "C"
