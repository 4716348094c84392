#pragma once
/// \file
/// The definitions behind core/device.hpp: parsing `cuda:1`. Inline in a header-only build;
/// compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/device.hpp>

#include <charconv>
#include <string>
#include <system_error>

namespace devicekit {

DEVICEKIT_DECL device device::parse(std::string_view text) {
  auto fail = [&](std::string_view why) -> device {
    throw config_error("cannot parse device '" + std::string(text) + "': " + std::string(why) +
                       "; expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N' with N >= 0");
  };
  const auto colon = text.find(':');
  const std::string_view kind_text = text.substr(0, colon);
  device_kind kind{};
  if (kind_text == "cpu") {
    kind = device_kind::cpu;
  } else if (kind_text == "cuda" || kind_text == "gpu") {
    kind = device_kind::cuda;
  } else {
    return fail("unknown device kind '" + std::string(kind_text) + "'");
  }
  if (colon == std::string_view::npos) return {kind, 0};
  const std::string_view number = text.substr(colon + 1);
  int ordinal = -1;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), ordinal);
  if (number.empty() || ec != std::errc{} || end != number.data() + number.size() || ordinal < 0) {
    return fail("the ordinal '" + std::string(number) + "' is not a non-negative integer");
  }
  return {kind, ordinal};
}

}  // namespace devicekit
