// The C entry points of include/devicekit/c/allocator.h (libdevicekit_allocator.so): each device's
// memory from the process's pool of that GPU, counted as the client "c_api". Nothing here throws
// across the C boundary: failures become NULL and devicekit_last_error().
#include <devicekit/c/allocator.h>

#include <devicekit/memory/client_memory.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/registry.hpp>

#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>

#define DEVICEKIT_C_API extern "C" __attribute__((visibility("default")))

namespace {

namespace dk = devicekit;

thread_local std::string last_error;
std::atomic<std::size_t> refused{0};

/// The process's pool of GPU `device` as the client "c_api", made at first use; throws for a device
/// that does not exist.
dk::client_memory& entry_of(int device) {
  // Never destroyed, as the pools they name are not (memory/registry.hpp): a free may come from a
  // static destructor of the host program.
  static auto* entries = new std::unordered_map<int, dk::client_memory>();
  static auto* m = new std::mutex();
  const std::lock_guard lock(*m);
  const auto it = entries->find(device);
  if (it != entries->end()) return it->second;
  dk::device_memory& pool = dk::default_memory(dk::device::cuda(device));  // checks the device
  return entries->emplace(device, dk::client_memory(pool, "c_api")).first->second;
}

void fail(const char* call, const char* what) noexcept {
  try {
    last_error = std::string(call) + ": " + what;
  } catch (...) {
    last_error.clear();
  }
}

void refuse(const char* call, const char* what) noexcept {
  fail(call, what);
  if (refused.fetch_add(1) == 0) {
    std::fprintf(stderr,
                 "devicekit %s: a free was refused and the pool is unchanged (later refusals are counted by "
                 "devicekit_refused_frees()): %s\n",
                 call, what);
  }
}

void* allocate(const char* call, std::size_t size, int device, cudaStream_t stream) noexcept {
  try {
    last_error.clear();
    if (size == 0) return nullptr;
    return entry_of(device).allocate(size, 256, stream);
  } catch (const std::exception& ex) {  // out_of_memory's message names the client ("client c_api: ")
    fail(call, ex.what());
  } catch (...) {
    fail(call, "an unknown exception");
  }
  return nullptr;
}

void release(const char* call, void* ptr, std::size_t size, bool size_known, int device, cudaStream_t stream) noexcept {
  if (ptr == nullptr) return;
  try {
    last_error.clear();
    const dk::client_memory& e = entry_of(device);
    if (!size_known) {
      size = e.pool().allocation_size(ptr);
      if (size == 0) {
        char text[64];
        std::snprintf(text, sizeof text, "%p", ptr);
        return refuse(call, (std::string(text) + " on cuda:" + std::to_string(device) +
                             " is not a live allocation of devicekit's pool there: free it with the allocator that "
                             "made it, on the device it was made on. The pool is unchanged.")
                                .c_str());
      }
    }
    e.deallocate(ptr, size, 256, stream);
  } catch (const std::exception& ex) {
    refuse(call, ex.what());
  } catch (...) {
    refuse(call, "an unknown exception");
  }
}

}  // namespace

DEVICEKIT_C_API void* devicekit_malloc(ssize_t size, int device, cudaStream_t stream) {
  if (size < 0) {
    fail("devicekit_malloc", ("the size " + std::to_string(size) + " is negative: pass the bytes to allocate").c_str());
    return nullptr;
  }
  return allocate("devicekit_malloc", static_cast<std::size_t>(size), device, stream);
}

DEVICEKIT_C_API void devicekit_free(void* ptr, ssize_t size, int device, cudaStream_t stream) {
  if (size < 0) {
    refuse("devicekit_free",
           ("the size " + std::to_string(size) + " is negative: pass the size given to devicekit_malloc").c_str());
    return;
  }
  release("devicekit_free", ptr, static_cast<std::size_t>(size), true, device, stream);
}

DEVICEKIT_C_API void* devicekit_cupy_malloc(void* /*param*/, size_t size, int device) {
  return allocate("devicekit_cupy_malloc", size, device, cudaStreamLegacy);
}

DEVICEKIT_C_API void devicekit_cupy_free(void* /*param*/, void* ptr, int device) {
  release("devicekit_cupy_free", ptr, 0, false, device, cudaStreamLegacy);
}

DEVICEKIT_C_API const char* devicekit_last_error(void) { return last_error.c_str(); }

DEVICEKIT_C_API size_t devicekit_refused_frees(void) { return refused.load(); }

DEVICEKIT_C_API size_t devicekit_bytes_in_use(int device) {
  try {
    return entry_of(device).ledger().bytes_in_use();
  } catch (...) {
    return 0;
  }
}
