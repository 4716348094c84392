#pragma once
/// \file
/// Environment variables that a manager's settings set (settings::set_environment_variable), and
/// whether they can still take effect. The CUDA runtime and driver read their variables
/// (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, CUDA_MODULE_LOADING, ...: CUDA Programming Guide,
/// "CUDA Environment Variables") once, when they initialise; a later setenv changes nothing for
/// this process. devicekit notes the CUDA_* environment when its detection first calls the
/// runtime, so a manager made after that can tell which of its variables come too late. Without a
/// usable driver (cudaErrorInsufficientDriver) the runtime does not start, and nothing is noted:
/// no CUDA code runs in the process, so no variable comes too late. (When the program itself
/// called CUDA before devicekit did, that earlier start goes unseen.)
#include <devicekit/core/config.hpp>
#include <devicekit/core/settings.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace devicekit {

/// What applying a settings' environment variables did.
struct environment_outcome {
  std::vector<std::string> applied;  ///< set, and in effect for what reads them from now on
  /// Set, but the CUDA runtime had already started with another value, which it keeps. Each
  /// entry: "NAME=value (the runtime started with ...)".
  std::vector<std::string> too_late;
};

namespace detail {

/// The CUDA_* variables of the process now (name -> value; unset ones absent).
[[nodiscard]] DEVICEKIT_DECL std::map<std::string, std::string> cuda_environment_now();

/// Notes `variables` as the CUDA_* environment the runtime started with; the first call counts,
/// later ones do nothing. The CUDA probe takes them just before its first runtime call, and notes
/// them once the call shows that the runtime started.
DEVICEKIT_DECL void note_cuda_start_environment(std::map<std::string, std::string> variables);
/// The same with the variables of the process now.
DEVICEKIT_DECL void note_cuda_start_environment();

/// The CUDA_* variables (name -> value; unset ones absent) noted at the runtime's start, or
/// nullopt when devicekit has not started it (or it could not start: no usable driver).
[[nodiscard]] DEVICEKIT_DECL std::optional<std::map<std::string, std::string>> cuda_start_environment();

}  // namespace detail

/// Sets the variables of `s` (overwriting) and says which come too late for the CUDA runtime; each
/// of those is also printed to stderr as a warning, since the program asked for a setting
/// that will not hold.
DEVICEKIT_DECL environment_outcome apply_environment_before_detection(const settings& s);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/detect/start_environment.ipp>
#endif
