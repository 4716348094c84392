#pragma once
/// \file
/// The host upstream resource (see memory/resources.hpp for what an upstream is):
///   host_resource   aligned operator new: lets the whole pool run, be tested and be benchmarked
///                   on a machine without a GPU
#include <devicekit/memory/resource_concepts.hpp>

#include <devicekit/core/device.hpp>

#include <cstddef>
#include <new>

namespace devicekit {

/// Host memory from aligned operator new. Stateless: all instances are equal.
class host_resource {
 public:
  static constexpr bool is_host_accessible = true;
  static constexpr bool is_device_accessible = false;

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = alignof(std::max_align_t)) {
    detail::check_alignment(alignment);
    return ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{alignment});
  }
  void deallocate(void* p, std::size_t /*bytes*/, std::size_t alignment = alignof(std::max_align_t)) noexcept {
    ::operator delete (p, std::align_val_t{alignment});
  }
  [[nodiscard]] device get_device() const noexcept { return device::cpu(); }
  friend bool operator==(const host_resource&, const host_resource&) noexcept { return true; }

#if DEVICEKIT_HAS_CCCL_MR
  friend constexpr void get_property(const host_resource&, ::cuda::mr::host_accessible) noexcept {}
#endif
};

}  // namespace devicekit
