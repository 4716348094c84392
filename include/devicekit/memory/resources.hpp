#pragma once
/// \file
/// Upstream resources: where a pool gets its chunks. Each has the shape of CCCL's synchronous
/// resource (`allocate(bytes, alignment)`, `deallocate(p, bytes, alignment)`, `==`) and says
/// which device it serves (`get_device()`). This header holds what they share (the concepts, the
/// alignment check); the resources are in host_resources.hpp and cuda_resources.hpp, both
/// included here:
///   host_resource          aligned operator new: lets the whole pool run, be tested and be
///                          benchmarked on a machine without a GPU
///   pinned_host_resource   cudaMallocHost (page-locked host memory, reachable by copies on any
///                          stream)
///   cuda_device_resource   device memory, by cudaMallocFromPoolAsync from a driver pool whose
///                          release threshold is set explicitly (its default, 0, hands memory
///                          back at every synchronisation), by cudaMallocAsync from the device's
///                          own pool, or by plain cudaMalloc
///
/// A resource that serves streams also provides events (`create_event`, `record_event`,
/// `event_complete`, `wait_event`, `destroy_event`): the pool uses them to learn when a block
/// freed on one stream may be reused on another (the concept `stream_event_source`). One that
/// also has a device-wide fence (`fence_covers(s)`, `fence()`: cuda_device_resource) spares the
/// pool an event per free: frees on a stream the fence covers record an event only when another
/// stream needs them (memory/detail/pool_stream_registry.hpp). Such a
/// resource may also say whether one of its streams is being captured into a CUDA graph
/// (`capture_of(s)`, returning capture_state); without it the pool asks CUDA
/// (devicekit::capture_of: the driver's cuStreamIsCapturing, then cudaStreamGetCaptureInfo for a
/// capture's id), so a resource whose stream handles are not CUDA streams must provide it: CUDA
/// may crash on a handle it did not make.
///
/// Exit safety: no CUDA call is made once the process is exiting (cuda_calls_allowed()); memory
/// is then left to the process's end.
///
/// CCCL interop: with LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE defined before the first
/// include, the resources carry the properties `cuda::mr::host_accessible` /
/// `cuda::mr::device_accessible` (found by ADL through get_property).
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/pool_access.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/errors.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

#if !defined(DEVICEKIT_HAS_CCCL_MR)
#  if DEVICEKIT_HAS_CUDA && defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE) && __has_include(<cuda/memory_resource>)
#    define DEVICEKIT_HAS_CCCL_MR 1
#  else
#    define DEVICEKIT_HAS_CCCL_MR 0
#  endif
#endif
#if DEVICEKIT_HAS_CCCL_MR
#  include <cuda/memory_resource>
#  include <cuda/stream_ref>
#endif

namespace devicekit {

/// An upstream the pool can take chunks from.
template <class R>
concept upstream_resource = requires(R& r, const R& cr, void* p, std::size_t n, std::size_t a) {
  { r.allocate(n, a) } -> std::same_as<void*>;
  { r.deallocate(p, n, a) } -> std::same_as<void>;
  { cr.get_device() } -> std::same_as<device>;
};

/// An upstream whose memory is used by stream-ordered work, with the events that order it.
/// Event handles are opaque (`void*`); `create_event(s)` makes one usable with stream `s`.
template <class R>
concept stream_event_source = requires(R& r, void* ev, native_stream_handle s) {
  { r.create_event(s) } -> std::same_as<void*>;
  { r.record_event(ev, s) } -> std::same_as<void>;
  { r.event_complete(ev) } -> std::same_as<bool>;
  { r.wait_event(ev) } -> std::same_as<void>;
  { r.destroy_event(ev) } -> std::same_as<void>;
};

/// A stream_event_source with a fence over its device: `fence_covers(s)` says whether `fence()`
/// orders every operation queued on stream `s` (asked once, while `s` certainly exists);
/// `fence()` waits on the host for all of them, naming no stream (cudaDeviceSynchronize).
template <class R>
concept device_fence_source = stream_event_source<R> && requires(R& r, native_stream_handle s) {
  { r.fence_covers(s) } -> std::same_as<bool>;
  { r.fence() } -> std::same_as<void>;
};

namespace detail {
DEVICEKIT_DECL void check_alignment(std::size_t alignment);

[[noreturn]] inline void no_cuda(const char* what) {
  throw config_error(std::string(what) + " needs CUDA, but devicekit was built without it (DEVICEKIT_HAS_CUDA is 0)");
}
}  // namespace detail

}  // namespace devicekit

// The resources themselves, one file for the host and one for CUDA. Included last: each includes
// this header first, for the concepts above, so that either also stands alone.
#include <devicekit/memory/cuda_resources.hpp>
#include <devicekit/memory/host_resources.hpp>

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/resources.ipp>
#endif
