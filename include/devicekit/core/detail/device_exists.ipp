#pragma once
/// \file
/// The definitions behind core/detail/device_exists.hpp: the process's CUDA device count, asked once, and
/// the error for a device the process does not have. Inline in a header-only build; compiled once
/// under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/detail/device_exists.hpp>

#include <cstdlib>
#include <mutex>
#include <string>

namespace devicekit::detail {

/// What cudaGetDeviceCount answered, kept with the reason when it found none.
struct cuda_census {
  std::mutex mutex;
  bool known = false;
  int count = 0;
  std::string why;  ///< with no device, why (explain_zero_cuda_devices); else empty
};

/// The process's census (never destroyed: a check may run from a static destructor).
DEVICEKIT_DECL cuda_census& census() {
  static auto* c = new cuda_census();
  return *c;
}

DEVICEKIT_DECL int cuda_device_count() {
  cuda_census& c = census();
  std::lock_guard lock(c.mutex);
  if (c.known) return c.count;
#if DEVICEKIT_HAS_CUDA
  int count = 0;
  const cudaError_t r = cudaGetDeviceCount(&count);
  if (r == cudaErrorNoDevice || r == cudaErrorInsufficientDriver) {
    // Neither changes during the process: kept as 0 devices, with the reason for the message.
    (void)cudaGetLastError();
    count = 0;
  } else {
    check_cuda(r, "cudaGetDeviceCount");
  }
  if (count == 0) {
    // The runtime read CUDA_VISIBLE_DEVICES when it started, just now: the value it used.
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    c.why = explain_zero_cuda_devices(r == cudaSuccess ? "" : cudaGetErrorName(r),
                                      visible ? std::optional<std::string>(visible) : std::nullopt);
  }
  c.count = count;
#else
  c.count = 0;
#endif
  c.known = true;
  known_cuda_device_count.store(c.count, std::memory_order_relaxed);
  return c.count;
}

DEVICEKIT_DECL std::string explain_zero_cuda_devices(std::string_view error_name,
                                                     const std::optional<std::string>& visible_devices) {
  const std::string call = "cudaGetDeviceCount returned " + std::string(error_name);
  if (error_name == "cudaErrorInsufficientDriver") {
    // The runtime found no driver it can use, so it never got to the devices (nor to
    // CUDA_VISIBLE_DEVICES, which the driver reads).
    return call +
           ": there is no NVIDIA driver, or it is older than this CUDA runtime; use device::cpu(), or install or "
           "update the driver";
  }
  if (visible_devices) {
    return (error_name.empty() ? std::string("the CUDA runtime lists none") : call) + " with CUDA_VISIBLE_DEVICES='" +
           *visible_devices +
           "', which lists no GPU of this machine, or the machine has none; use device::cpu(), or make "
           "CUDA_VISIBLE_DEVICES name GPUs the machine has (nvidia-smi -L lists them)";
  }
  return (error_name.empty() ? std::string("the CUDA runtime lists none") : call) +
         ": the machine has no CUDA-capable GPU (nvidia-smi -L lists those it has); use device::cpu()";
}

DEVICEKIT_DECL config_error missing_device_error(device dev, std::string_view operation) {
  const std::string head = std::string(operation) + ": " + dev.str() + " does not exist: ";
#if DEVICEKIT_HAS_CUDA
  const int count = cuda_device_count();
  std::string why;
  {
    cuda_census& c = census();
    std::lock_guard lock(c.mutex);
    why = c.why;
  }
  const std::string sees = "this process sees " + std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s");
  if (count == 0) return config_error(head + sees + ", as " + why);
  return config_error(head + sees + ", cuda:0 to cuda:" + std::to_string(count - 1) +
                      " (CUDA_VISIBLE_DEVICES chooses which)");
#else
  return config_error(head +
                      "devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0), and a cuda device needs CUDA; "
                      "use device::cpu(), or build with the CUDA toolkit");
#endif
}

DEVICEKIT_DECL void check_device_exists_slow(device dev, std::string_view operation) {
  if (!device_exists(dev)) throw missing_device_error(dev, operation);
}

}  // namespace devicekit::detail
