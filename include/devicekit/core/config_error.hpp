#pragma once
/// \file
/// `error`, the base of every devicekit exception, and `config_error`, the one core/device.hpp
/// throws (a device string it cannot parse). Apart from core/error.hpp, which holds the others
/// (cuda_error, device_mismatch, the checked CUDA call), so that the device type can throw without
/// including the exception that names devices.
#include <devicekit/core/config.hpp>

#include <stdexcept>

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

}  // namespace devicekit
