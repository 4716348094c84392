#pragma once
/// \file
/// The exceptions devicekit throws and the checked-call helper for CUDA runtime calls.
#include <devicekit/core/config.hpp>

#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace devicekit {

/// Base of every devicekit exception: catch this to catch them all.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A configuration value was wrong (an environment variable, a fraction, a device string).
/// The message says what was given and what is allowed.
class config_error : public error {
 public:
  using error::error;
};

/// A CUDA runtime call failed. Carries the call as written, the error's name and the caller's
/// source location so that a log line points at the code, not at devicekit.
class cuda_error : public error {
 public:
  cuda_error(int code, std::string_view call, std::string_view name, std::string_view description,
             std::source_location where = std::source_location::current())
      : error(format(code, call, name, description, where)), code_(code), call_(call), name_(name), where_(where) {}

  [[nodiscard]] int code() const noexcept { return code_; }
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  [[nodiscard]] const std::string& error_name() const noexcept { return name_; }
  [[nodiscard]] const std::source_location& where() const noexcept { return where_; }

 private:
  static std::string format(int code, std::string_view call, std::string_view name, std::string_view description,
                            const std::source_location& where) {
    std::string msg;
    msg.append(call).append(" failed: ").append(name).append(" (").append(std::to_string(code));
    msg.append("): ").append(description).append(" at ").append(where.file_name());
    msg.append(":").append(std::to_string(where.line()));
    return msg;
  }

  int code_;
  std::string call_;
  std::string name_;
  std::source_location where_;
};

#if DEVICEKIT_HAS_CUDA
/// Throws cuda_error when `result` is not cudaSuccess. `call` is the call's text, for the message.
/// The error is also cleared from the runtime's per-thread "last error" so that it does not
/// reappear in an unrelated later check.
inline void check_cuda(cudaError_t result, std::string_view call,
                       std::source_location where = std::source_location::current()) {
  if (result == cudaSuccess) return;
  (void)cudaGetLastError();
  throw cuda_error(static_cast<int>(result), call, cudaGetErrorName(result), cudaGetErrorString(result), where);
}
#endif

}  // namespace devicekit

/// Checks a CUDA runtime call and throws devicekit::cuda_error naming the call and this line.
#define DEVICEKIT_CUDA_CHECK(call) ::devicekit::check_cuda((call), #call)
