#pragma once
/// \file
/// The CUDA upstream resources (see memory/resources.hpp for what an upstream is):
///   pinned_host_resource   cudaMallocHost (page-locked host memory, reachable by copies on any
///                          stream)
///   cuda_device_resource   device memory, by cudaMallocFromPoolAsync from a driver pool whose
///                          release threshold is set explicitly (its default, 0, hands memory
///                          back at every synchronisation), by cudaMallocAsync from the device's
///                          own pool, or by plain cudaMalloc
/// and the CUDA events they share, with which a pool learns when a block freed on one stream may
/// be used on another (CUDA runtime API, cudaEventRecord / cudaEventQuery).
///
/// Built without CUDA (DEVICEKIT_HAS_CUDA 0), the same classes exist with the same members, and
/// making one throws config_error saying that devicekit was built without CUDA
/// (memory/detail/cuda_resources_unavailable.hpp): code that names them compiles everywhere.
#include <devicekit/memory/resource_concepts.hpp>

#if DEVICEKIT_HAS_CUDA

#  include <devicekit/core/device.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/runtime.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/memory/errors.hpp>

#  include <cstddef>
#  include <cstdint>
#  include <memory>
#  include <string>

namespace devicekit {

namespace detail {
/// Events shared by the CUDA resources. Errors while the process exits are ignored.
/// The handles that name a default stream of the current device rather than one stream.
[[nodiscard]] inline bool is_default_stream(native_stream_handle s) noexcept {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

struct cuda_events {
  static void* create(native_stream_handle s);
  static void record(void* ev, native_stream_handle s) {
    DEVICEKIT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ev), s));
  }
  static bool complete(void* ev);
  static void wait(void* ev) { DEVICEKIT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(ev))); }
  /// Waits for the work queued on `s` (a stream of the current device) so far, blocking the
  /// thread rather than spinning as cudaStreamSynchronize does.
  [[nodiscard]] static cudaError_t wait_for(cudaStream_t s) noexcept;
  static void destroy(void* ev) noexcept {
    if (ev != nullptr && cuda_calls_allowed()) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  }
};
}  // namespace detail

/// Page-locked host memory (cudaMallocHost): host and device accessible, usable by asynchronous
/// copies on any stream, so it provides events.
class pinned_host_resource {
 public:
  static constexpr bool is_host_accessible = true;
  static constexpr bool is_device_accessible = true;

  pinned_host_resource() {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = 256);
  void deallocate(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/ = 256) noexcept {
    if (p != nullptr && cuda_calls_allowed()) (void)cudaFreeHost(p);
  }
  [[nodiscard]] device get_device() const noexcept { return device::cpu(); }
  friend bool operator==(const pinned_host_resource&, const pinned_host_resource&) noexcept { return true; }

  [[nodiscard]] void* create_event(native_stream_handle s) { return detail::cuda_events::create(s); }
  void record_event(void* ev, native_stream_handle s) { detail::cuda_events::record(ev, s); }
  [[nodiscard]] bool event_complete(void* ev) { return detail::cuda_events::complete(ev); }
  void wait_event(void* ev) { detail::cuda_events::wait(ev); }
  void destroy_event(void* ev) noexcept { detail::cuda_events::destroy(ev); }

#  if DEVICEKIT_HAS_CCCL_MR
  friend constexpr void get_property(const pinned_host_resource&, ::cuda::mr::host_accessible) noexcept {}
  friend constexpr void get_property(const pinned_host_resource&, ::cuda::mr::device_accessible) noexcept {}
#  endif
};

/// Device memory on one GPU. Copies share the underlying driver pool (and compare equal).
class cuda_device_resource {
 public:
  static constexpr bool is_host_accessible = false;
  static constexpr bool is_device_accessible = true;

  enum class mode {
    async_pool,   ///< cudaMallocFromPoolAsync from a driver pool of our own (falls back to
                  ///< cudaMalloc where the device has no memory pools)
    synchronous,  ///< cudaMalloc / cudaFree
    /// cudaMallocAsync from the device's default memory pool (the pool cudaMallocAsync uses
    /// unless the program called cudaDeviceSetMemPool), shared with every other user of that pool
    /// in the process; the release threshold is set on it. Falls back to cudaMalloc where the device
    /// has no memory pools.
    device_default_pool,
  };

