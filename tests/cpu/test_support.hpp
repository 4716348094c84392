#pragma once
// Helpers shared by the host tests: an environment variable set for one scope, and simulated
// GPUs for managers built over a fixed_detector.
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/detect/hardware.hpp>

#include <cstdlib>
#include <optional>
#include <string>

namespace devicekit::testing {

/// Sets (or, with nullptr, unsets) an environment variable for the life of the object and
/// restores the previous state after.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
  ~scoped_env() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// `n` H100s with full peer access among them, as a detector would report them.
inline capabilities simulated_gpus(int n) {
  capabilities caps;
  caps.device_type = device_kind::cuda;
  caps.cc = compute_capability{9, 0};
  caps.precision = precision_for(*caps.cc);
  for (int i = 0; i < n; ++i) {
    device_properties p;
    p.id = device::cuda(i);
    p.name = "NVIDIA H100 80GB HBM3";
    p.uuid = "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(i);
    p.total_memory_bytes = 80ull << 30;
    p.cc = *caps.cc;
    p.hardware = classify_hardware(p.name);
    p.peer_access.assign(static_cast<std::size_t>(n), true);
    p.peer_access[static_cast<std::size_t>(i)] = false;
    caps.devices.push_back(p);
  }
  caps.device_count = caps.gpu_count = n;
  caps.supports_distributed = n > 1;
  return caps;
}

}  // namespace devicekit::testing
