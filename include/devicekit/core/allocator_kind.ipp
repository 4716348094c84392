#pragma once
/// \file
/// The definitions behind core/allocator_kind.hpp: parsing allocator names and byte sizes. Inline
/// in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/allocator_kind.hpp>

#include <charconv>
#include <limits>
#include <string>
#include <system_error>

namespace devicekit {

DEVICEKIT_DECL allocator_kind parse_allocator_kind(std::string_view text, std::string_view source) {
  if (text == "pool" || text == "bfc" || text == "default") return allocator_kind::pool;
  if (text == "async" || text == "cuda_async") return allocator_kind::async;
  if (text == "platform") return allocator_kind::platform;
  throw config_error(std::string(source) + "='" + std::string(text) +
                     "' is not a valid allocator; allowed values: pool (devicekit's caching pool, the default), "
                     "async (cudaMallocAsync per allocation), platform (cudaMalloc per allocation)");
}

DEVICEKIT_DECL std::uint64_t parse_byte_size(std::string_view text, std::string_view source) {
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
