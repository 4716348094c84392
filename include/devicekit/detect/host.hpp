#pragma once
/// \file
/// What the host CPU is: logical cores, physical memory and model name (Linux: /proc/cpuinfo).
#include <devicekit/core/config.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>

namespace devicekit {

struct host_info {
  std::string model_name;  ///< "unknown" where the OS does not say
  unsigned logical_cores = 1;
  std::uint64_t total_memory_bytes = 0;
};

[[nodiscard]] inline host_info query_host() {
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
