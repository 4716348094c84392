// parse_byte_size, the parser behind DEVICEKIT_COLLECTIVE_MEMORY_SIZE: a whole number of bytes
// with an optional binary suffix (K or KiB, M or MiB, G or GiB), at most 2^64 - 1 bytes.
#include "fuzz_check.hpp"

#include <devicekit/core/allocator_kind.hpp>

#include <limits>

namespace {

namespace dk = devicekit;

/// The documented grammar and range, computed in 128 bits so that an overflow cannot hide.
std::optional<std::uint64_t> reference(std::string_view text) {
  std::size_t i = 0;
  unsigned __int128 value = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = value * 10 + static_cast<unsigned>(text[i] - '0');
    if (value > std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
    ++i;
  }
  if (i == 0) return std::nullopt;
  const std::string_view suffix = text.substr(i);
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
    return std::nullopt;
  }
  value <<= shift;
  if (value > std::numeric_limits<std::uint64_t>::max()) return std::nullopt;
  return static_cast<std::uint64_t>(value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::text_of(data, size);
  const auto got = fuzz::value_or_config_error([&] { return dk::parse_byte_size(text, "FUZZ_SIZE"); }, "FUZZ_SIZE");
  const auto want = reference(text);
  fuzz::check(got.has_value() == want.has_value(),
              got ? "parse_byte_size accepted a text outside the documented grammar or range"
                  : "parse_byte_size refused a documented byte size",
              text);
  if (got) fuzz::check(*got == *want, "parse_byte_size read another number of bytes", text);
  return 0;
}
