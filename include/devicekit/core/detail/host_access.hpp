#pragma once
/// \file
/// Host accesses to pinned memory, announced to a race detector that cannot see them.
#include <devicekit/core/config.hpp>

#include <cstddef>

#if DEVICEKIT_HAS_CUDA && (defined(__GNUC__) || defined(__clang__))
// devicekit::cuda_sim's stream-order race detector checks every copy the runtime queues, but the
// host's own reads and writes of pinned memory (packing and unpacking staging buffers) are plain
// loads and stores it cannot see: host copies announce them through this symbol, which a program
// linked against the simulator defines and any other leaves null (a weak reference; the same idea
// as ThreadSanitizer's annotations).
extern "C" __attribute__((weak)) void devicekit_cuda_sim_host_access(const void* p, std::size_t bytes, int write);
#  define DEVICEKIT_HOST_ACCESS_ANNOTATIONS 1
#else
#  define DEVICEKIT_HOST_ACCESS_ANNOTATIONS 0
#endif

namespace devicekit::detail {

/// Tells a race detector linked into the program (see above) that the host reads or writes
/// [p, p + bytes) now; nothing otherwise.
inline void note_host_access([[maybe_unused]] const void* p, [[maybe_unused]] std::size_t bytes,
                             [[maybe_unused]] bool write) noexcept {
#if DEVICEKIT_HOST_ACCESS_ANNOTATIONS
  if (devicekit_cuda_sim_host_access != nullptr && bytes != 0) devicekit_cuda_sim_host_access(p, bytes, write ? 1 : 0);
#endif
}

}  // namespace devicekit::detail
