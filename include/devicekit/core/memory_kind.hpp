#pragma once
/// \file
/// `memory_kind`: which memory of a device an allocation or a placed tree lives in, as jaxlib
/// names the memory spaces of a device (JAX documentation, "Memories and host offloading":
/// `device`, `pinned_host`, `unpinned_host`; `jax.Device.addressable_memories()`):
///   device        the device's own memory (HBM on a GPU; host memory for cpu devices)
///   pinned_host   page-locked host memory that the device reads and writes directly and that
///                 copies to and from the device use at full speed (cudaMallocHost); leaves placed
///                 there still belong to the device, as arrays in JAX's pinned_host space do
///   host          ordinary (pageable) host memory, jaxlib's `unpinned_host`
#include <devicekit/core/error.hpp>

#include <string>
#include <string_view>

namespace devicekit {

enum class memory_kind { device, pinned_host, host };

[[nodiscard]] constexpr std::string_view to_string(memory_kind k) noexcept {
  switch (k) {
    case memory_kind::device: return "device";
    case memory_kind::pinned_host: return "pinned_host";
    case memory_kind::host: return "host";
  }
  return "unknown";
}

/// Parses "device", "pinned_host", "host" (and jaxlib's spelling "unpinned_host" for host).
[[nodiscard]] DEVICEKIT_DECL memory_kind parse_memory_kind(std::string_view s);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/memory_kind.ipp>
#endif
