#pragma once
/// \file
/// The definitions behind core/device_exists.hpp: the process's CUDA device count, asked once, and
/// the error for a device the process does not have. Inline in a header-only build; compiled once
/// under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/device_exists.hpp>

#include <mutex>
#include <string>

namespace devicekit::detail {

/// What cudaGetDeviceCount answered, kept with the reason when it found none.
struct cuda_census {
  std::mutex mutex;
  bool known = false;
  int count = 0;
  std::string why;  ///< " (cudaGetDeviceCount: cudaErrorInsufficientDriver)", or empty
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
    c.why = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorName(r) + ")";
  } else {
    DEVICEKIT_CUDA_CHECK(r);
  }
  c.count = count;
#else
  c.count = 0;
#endif
  c.known = true;
  known_cuda_device_count.store(c.count, std::memory_order_relaxed);
  return c.count;
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
  return config_error(head + "this process sees " + std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") +
                      why + (count > 0 ? ", cuda:0 to cuda:" + std::to_string(count - 1) : std::string()) +
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
