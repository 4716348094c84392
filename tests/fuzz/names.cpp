// The parsers of one-word settings: parse_device_preference (DEVICEKIT_PREFER, devicekit-info's
// --prefer), parse_allocator_kind (DEVICEKIT_ALLOCATOR) and parse_memory_kind (the memory kinds
// of place and of a pool). Each is a plain lookup, so one target serves all three: the first
// byte of the input picks the parser, the rest is the text.
#include "fuzz_check.hpp"

#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/core/settings.hpp>

namespace {

namespace dk = devicekit;

std::optional<dk::device_preference> preference(std::string_view t) {
  if (t.empty() || t == "auto") return dk::device_preference::automatic;
  if (t == "cuda" || t == "gpu") return dk::device_preference::cuda;
  if (t == "cpu") return dk::device_preference::cpu;
  return std::nullopt;
}

std::optional<dk::allocator_kind> allocator(std::string_view t) {
  if (t == "pool" || t == "bfc" || t == "default") return dk::allocator_kind::pool;
  if (t == "async" || t == "cuda_async") return dk::allocator_kind::async;
  if (t == "platform") return dk::allocator_kind::platform;
  return std::nullopt;
}

std::optional<dk::memory_kind> memory(std::string_view t) {
  if (t == "device") return dk::memory_kind::device;
  if (t == "pinned_host") return dk::memory_kind::pinned_host;
  if (t == "host" || t == "unpinned_host") return dk::memory_kind::host;
  return std::nullopt;
}

template <class Got, class Want>
void compare(const Got& got, const Want& want, std::string_view text) {
  fuzz::check(got.has_value() == want.has_value(),
              got ? "a name outside the documented ones was accepted" : "a documented name was refused", text);
  if (got) fuzz::check(*got == *want, "a name was read as another value", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text = fuzz::text_of(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      compare(
          fuzz::value_or_config_error([&] { return dk::parse_device_preference(text, "FUZZ_PREFER"); }, "FUZZ_PREFER"),
          preference(text), text);
      break;
    case 1:
      compare(fuzz::value_or_config_error([&] { return dk::parse_allocator_kind(text, "FUZZ_ALLOCATOR"); },
                                          "FUZZ_ALLOCATOR"),
              allocator(text), text);
      break;
    default:
      compare(fuzz::value_or_config_error([&] { return dk::parse_memory_kind(text); }, "memory kind"), memory(text),
              text);
      break;
  }
  return 0;
}
