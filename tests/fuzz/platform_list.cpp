// parse_platform_list, the parser behind DEVICEKIT_PLATFORMS and devicekit-info's --platforms: a
// comma-separated priority of cuda (or gpu) and cpu, spaces and tabs around a name ignored; an
// empty list, an empty entry, an unknown name or a platform named twice is a config_error.
#include "fuzz_check.hpp"

#include <devicekit/core/settings.hpp>

#include <vector>

namespace {

namespace dk = devicekit;

std::optional<std::vector<dk::device_kind>> reference(std::string_view text) {
  std::vector<dk::device_kind> out;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = text.find(',', begin);
    std::string_view name =
        text.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin);
    const auto blank = [](char c) { return c == ' ' || c == '\t'; };
    while (!name.empty() && blank(name.front())) name.remove_prefix(1);
    while (!name.empty() && blank(name.back())) name.remove_suffix(1);
    dk::device_kind k{};
    if (name == "cuda" || name == "gpu") {
      k = dk::device_kind::cuda;
    } else if (name == "cpu") {
      k = dk::device_kind::cpu;
    } else {
      return std::nullopt;  // unknown or empty
    }
    for (const auto seen : out) {
      if (seen == k) return std::nullopt;
    }
    out.push_back(k);
    if (comma == std::string_view::npos) return out;
    begin = comma + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::text_of(data, size);
  const auto got =
      fuzz::value_or_config_error([&] { return dk::parse_platform_list(text, "FUZZ_PLATFORMS"); }, "FUZZ_PLATFORMS");
  const auto want = reference(text);
  fuzz::check(got.has_value() == want.has_value(),
              got ? "parse_platform_list accepted a list outside the documented form"
                  : "parse_platform_list refused a documented list",
              text);
  if (!got) return 0;
  fuzz::check(*got == *want, "parse_platform_list read another list", text);
  // An accepted list is one settings takes, and its written form reads back the same.
  dk::settings s;
  s.set_platforms(*got);
  fuzz::check(s.get_platforms() == *got, "settings::set_platforms changed the list");
  fuzz::check(dk::parse_platform_list(dk::format_platform_list(*got)) == *got,
              "parse_platform_list(format_platform_list(list)) is not the list", dk::format_platform_list(*got));
  return 0;
}
