#pragma once
/// \file
/// pinned_host_resource and cuda_device_resource in a build without CUDA (DEVICEKIT_HAS_CUDA 0):
/// the same members as in memory/cuda_resources.hpp, so that code naming them compiles (a manager
/// that could use a GPU, a memory_pool<cuda_device_resource> member), but making one throws
/// config_error saying that devicekit was built without CUDA. No object exists, so the other
/// members are never reached. Included by memory/cuda_resources.hpp; empty in a CUDA build.
#include <devicekit/core/device.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/resource_concepts.hpp>

#include <cstddef>
#include <cstdint>

#if !DEVICEKIT_HAS_CUDA
namespace devicekit {

/// Page-locked host memory: needs CUDA.
class pinned_host_resource {
 public:
  static constexpr bool is_host_accessible = true;
  static constexpr bool is_device_accessible = true;

  pinned_host_resource() { detail::no_cuda("pinned_host_resource"); }

  [[nodiscard]] void* allocate(std::size_t /*bytes*/, std::size_t /*alignment*/ = 256) {
    detail::no_cuda("pinned_host_resource");
  }
  void deallocate(void* /*p*/, std::size_t /*bytes*/, std::size_t /*alignment*/ = 256) noexcept {}
  [[nodiscard]] device get_device() const noexcept { return device::cpu(); }
  friend bool operator==(const pinned_host_resource&, const pinned_host_resource&) noexcept { return true; }
};

/// Device memory on one GPU: needs CUDA.
class cuda_device_resource {
 public:
  static constexpr bool is_host_accessible = false;
  static constexpr bool is_device_accessible = true;

  enum class mode { async_pool, synchronous, device_default_pool };

  explicit cuda_device_resource(int ordinal = 0, std::uint64_t /*release_threshold*/ = UINT64_MAX,
                                mode /*m*/ = mode::async_pool)
      : ordinal_(ordinal) {
    detail::no_cuda("cuda_device_resource");
  }

  [[nodiscard]] void* allocate(std::size_t /*bytes*/, std::size_t /*alignment*/ = 256) {
    detail::no_cuda("cuda_device_resource");
  }
  void deallocate(void* /*p*/, std::size_t /*bytes*/, std::size_t /*alignment*/ = 256) noexcept {}
  [[nodiscard]] void* allocate_async(std::size_t /*bytes*/, std::size_t /*alignment*/, native_stream_handle /*s*/) {
    detail::no_cuda("cuda_device_resource");
  }
  void deallocate_async(void* /*p*/, std::size_t /*bytes*/, std::size_t /*alignment*/,
                        native_stream_handle /*s*/) noexcept {}
  void trim() noexcept {}

  [[nodiscard]] device get_device() const noexcept { return device::cuda(ordinal_); }
  [[nodiscard]] bool uses_driver_pool() const noexcept { return false; }
  [[nodiscard]] bool uses_device_default_pool() const noexcept { return false; }
  [[nodiscard]] std::uint64_t release_threshold() const noexcept { return 0; }
  friend bool operator==(const cuda_device_resource& a, const cuda_device_resource& b) noexcept {
    return a.ordinal_ == b.ordinal_;
  }

 private:
  int ordinal_ = 0;
};

}  // namespace devicekit
#endif
