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

#include <charconv>
#include <cstdint>
#include <limits>
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
[[nodiscard]] inline allocator_kind parse_allocator_kind(std::string_view text, std::string_view source = "allocator") {
  if (text == "pool" || text == "bfc" || text == "default") return allocator_kind::pool;
  if (text == "async" || text == "cuda_async") return allocator_kind::async;
  if (text == "platform") return allocator_kind::platform;
  throw config_error(std::string(source) + "='" + std::string(text) +
                     "' is not a valid allocator; allowed values: pool (devicekit's caching pool, the default), "
                     "async (cudaMallocAsync per allocation), platform (cudaMalloc per allocation)");
}

/// Parses a byte count: digits with an optional binary suffix `KiB`, `MiB` or `GiB` (also `K`,
/// `M`, `G`). config_error names `source` and the accepted forms.
[[nodiscard]] inline std::uint64_t parse_byte_size(std::string_view text, std::string_view source = "size") {
  auto fail = [&]() -> std::uint64_t {
    throw config_error(std::string(source) + "='" + std::string(text) +
                       "' is not a byte size; write a whole number of bytes, optionally with KiB, MiB or GiB "
                       "(e.g. 268435456 or 256MiB)");
  };
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end == text.data()) return fail();
  const std::string_view suffix(end, static_cast<std::size_t>(text.data() + text.size() - end));
  unsigned shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else {
    return fail();
  }
  if (shift > 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift)) return fail();
  return value << shift;
}

}  // namespace devicekit
