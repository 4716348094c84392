#pragma once
/// \file
/// `pool_allocator<T>`: a standard allocator over a device_memory, for containers whose elements
/// the host touches: `std::vector<float, dk::pool_allocator<float>> v(n, dk::pool_allocator<float>(dm.memory(dk::device::cpu())))`.
/// Allocators on the same pool compare equal (memory from one can be freed by the other).
/// For `thrust::device_vector` use `thrust_allocator` (memory/thrust_allocator.cuh), whose
/// pointers are thrust::device_ptr.
#include <devicekit/memory/device_memory.hpp>

#include <cstddef>
#include <limits>
#include <new>

namespace devicekit {

template <class T>
class pool_allocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  explicit pool_allocator(device_memory& memory) noexcept : memory_(&memory) {}
  template <class U>
  pool_allocator(const pool_allocator<U>& other) noexcept : memory_(other.memory()) {}  // NOLINT: rebinding is implicit

  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(memory_->allocate(n * sizeof(T), alignof(T) > 256 ? alignof(T) : 256));
  }
  void deallocate(T* p, std::size_t n) { memory_->deallocate(p, n * sizeof(T), alignof(T) > 256 ? alignof(T) : 256); }

  [[nodiscard]] device_memory* memory() const noexcept { return memory_; }

  template <class U>
  friend bool operator==(const pool_allocator& a, const pool_allocator<U>& b) noexcept {
    return a.memory() == b.memory();
  }

 private:
  device_memory* memory_;
};

}  // namespace devicekit
