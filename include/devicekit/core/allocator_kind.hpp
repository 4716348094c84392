#pragma once
/// \file
/// `allocator_kind`: which allocator serves a GPU's memory, chosen at run time as jaxlib's
/// GpuAllocatorConfig chooses it (XLA_PYTHON_CLIENT_ALLOCATOR=bfc|cuda_async|platform):
///   pool      devicekit's caching pool over a driver pool of its own (the default; jaxlib's "bfc")
///   async     no caching: every allocation is cudaMallocAsync from the device's current memory
///             pool, its default pool unless the program called cudaDeviceSetMemPool (jaxlib's
///             "cuda_async")
///   platform  no caching: every allocation is cudaMalloc, every free cudaFree (jaxlib's
///             "platform"; slow, for debugging memory use)
/// Also the byte-size parser the memory settings use ("512MiB", "1GiB", "4096").
#include <devicekit/core/error.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace devicekit {

enum class allocator_kind { pool, async, platform };

[[nodiscard]] constexpr std::string_view to_string(allocator_kind k) noexcept {
  switch (k) {
    case allocator_kind::async: return "async";
    case allocator_kind::platform: return "platform";
    default: return "pool";
  }
}

/// Parses `pool`, `async` and `platform` (and jaxlib's names `bfc`, `cuda_async`). `source` names
/// where the text came from (for example "DEVICEKIT_ALLOCATOR").
[[nodiscard]] DEVICEKIT_DECL allocator_kind parse_allocator_kind(std::string_view text,
                                                                 std::string_view source = "allocator");

/// Parses a byte count: digits with an optional binary suffix `KiB`, `MiB` or `GiB` (also `K`,
/// `M`, `G`). config_error names `source` and the accepted forms.
[[nodiscard]] DEVICEKIT_DECL std::uint64_t parse_byte_size(std::string_view text, std::string_view source = "size");

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/allocator_kind.ipp>
#endif