  /// `release_threshold`: bytes the driver pool keeps when idle (set explicitly; the manager uses
  /// the device's budget). The resource's own stream orders chunk allocations; they are
  /// synchronised before being handed out, so a chunk is usable on every stream.
  explicit cuda_device_resource(int ordinal = 0, std::uint64_t release_threshold = UINT64_MAX,
                                mode m = mode::async_pool);

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = 256);

  void deallocate(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/ = 256) noexcept;

  /// Stream-ordered forms (the resource alone, without a caching pool on top).
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, native_stream_handle s);
  void deallocate_async(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/, native_stream_handle s) noexcept {
    if (p != nullptr && cuda_calls_allowed()) (void)cudaFreeAsync(p, s);
  }

#  if DEVICEKIT_HAS_CCCL_MR
  /// CCCL's async_resource form.
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref s) {
    return allocate_async(bytes, alignment, s.get());
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, ::cuda::stream_ref s) noexcept {
    deallocate_async(p, bytes, alignment, s.get());
  }
#  endif

  /// Hands memory the driver pool keeps back to the system (after the pool trimmed its chunks).
  void trim() noexcept;

  [[nodiscard]] device get_device() const noexcept { return device::cuda(state_->ordinal); }
  [[nodiscard]] bool uses_driver_pool() const noexcept { return state_->pool != nullptr; }
  /// True when the driver pool is the device's current (default) pool rather than one of ours.
  [[nodiscard]] bool uses_device_default_pool() const noexcept { return state_->shared_pool; }
  /// The driver pool (cudaMemPoolCreate) this resource allocates from; null in synchronous mode.
  [[nodiscard]] cudaMemPool_t native_pool() const noexcept { return state_->pool; }
  [[nodiscard]] std::uint64_t release_threshold() const noexcept { return state_->threshold; }
  friend bool operator==(const cuda_device_resource& a, const cuda_device_resource& b) noexcept {
    return a.state_ == b.state_;
  }

  // The null, legacy and per-thread handles name a default stream of whichever device is current:
  // for this resource they mean the default stream of its own device, so the event is made and
  // recorded there, whatever device the caller has current (an event and the stream it is
  // recorded on must belong to one device).
  [[nodiscard]] void* create_event(native_stream_handle s) {
    if (!detail::is_default_stream(s)) return detail::cuda_events::create(s);
    scoped_device on(state_->ordinal);
    return detail::cuda_events::create(s);
  }
  void record_event(void* ev, native_stream_handle s) {
    if (!detail::is_default_stream(s)) return detail::cuda_events::record(ev, s);
    scoped_device on(state_->ordinal);
    detail::cuda_events::record(ev, s);
  }
  [[nodiscard]] bool event_complete(void* ev) { return detail::cuda_events::complete(ev); }
  void wait_event(void* ev) { detail::cuda_events::wait(ev); }
  void destroy_event(void* ev) noexcept { detail::cuda_events::destroy(ev); }

  /// The fence (device_fence_source): cudaDeviceSynchronize on this resource's device orders every
  /// stream of that device, destroyed ones included, so it covers the default handles and the
  /// streams cudaStreamGetDevice places there; a stream of another device is not covered.
  [[nodiscard]] bool fence_covers(native_stream_handle s);
  void fence();

#  if DEVICEKIT_HAS_CCCL_MR
  friend constexpr void get_property(const cuda_device_resource&, ::cuda::mr::device_accessible) noexcept {}
#  endif

 private:
  using pool_handle = cudaMemPool_t;
  struct state {
    int ordinal = 0;
    std::uint64_t threshold = 0;
    pool_handle pool = nullptr;
    native_stream_handle stream = nullptr;
    bool registered = false;   ///< with detail::pool_peer_access
    bool shared_pool = false;  ///< the device's current pool (mode::device_default_pool): never destroyed
    state() = default;
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state();
  };
  std::shared_ptr<state> state_;
};

}  // namespace devicekit

#else
#  include <devicekit/memory/detail/cuda_resources_unavailable.hpp>
#endif

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/cuda_resources.ipp>
#endif
