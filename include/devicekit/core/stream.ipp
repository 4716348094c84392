#pragma once
/// \file
/// The definitions behind core/stream.hpp: the device guard, creating and releasing streams, and
/// the non-blocking idle query. Inline in a header-only build; compiled once under
/// DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/stream.hpp>
#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/detail/driver_entry_point.hpp>

#include <utility>

namespace devicekit {

#if DEVICEKIT_HAS_CUDA
namespace detail {
DEVICEKIT_DECL bool context_is_current() noexcept {
  using get_current_fn = int (*)(void**);
  static const get_current_fn get_current = driver_entry_point<get_current_fn>("cuCtxGetCurrent");
  if (get_current == nullptr) return true;
  void* ctx = nullptr;
  return get_current(&ctx) != 0 || ctx != nullptr;
}
}  // namespace detail

DEVICEKIT_DECL scoped_device::scoped_device(int ordinal) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice(&device)");
  if (previous_ == ordinal) return;
  const bool had_context = detail::context_is_current();
  DEVICEKIT_CUDA_CHECK(cudaSetDevice(ordinal));
  restore_ = had_context;
}

DEVICEKIT_DECL scoped_device::scoped_device(int ordinal, std::nothrow_t) noexcept {
  if (cudaGetDevice(&previous_) != cudaSuccess || previous_ == ordinal) return;
  const bool had_context = detail::context_is_current();
  restore_ = cudaSetDevice(ordinal) == cudaSuccess && had_context;
}

#endif

DEVICEKIT_DECL stream::stream(device dev) : device_(dev) {
  if (dev.is_cpu()) return;
  detail::check_device_exists(dev, "stream");
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dev.ordinal());
  check_cuda(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)");
  note_cuda_runtime_used();
  try {
    detail::stream_registry::instance().add(dev.ordinal(), handle_);
  } catch (...) {
    (void)cudaStreamDestroy(std::exchange(handle_, nullptr));
    throw;
  }
#endif
}

DEVICEKIT_DECL stream& stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

DEVICEKIT_DECL void stream::release() noexcept {
#if DEVICEKIT_HAS_CUDA
  if (handle_ == nullptr) return;
  detail::stream_registry::instance().remove(handle_);
  if (cuda_calls_allowed()) (void)cudaStreamDestroy(handle_);
#endif
  handle_ = nullptr;
}

DEVICEKIT_DECL bool stream_ref::idle() const {
#if DEVICEKIT_HAS_CUDA
  if (device_.is_cpu()) return true;
  const cudaError_t r = cudaStreamQuery(handle_);
  // cudaErrorNotReady is a status ("not actually an error", cudaError_t's documentation): it
  // does not become the last error (seen on the H100, gpu.gpu_sim_rules), so nothing is
  // cleared; clearing would swallow an error the program has not read yet.
  if (r == cudaErrorNotReady) return false;
  check_cuda(r, "cudaStreamQuery(stream)");
#endif
  return true;
}

}  // namespace devicekit
