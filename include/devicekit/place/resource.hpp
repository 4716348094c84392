#pragma once
/// \file
/// What placement allocates from. `placement_resource` is any type with
///   void* allocate(std::size_t bytes, std::size_t alignment);
///   void  deallocate(void* p, std::size_t bytes, std::size_t alignment);
/// the shape of `cuda::mr` resources and of devicekit's memory layer (`dm.memory(device)`), so
/// placement works with either. The memory of a placed tree goes back through `deallocate` when
/// the last leaf that shares it is destroyed: the resource must outlive the placed tree.
///
/// `default_placement_resource(device[, kind])` is what placement uses when given none: the
/// process's pool of that device and memory kind (default_memory, memory/registry.hpp), whose
/// `stats()` and `live_allocations()` see the placements.
#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/registry.hpp>

#include <concepts>
#include <cstddef>

namespace devicekit {

template <class R>
concept placement_resource = requires(R& r, void* p, std::size_t bytes, std::size_t alignment) {
  { r.allocate(bytes, alignment) } -> std::convertible_to<void*>;
  r.deallocate(p, bytes, alignment);
};

/// The alignment of every placed leaf (and of every block placement allocates): what cudaMalloc
/// gives, and enough for any vector load.
inline constexpr std::size_t placement_alignment = 256;

/// The resource placement uses for `dev` (and memory `kind`) when none is given: the process's
/// pool (default_memory). Lives until the process exits. config_error for a device this process
/// does not have (core/detail/device_exists.hpp), before any pool is made for it.
[[nodiscard]] inline device_memory& default_placement_resource(device dev, memory_kind kind = memory_kind::device) {
  detail::check_device_exists(dev, "place");
  return default_memory(dev, kind);
}

static_assert(placement_resource<device_memory>);

}  // namespace devicekit
