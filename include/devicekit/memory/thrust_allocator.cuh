#pragma once
/// \file
/// `thrust_allocator<T>`: a Thrust allocator over a device_memory (RMM's thrust_allocator
/// pattern): `thrust::device_vector<float, dk::thrust_allocator<float>> v(n, dk::thrust_allocator<float>(dm.memory(dev)))`.
/// Allocation and free are ordered on the allocator's stream (the legacy default stream unless
/// one is given), so vectors freed while kernels still run on that stream are safe.
/// nvcc only (Thrust's device_ptr); host code uses pool_allocator (memory/allocator.hpp).
#include <devicekit/memory/device_memory.hpp>

#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>

#include <cstddef>
#include <limits>
#include <new>

namespace devicekit {

template <class T>
class thrust_allocator : public thrust::device_malloc_allocator<T> {
  using base = thrust::device_malloc_allocator<T>;

 public:
  using value_type = T;
  using pointer = typename base::pointer;
  using size_type = typename base::size_type;

  template <class U>
  struct rebind {
    using other = thrust_allocator<U>;
  };

  explicit thrust_allocator(device_memory& memory, native_stream_handle s = nullptr) noexcept
      : memory_(&memory), stream_(s) {}
  /// Allocations and frees in the order of `s` (devicekit's stream, or any wrapped one).
  thrust_allocator(device_memory& memory, stream_ref s) noexcept : memory_(&memory), stream_(s.native_handle()) {}
  template <class U>
  thrust_allocator(const thrust_allocator<U>& other) noexcept  // NOLINT: rebinding is implicit
      : memory_(other.memory()), stream_(other.stream()) {}

  pointer allocate(size_type n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return thrust::device_pointer_cast(static_cast<T*>(memory_->allocate_async(n * sizeof(T), 256, stream_)));
  }
  void deallocate(pointer p, size_type n) {
    memory_->deallocate_async(thrust::raw_pointer_cast(p), n * sizeof(T), 256, stream_);
  }

  [[nodiscard]] device_memory* memory() const noexcept { return memory_; }
  [[nodiscard]] native_stream_handle stream() const noexcept { return stream_; }

  friend bool operator==(const thrust_allocator& a, const thrust_allocator& b) noexcept {
    return a.memory_ == b.memory_ && a.stream_ == b.stream_;
  }

 private:
  device_memory* memory_;
  native_stream_handle stream_;
};

}  // namespace devicekit
