#pragma once
/// \file
/// The definitions behind core/memory_kind.hpp: parsing a memory kind. Inline in a header-only
/// build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/memory_kind.hpp>

#include <string>

namespace devicekit {

DEVICEKIT_DECL memory_kind parse_memory_kind(std::string_view s) {
  if (s == "device") return memory_kind::device;
  if (s == "pinned_host") return memory_kind::pinned_host;
  if (s == "host" || s == "unpinned_host") return memory_kind::host;
  throw config_error("memory kind '" + std::string(s) +
                     "' is not valid; allowed values: device, pinned_host, host "
                     "(or unpinned_host)");
}

}  // namespace devicekit
