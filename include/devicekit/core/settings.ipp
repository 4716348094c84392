#pragma once
/// \file
/// The definitions behind core/settings.hpp: parsing the environment and the platform list.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/settings.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace devicekit {

DEVICEKIT_DECL device_preference parse_device_preference(std::string_view text, std::string_view source) {
  if (text == "auto" || text.empty()) return device_preference::automatic;
  if (text == "cuda" || text == "gpu") return device_preference::cuda;
  if (text == "cpu") return device_preference::cpu;
  throw config_error(std::string(source) + "='" + std::string(text) +
                     "' is not a valid device preference; allowed values: auto, cuda, cpu");
}

DEVICEKIT_DECL std::vector<device_kind> parse_platform_list(std::string_view text, std::string_view source) {
  std::vector<device_kind> out;
  auto fail = [&](const std::string& why) {
    throw config_error(std::string(source) + "='" + std::string(text) + "': " + why + "; valid platform names: " +
                       std::string(valid_platform_names) + ", comma-separated in priority order (e.g. cuda,cpu)");
  };
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view name = text.substr(pos, comma - pos);
    while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.remove_prefix(1);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    device_kind kind{};
    if (name == "cuda" || name == "gpu") {
      kind = device_kind::cuda;
    } else if (name == "cpu") {
      kind = device_kind::cpu;
    } else if (name.empty()) {
      fail(text.empty() ? "the platform list is empty" : "the platform list has an empty entry");
    } else {
      fail("'" + std::string(name) + "' is not a platform");
    }
    for (const auto k : out) {
      if (k == kind) fail("platform '" + std::string(to_string(kind)) + "' is listed twice");
    }
    out.push_back(kind);
    pos = comma + 1;
  }
  return out;
}

DEVICEKIT_DECL std::string format_platform_list(const std::vector<device_kind>& platforms) {
  std::string s;
  // Appended piece by piece: `const char* + std::string&&` trips g++ 12's -Wrestrict false
  // positive at -O3 (GCC bug 105329).
  for (const auto k : platforms) {
    if (!s.empty()) s += ',';
    s += to_string(k);
  }
  return s;
}

namespace detail {
DEVICEKIT_DECL std::optional<std::string> getenv_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}
}  // namespace detail

DEVICEKIT_DECL settings settings::from_environment() { return settings{}.with_environment(); }

DEVICEKIT_DECL settings settings::with_environment() const {
  settings s = *this;
  if (!use_environment_) return s;
  s.use_environment_ = false;
  // Only the variables of fields code left unset are read: code wins, whatever the variable says.
  if (!s.prefer_) {
    if (auto p = detail::getenv_string("DEVICEKIT_PREFER")) {
      s.set_prefer(parse_device_preference(*p, "DEVICEKIT_PREFER"));
    }
  }
  if (!s.device_) {
    if (auto d = detail::getenv_string("DEVICEKIT_DEVICE"); d && !d->empty()) {
      try {
        s.set_device(device::parse(*d));
      } catch (const config_error& e) {
        throw config_error(std::string("DEVICEKIT_DEVICE: ") + e.what());
      }
    }
  }
  s.read_memory_environment();
  if (!s.platforms_) {
    if (auto p = detail::getenv_string("DEVICEKIT_PLATFORMS")) {
      s.set_platforms(parse_platform_list(*p, "DEVICEKIT_PLATFORMS"));
      s.platforms_source_ = "DEVICEKIT_PLATFORMS";
    }
  }
  if (!s.nvml_library_) {
    if (auto lib = detail::getenv_string("DEVICEKIT_NVML_LIBRARY"); lib && !lib->empty()) {
      s.set_nvml_library(*lib);
    }
  }
  return s;
}

DEVICEKIT_DECL settings& settings::set_platforms(std::vector<device_kind> platforms) {
  if (platforms.empty())
    throw config_error("set_platforms: the platform list is empty; valid platform names: " +
                       std::string(valid_platform_names));
  (void)parse_platform_list(format_platform_list(platforms), "set_platforms");  // rejects repeats
  platforms_ = std::move(platforms);
  platforms_source_ = "settings";
  return *this;
}

DEVICEKIT_DECL std::vector<std::string> settings::apply_environment() const {
  std::vector<std::string> applied;
  for (const auto& [name, value] : environment_) {
    if (::setenv(name.c_str(), value.c_str(), 1) == 0) applied.push_back(name);
  }
  return applied;
}

DEVICEKIT_DECL void settings::read_memory_environment() {
  if (!allocator_) {
    if (auto a = detail::getenv_string("DEVICEKIT_ALLOCATOR"); a && !a->empty()) {
      set_allocator(parse_allocator_kind(*a, "DEVICEKIT_ALLOCATOR"));
    }
  }
  if (!collective_memory_size_) {
    if (auto c = detail::getenv_string("DEVICEKIT_COLLECTIVE_MEMORY_SIZE"); c && !c->empty()) {
      set_collective_memory_size(parse_byte_size(*c, "DEVICEKIT_COLLECTIVE_MEMORY_SIZE"));
    }
  }
}

}  // namespace devicekit
