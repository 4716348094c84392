#pragma once
/// \file
/// What the host CPU is: logical cores, physical memory and model name (Linux: /proc/cpuinfo).
#include <devicekit/core/config.hpp>

#include <cstdint>
#include <string>

namespace devicekit {

struct host_info {
  std::string model_name;  ///< "unknown" where the OS does not say
  unsigned logical_cores = 1;
  std::uint64_t total_memory_bytes = 0;
};

/// The host as this process sees it; "unknown" model where /proc/cpuinfo does not say.
[[nodiscard]] DEVICEKIT_DECL host_info query_host();

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/detect/host.ipp>
#endif
