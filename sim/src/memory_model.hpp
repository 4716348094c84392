#pragma once
// The memory model: device allocations, pinned host ranges, the lookups and range checks of copies.
// Locking: called with the state's mutex held. Freed device memory stays poisoned in quarantine
// a while (memory_model.cpp).
#include "state.hpp"

#include <devicekit/memory/context_headroom.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace devicekit::cuda_sim::detail {

inline constexpr unsigned char poison_new = 0xA5;    ///< never-written device memory reads as this
inline constexpr unsigned char poison_freed = 0xDE;  ///< freed device memory reads as this

/// What the primary context of device `d` takes of its memory: devicekit's own rule for the CUDA
/// context (devicekit/memory/context_headroom.hpp, which says where the figure comes from), so
/// that a budget devicekit works out for a device of any size fits on the simulated one.
inline std::uint64_t context_bytes(const device_spec& d) { return cuda_context_headroom_bytes(d.total_memory); }

/// Device memory a program may still allocate on `d` when `in_use` bytes are allocated: total
/// less the context and `in_use`, never below zero.
inline std::uint64_t free_device_bytes(const device_spec& d, std::uint64_t in_use) {
  const std::uint64_t context = context_bytes(d);
  const std::uint64_t usable = d.total_memory > context ? d.total_memory - context : 0;
  return usable > in_use ? usable - in_use : 0;
}

/// The live allocation (device or pinned host) that holds `p`, or nullptr.
allocation* find_allocation(state& g, const void* p);
/// Whether `p` is in freed device memory still kept poisoned.
bool in_quarantine(const state& g, const void* p);
/// A device allocation of `size` bytes on `device`, poisoned, within its memory.
cudaError_t device_alloc(state& g, void** out, std::size_t size, int device, bool from_pool, const char* api);
/// Frees a device allocation for good (poisoned and kept a while).
void release_device(state& g, allocation& a);
/// Checks that [p, p+n) is all inside one live device allocation or outside all of them.
cudaError_t check_range(state& g, const void* p, std::size_t n, const char* api, allocation*& owner);

/// Whether `a` is pinned host memory (cudaMallocHost or cudaHostRegister).
inline bool pinned(const allocation* a) { return a != nullptr && a->kind != mem_kind::device; }

/// Whether a copy queued (or running) on some stream still reads or writes pinned range `a`.
inline bool queued_copy_uses(const allocation& a) { return a.uses && a.uses->pending > 0; }

/// The rule of cudaFreeHost and cudaHostUnregister. cudaMemcpyAsync with pinned host memory is
/// asynchronous: "the call may return before the copy is complete" (cudaMemcpyAsync; "API
/// synchronization behavior"), and the copy reads or writes the host range when its stream
/// reaches it, so the range must stay allocated and page-locked until the copy is complete.
/// Neither cudaFreeHost ("Frees the memory space pointed to by hostPtr") nor
/// cudaHostUnregister ("Unmaps the memory range ... and makes it pageable again") says it waits
/// for queued copies first, so releasing the range earlier is undefined: the copy engine may
/// read or write freed or unpinned pages.
inline constexpr const char* host_range_rule = "a host buffer freed while a queued copy still uses it";

}  // namespace devicekit::cuda_sim::detail
