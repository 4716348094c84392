#pragma once
/// \file
/// The exceptions devicekit throws and the checked-call helper for CUDA runtime calls.
#include <devicekit/core/config.hpp>

#include <optional>
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
                            const std::source_location& where);

  int code_;
  std::string call_;
  std::string name_;
  std::source_location where_;
};

class device;  // core/device.hpp, which includes this file for config_error

namespace detail {
/// device_mismatch's class. A template only so that this file need not include core/device.hpp
/// (which throws config_error, declared above): `Device` is complete wherever the class is used.
template <class Device>
class basic_device_mismatch : public error {
 public:
  explicit basic_device_mismatch(const std::string& what, std::optional<Device> expected = std::nullopt,
                                 std::optional<Device> actual = std::nullopt)
      : error(what), expected_(expected), actual_(actual) {}

  /// The device the operation needed (or met first); nullopt when not known.
  [[nodiscard]] const std::optional<Device>& expected() const noexcept { return expected_; }
  /// The device that did not match it; nullopt when not known.
  [[nodiscard]] const std::optional<Device>& actual() const noexcept { return actual_; }

 private:
  std::optional<Device> expected_;
  std::optional<Device> actual_;
};
}  // namespace detail

/// Trees, leaves or streams on different devices met in one operation. The message names both
/// devices (and the leaves, where leaves disagree); `expected()` and `actual()` carry them as
/// values, for code that handles the error (moves the tree, retries on another stream):
///   leaves or trees that disagree   expected: the first one's device, actual: the other's
///   a stream for another device     expected: the target device, actual: the stream's
///   place_view of device leaves     expected: cpu:0, actual: the leaves' device
/// Either is nullopt where the throw site does not know it (a device that is not among a
/// manager's devices has no single expected one).
using device_mismatch = detail::basic_device_mismatch<device>;

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

// device_mismatch needs `device` complete where it is used. core/device.hpp throws config_error,
// so it includes this file; included here, after config_error, it completes `device` for users of
// this file whichever of the two comes first.
#include <devicekit/core/device.hpp>  // IWYU pragma: export

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/error.ipp>
#endif
