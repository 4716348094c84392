#pragma once
/// \file
/// What the upstream resources share (see memory/resources.hpp for what an upstream is): the
/// concepts a pool asks of its upstream (`upstream_resource`, `stream_event_source`,
/// `device_fence_source`), the alignment check, and the error of a CUDA resource in a build
/// without CUDA. Included by each resource's header (host_resources.hpp, cuda_resources.hpp), so
/// that the concepts need not know the resources.
#include <devicekit/memory/detail/pool_access.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
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

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/resource_concepts.ipp>
#endif
