#pragma once
/// \file
/// The definitions behind distribute/errors.hpp: the message of a failed MPI or NCCL call.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/distribute/errors.hpp>

namespace devicekit {

DEVICEKIT_DECL std::string communication_error::format(std::string_view backend, std::string_view operation,
                                                       std::string_view call, int rank, int size, int code,
                                                       std::string_view detail) {
  std::string m;
  m.append(backend).append(" ").append(operation).append(": ").append(call).append(" failed on rank ");
  m.append(std::to_string(rank)).append(" of ").append(std::to_string(size)).append(" (code ");
  m.append(std::to_string(code)).append("): ").append(detail);
  return m;
}

}  // namespace devicekit
