#pragma once
/// \file
/// The definitions behind memory/cuda_resources.hpp: events, cudaMallocHost, the driver pools and
/// their release.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/cuda_resources.hpp>

#if DEVICEKIT_HAS_CUDA

#  include <devicekit/core/detail/event.hpp>
#  include <devicekit/memory/detail/pool_access.hpp>

#  include <memory>
#  include <string>

namespace devicekit::detail {

DEVICEKIT_DECL void* cuda_events::create(native_stream_handle s) {
  int dev = 0;
  if (s != nullptr) {
    DEVICEKIT_CUDA_CHECK(cudaStreamGetDevice(s, &dev));
  } else {
    DEVICEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  }
  scoped_device on(dev);
  // BlockingSync (core/detail/event.hpp): the pool waits for these on the host when it must (wait());
  // the thread then sleeps instead of spinning a core.
  return create_event();
}

DEVICEKIT_DECL bool cuda_events::complete(void* ev) {
  const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(ev));
  if (r == cudaErrorNotReady) return false;  // a status, not the last error: nothing to clear
  DEVICEKIT_CUDA_CHECK(r);
  return true;
}

DEVICEKIT_DECL cudaError_t cuda_events::wait_for(cudaStream_t s) noexcept {
  cudaEvent_t ev = nullptr;
  cudaError_t r = try_create_event(ev);
  if (r != cudaSuccess) return r;
  r = cudaEventRecord(ev, s);
  if (r == cudaSuccess) r = cudaEventSynchronize(ev);
  (void)cudaEventDestroy(ev);
  return r;
}

}  // namespace devicekit::detail

namespace devicekit {

DEVICEKIT_DECL void* pinned_host_resource::allocate(std::size_t bytes, std::size_t alignment) {
  detail::check_alignment(alignment);
  if (alignment > 4096) {
    throw invalid_request("pinned_host_resource gives page-aligned memory (4096 bytes); alignment " +
                          std::to_string(alignment) + " is more: allocate through a memory_pool");
  }
  void* p = nullptr;
  DEVICEKIT_CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
  note_cuda_runtime_used();
  return p;
}

DEVICEKIT_DECL cuda_device_resource::cuda_device_resource(int ordinal, std::uint64_t release_threshold, mode m)
    : state_(std::make_shared<state>()) {
  state_->ordinal = ordinal;
  scoped_device on(ordinal);
  note_cuda_runtime_used();
  int pools = 0;
  DEVICEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal));
  if (m == mode::device_default_pool && pools != 0) {
    // cudaMallocAsync allocates from the device's current memory pool, which is its default
    // pool until cudaDeviceSetMemPool changes it (CUDA runtime API, cudaMallocAsync and
    // cudaDeviceGetDefaultMemPool). The threshold and peer access are set on the default pool;
    // it is not ours to destroy.
    DEVICEKIT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&state_->pool, ordinal));
    std::uint64_t threshold = release_threshold;
    DEVICEKIT_CUDA_CHECK(cudaMemPoolSetAttribute(state_->pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    DEVICEKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
    detail::pool_peer_access::instance().add_pool(ordinal, state_->pool);
    state_->registered = true;
    state_->shared_pool = true;
  } else if (m == mode::async_pool && pools != 0) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ordinal;
    DEVICEKIT_CUDA_CHECK(cudaMemPoolCreate(&state_->pool, &props));
    std::uint64_t threshold = release_threshold;  // the attribute is a cuuint64_t (64-bit)
    DEVICEKIT_CUDA_CHECK(cudaMemPoolSetAttribute(state_->pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    DEVICEKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
    detail::pool_peer_access::instance().add_pool(ordinal, state_->pool);
    state_->registered = true;
  }
  state_->threshold = release_threshold;
}

DEVICEKIT_DECL void* cuda_device_resource::allocate(std::size_t bytes, std::size_t alignment) {
  detail::check_alignment(alignment);
  if (alignment > 256) {
    throw invalid_request("cuda_device_resource gives 256-byte aligned memory; alignment " + std::to_string(alignment) +
                          " is more: allocate through a memory_pool");
  }
  void* p = nullptr;
  scoped_device on(state_->ordinal);
  if (state_->pool != nullptr) {
    if (state_->shared_pool) {
      DEVICEKIT_CUDA_CHECK(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, state_->stream));
    } else {
      DEVICEKIT_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes == 0 ? 1 : bytes, state_->pool, state_->stream));
    }
    const cudaError_t sync = detail::cuda_events::wait_for(state_->stream);
    if (sync != cudaSuccess) {
      (void)cudaFreeAsync(p, state_->stream);
      check_cuda(sync, "waiting for the resource stream");
    }
  } else {
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  }
  return p;
}

DEVICEKIT_DECL void cuda_device_resource::deallocate(void* p, std::size_t /*bytes*/,
                                                     std::size_t /*alignment*/) noexcept {
  if (p == nullptr || !cuda_calls_allowed()) return;
  scoped_device on(state_->ordinal, std::nothrow);
  if (state_->pool != nullptr) {
    (void)cudaFreeAsync(p, state_->stream);
  } else {
    (void)cudaFree(p);
  }
}

DEVICEKIT_DECL void* cuda_device_resource::allocate_async(std::size_t bytes, std::size_t alignment,
                                                          native_stream_handle s) {
  detail::check_alignment(alignment);
  void* p = nullptr;
  scoped_device on(state_->ordinal);
  if (state_->pool != nullptr && !state_->shared_pool) {
    DEVICEKIT_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes == 0 ? 1 : bytes, state_->pool, s));
  } else {
    DEVICEKIT_CUDA_CHECK(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, s));
  }
  return p;
}

DEVICEKIT_DECL bool cuda_device_resource::fence_covers(native_stream_handle s) {
  if (detail::is_default_stream(s)) return true;  // this resource's device's, as in create_event
  int dev = -1;
  DEVICEKIT_CUDA_CHECK(cudaStreamGetDevice(s, &dev));
  return dev == state_->ordinal;
}

DEVICEKIT_DECL void cuda_device_resource::fence() {
  if (!cuda_calls_allowed()) return;
  scoped_device on(state_->ordinal);
  DEVICEKIT_CUDA_CHECK(cudaDeviceSynchronize());
}

DEVICEKIT_DECL void cuda_device_resource::trim() noexcept {
  if (state_->pool != nullptr && cuda_calls_allowed()) {
    (void)detail::cuda_events::wait_for(state_->stream);
    (void)cudaMemPoolTrimTo(state_->pool, 0);
  }
}

DEVICEKIT_DECL cuda_device_resource::state::~state() {
  // After the runtime has shut down the driver reclaims everything; calling it would crash.
  if (!cuda_calls_allowed()) return;
  if (stream != nullptr) {
    (void)cudaStreamSynchronize(stream);
    (void)cudaStreamDestroy(stream);
  }
  if (registered) detail::pool_peer_access::instance().remove_pool(ordinal, pool);
  if (pool != nullptr && !shared_pool) (void)cudaMemPoolDestroy(pool);
}

}  // namespace devicekit

#endif
