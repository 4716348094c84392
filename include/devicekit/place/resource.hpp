#pragma once
/// \file
/// What placement allocates from. `placement_resource` is any type with
///   void* allocate(std::size_t bytes, std::size_t alignment);
///   void  deallocate(void* p, std::size_t bytes, std::size_t alignment);
/// the shape of `cuda::mr` resources and of devicekit's memory layer (`dm.memory(device)`), so
/// placement works with either. The memory of a placed tree goes back through `deallocate` when
/// the last leaf that shares it is destroyed: the resource must outlive the placed tree.
///
/// `default_placement_resource(device)` is what placement uses when given none: a caching host
/// pool for cpu devices, a devicekit pool (memory/pool.hpp) for each cuda device, whose
/// `device_pool()` gives its stats (both in place/detail/resources.hpp).
#include <devicekit/core/device.hpp>
#include <devicekit/place/detail/resources.hpp>

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

/// The resource placement uses for `dev` when none is given. Lives until the process exits.
[[nodiscard]] inline detail::any_placement_resource& default_placement_resource(device dev) {
  return detail::default_resource_for(dev);
}

static_assert(placement_resource<detail::any_placement_resource>);
static_assert(placement_resource<detail::host_pool>);

}  // namespace devicekit
