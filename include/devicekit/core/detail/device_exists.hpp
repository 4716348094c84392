#pragma once
/// \file
/// Whether a device exists in this process: the one check behind every public call that takes a
/// device (place, replicate, shard, prefetch, streams, synchronize, the manager's calls, ...), so
/// that a device the process does not have is the same config_error at every door, saying how
/// many CUDA devices the process sees. cpu devices always exist (every cpu ordinal is the host).
///
/// The number of CUDA devices is asked once per process (cudaGetDeviceCount) and kept: the CUDA
/// runtime fixes the devices a process sees when it initialises (CUDA_VISIBLE_DEVICES is read then;
/// CUDA C Programming Guide, "CUDA Environment Variables"), so the answer cannot change later. A
/// check of a device that exists costs an atomic load and a compare, and no CUDA call after the
/// first, which keeps placement's CUDA calls those of the hand-written code.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>

namespace devicekit::detail {

/// The number of CUDA devices this process sees, once known; -1 before the first question.
inline std::atomic<int> known_cuda_device_count{-1};

/// The number of CUDA devices this process sees: 0 without a driver or a device, and in a build
/// without CUDA. cudaGetDeviceCount is called the first time only. A failure other than "no
/// driver" or "no device" is a cuda_error and is not kept (the next call asks again).
[[nodiscard]] DEVICEKIT_DECL int cuda_device_count();

/// Whether `dev` is a device of this process: a cpu device, or a cuda ordinal in [0, count).
[[nodiscard]] inline bool device_exists(device dev) {
  if (dev.is_cpu()) return true;
  const int known = known_cuda_device_count.load(std::memory_order_relaxed);
  if (dev.ordinal() >= 0 && dev.ordinal() < known) [[likely]]
    return true;
  return dev.ordinal() >= 0 && dev.ordinal() < cuda_device_count();
}

/// Why the CUDA runtime lists no device, from the error cudaGetDeviceCount returned (its name:
/// "cudaErrorInsufficientDriver", "cudaErrorNoDevice"; empty when it succeeded with 0) and the
/// CUDA_VISIBLE_DEVICES the runtime started with (nullopt: unset), with what to do. The hint about
/// CUDA_VISIBLE_DEVICES is given only where that variable can be the cause: with no driver it is
/// not read at all.
[[nodiscard]] DEVICEKIT_DECL std::string explain_zero_cuda_devices(std::string_view error_name,
                                                                   const std::optional<std::string>& visible_devices);

/// The error for `dev`, which this process does not have: "`operation`: cuda:63 does not exist:
/// this process sees 2 CUDA devices, cuda:0 to cuda:1 (CUDA_VISIBLE_DEVICES chooses which)";
/// when it sees none, the runtime's reason (explain_zero_cuda_devices), and in a build without
/// CUDA, that.
[[nodiscard]] DEVICEKIT_DECL config_error missing_device_error(device dev, std::string_view operation);

/// Throws missing_device_error unless `dev` exists in this process.
[[gnu::cold]] DEVICEKIT_DECL void check_device_exists_slow(device dev, std::string_view operation);

/// config_error (missing_device_error) unless `dev` is a device of this process. Inline: for a
/// device that exists, a load and a compare.
inline void check_device_exists(device dev, std::string_view operation) {
  if (dev.is_cpu()) return;
  const int known = known_cuda_device_count.load(std::memory_order_relaxed);
  if (dev.ordinal() >= 0 && dev.ordinal() < known) [[likely]]
    return;
  check_device_exists_slow(dev, operation);
}

/// check_device_exists for each of `devices`.
template <class Devices>
void check_devices_exist(const Devices& devices, std::string_view operation) {
  for (const device d : devices) check_device_exists(d, operation);
}

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/detail/device_exists.ipp>
#endif
