#pragma once
/// \file
/// Thrust's temporary memory from a devicekit pool, on a stream, counted in the pool as the client
/// "thrust/cub" (memory/clients.hpp); CUB's is memory/cub_temp_storage.hpp. nvcc only.
///
///   auto policy = devicekit::exec_policy(pool, s);          // thrust::cuda::par(alloc).on(s)
///   thrust::sort(policy, keys.begin(), keys.end());          // its scratch from `pool`
///
/// As RMM's exec_policy and Thrust's own caching allocator example do, Thrust is given an
/// allocator of bytes (thrust::cuda::par(alloc)); every block is allocated and freed in the order
/// of the policy's stream, so it is reused by other streams only after the algorithm's kernels.
/// exec_policy synchronises the stream at the end of each algorithm, as thrust::cuda::par does;
/// exec_policy_nosync (thrust::cuda::par_nosync) leaves that to the caller.
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/client_memory.hpp>
#include <devicekit/memory/device_memory.hpp>

#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>

#include <cstddef>

namespace devicekit {

/// Thrust's temporary allocator: bytes from a pool on a stream, counted as "thrust/cub".
class thrust_temporary_allocator : public thrust::device_malloc_allocator<char> {
 public:
  using value_type = char;
  using pointer = thrust::device_ptr<char>;
  using size_type = std::size_t;

  thrust_temporary_allocator(device_memory& memory, stream_ref s)
      : memory_(memory, "thrust/cub"), stream_(s.native_handle()) {}

  pointer allocate(size_type n) {
    return thrust::device_pointer_cast(static_cast<char*>(memory_.allocate(n, 256, stream_)));
  }
  void deallocate(pointer p, size_type n) noexcept {
    if (p.get() == nullptr) return;
    // Thrust's temporary buffers are freed from destructors: a refusal here is a devicekit bug,
    // never the caller's, and a throw would end the program.
    try {
      memory_.deallocate(thrust::raw_pointer_cast(p), n, 256, stream_);
    } catch (...) {}
  }

  [[nodiscard]] device_memory& memory() const noexcept { return memory_.pool(); }
  [[nodiscard]] native_stream_handle stream() const noexcept { return stream_; }

 private:
  client_memory memory_;  // two pointers: Thrust copies allocators in __host__ __device__ code
  native_stream_handle stream_;
};

/// thrust::cuda::par with its temporary memory from `memory`, on `s`.
[[nodiscard]] inline auto exec_policy(device_memory& memory, stream_ref s) {
  return thrust::cuda::par(thrust_temporary_allocator(memory, s)).on(s.native_handle());
}
/// thrust::cuda::par_nosync with its temporary memory from `memory`, on `s`: an algorithm that
/// need not return a value to the host does not synchronise the stream.
[[nodiscard]] inline auto exec_policy_nosync(device_memory& memory, stream_ref s) {
  return thrust::cuda::par_nosync(thrust_temporary_allocator(memory, s)).on(s.native_handle());
}

}  // namespace devicekit
