#pragma once
/// \file
/// The definitions behind detect/host.hpp: reading the host's cores, memory and CPU model.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION
/// (core/config.hpp).
#include <devicekit/detect/host.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>

namespace devicekit {

DEVICEKIT_DECL host_info query_host() {
  host_info h;
  h.logical_cores = std::max(1u, std::thread::hardware_concurrency());
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    h.total_memory_bytes = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
  }
  h.model_name = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      if (auto colon = line.find(':'); colon != std::string::npos) {
        auto first = line.find_first_not_of(" \t", colon + 1);
        if (first != std::string::npos) h.model_name = line.substr(first);
      }
      break;
    }
  }
  return h;
}

}  // namespace devicekit
