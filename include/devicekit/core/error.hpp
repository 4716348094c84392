#pragma once
/// \file
/// The exceptions devicekit throws and the checked-call helper for CUDA runtime calls. `error` and
/// `config_error` are in core/config_error.hpp (core/device.hpp throws config_error, and this file
/// needs `device` for device_mismatch); both are included here.
#include <devicekit/core/config.hpp>
#include <devicekit/core/config_error.hpp>  // IWYU pragma: export
#include <devicekit/core/device.hpp>        // IWYU pragma: export

#include <optional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace devicekit {

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
                            const std::source_location& where);

  int code_;
  std::string call_;
  std::string name_;
  std::source_location where_;
};

/// Trees, leaves or streams on different devices met in one operation. The message names both
/// devices (and the leaves, where leaves disagree); `expected()` and `actual()` carry them as
/// values, for code that handles the error (moves the tree, retries on another stream):
///   leaves or trees that disagree   expected: the first one's device, actual: the other's
///   a stream for another device     expected: the target device, actual: the stream's
///   place_view of device leaves     expected: cpu:0, actual: the leaves' device
/// Either is nullopt where the throw site does not know it (a device that is not among a
/// manager's devices has no single expected one).
class device_mismatch : public error {
 public:
  explicit device_mismatch(const std::string& what, std::optional<device> expected = std::nullopt,
                           std::optional<device> actual = std::nullopt)
      : error(what), expected_(expected), actual_(actual) {}

  /// The device the operation needed (or met first); nullopt when not known.
  [[nodiscard]] const std::optional<device>& expected() const noexcept { return expected_; }
  /// The device that did not match it; nullopt when not known.
  [[nodiscard]] const std::optional<device>& actual() const noexcept { return actual_; }

 private:
  std::optional<device> expected_;
  std::optional<device> actual_;
};

#if DEVICEKIT_HAS_CUDA
/// Throws cuda_error when `result` is not cudaSuccess. `call` is the call's text, for the message.
/// The error is also cleared from the runtime's per-thread "last error" so that it does not
/// reappear in an unrelated later check.
DEVICEKIT_DECL void check_cuda(cudaError_t result, std::string_view call,
                               std::source_location where = std::source_location::current());
#endif

}  // namespace devicekit

/// Checks a CUDA runtime call and throws devicekit::cuda_error naming the call as written and
/// this line. Where the call's arguments are devicekit's private members, devicekit calls
/// check_cuda with the call in its user's words instead ("cudaStreamSynchronize(stream)"), so
/// that a message names nothing a program cannot see.
#define DEVICEKIT_CUDA_CHECK(call) ::devicekit::check_cuda((call), #call)

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/error.ipp>
#endif
