#pragma once
/// \file
/// The definitions behind core/error.hpp: cuda_error's message and the checked CUDA call.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION
/// (core/config.hpp).
#include <devicekit/core/error.hpp>

#include <string>

namespace devicekit {

DEVICEKIT_DECL std::string cuda_error::format(int code, std::string_view call, std::string_view name,
                                              std::string_view description, const std::source_location& where) {
  std::string msg;
  msg.append(call).append(" failed: ").append(name).append(" (").append(std::to_string(code));
  msg.append("): ").append(description).append(" at ").append(where.file_name());
  msg.append(":").append(std::to_string(where.line()));
  return msg;
}

#if DEVICEKIT_HAS_CUDA
DEVICEKIT_DECL void check_cuda(cudaError_t result, std::string_view call, std::source_location where) {
  if (result == cudaSuccess) return;
  (void)cudaGetLastError();
  throw cuda_error(static_cast<int>(result), call, cudaGetErrorName(result), cudaGetErrorString(result), where);
}
#endif

}  // namespace devicekit
