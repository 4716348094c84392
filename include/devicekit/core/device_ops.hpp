#pragma once
/// \file
/// Device-wide calls:
///
///   synchronize(dev)             waits until all work on `dev` has finished, every stream of
///                                every library included (cudaDeviceSynchronize)
///   is_idle(dev)                 never blocks: whether devicekit's own streams on `dev` and the
///                                device's default streams have no pending work (see below for
///                                what it cannot see)
///   can_access_peer(a, b)        whether device `a` can read and write `b`'s memory directly
///   enable_peer_access(a, b)     lets `a` do so: peer access in CUDA's sense, and access to the
///                                memory of devicekit's driver pools on `b`; idempotent
///
/// On cpu devices synchronize is a no-op and is_idle true: cpu work runs on the calling thread.
/// Peer access is between two cuda devices; a cpu device there is a config_error, as is a cuda
/// ordinal this process does not see. None of these changes the caller's current CUDA device
/// (they work under scoped_device; a thread that had chosen no device keeps `dev` afterwards, as
/// scoped_device documents).
#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>

#include <string>
#include <utility>

namespace devicekit {
namespace detail {

/// Checks the pair for the peer-access calls: two cuda devices this process sees.
DEVICEKIT_DECL void check_peer_pair(device a, device b, const char* operation);

#if DEVICEKIT_HAS_CUDA
/// What enabling peer access from `accessor` to `owner` gave, kept per ordered pair.
struct peer_access_state {
  enum class status { enabled, unsupported, failed } result = status::unsupported;
  cudaError_t error = cudaSuccess;  ///< the failure of cudaDeviceEnablePeerAccess (failed)
};

/// The one implementation of enabling peer access (enable_peer_access and the copy engine's
/// ensure_peer_access use it): cudaDeviceCanAccessPeer, then cudaDeviceEnablePeerAccess on
/// `accessor` (already enabled, by devicekit or the program, counts as success), then the peer
/// access listener (below). The outcome is remembered per process, so repeated calls cost one map
/// look-up. Ordinals are valid and distinct (the caller checked). Never throws for an unsupported
/// or failed enable: the caller decides (the copy engine stages through the host instead); a
/// listener that throws is passed on, and the enable is not remembered: the next call tries again.
[[nodiscard]] DEVICEKIT_DECL peer_access_state try_enable_peer_access(int accessor, int owner);

/// Called with `context` for each pair (accessor, owner) whose peer access is enabled, under the
/// lock of try_enable_peer_access. Memory that cudaDeviceEnablePeerAccess does not cover hears of
/// it this way: memory/ grants access to devicekit's driver pools (memory/detail/pool_access.hpp),
/// which core does not know of.
using peer_access_listener = void (*)(void* context, int accessor, int owner);

/// Installs the one listener, and calls it at once for every pair enabled before (so a listener
/// installed when its first pool is made misses nothing).
DEVICEKIT_DECL void set_peer_access_listener(peer_access_listener f, void* context);
#endif

}  // namespace detail

/// Blocks until every piece of work queued on `dev` has finished: all streams of all libraries
/// and of the program, the default streams included (cudaDeviceSynchronize on `dev`). Reports
/// an asynchronous error of earlier work as a cuda_error. Under CUDA's default scheduling
/// (cudaDeviceScheduleAuto) the waiting thread may spin, as in cudaStreamSynchronize. cpu: a
/// no-op. config_error for a cuda ordinal this process does not see.
DEVICEKIT_DECL void synchronize(device dev);

/// True when the work that devicekit can see on `dev` has finished; never blocks. CUDA has no
/// query for a whole device, so this asks each stream it knows (cudaStreamQuery):
///   - every live devicekit `stream` of `dev` (the program's, and devicekit's own placement and
///     prefetch streams),
///   - the device's legacy default stream (stream 0 / cudaStreamLegacy), and
///   - the calling thread's per-thread default stream of `dev` (cudaStreamPerThread).
/// It does not see other streams: the program's own cudaStreamCreate, other libraries' (PyTorch,
/// NCCL's internal ones), other threads' per-thread default streams, and the CUDA streams that
/// devicekit makes without the `stream` class (its NCCL communicators' streams, and
/// cuda_device_resource's, which orders only its own allocations and frees). For a complete
/// answer wait with synchronize(dev), or record an event on those streams. A false answer may be true a
/// moment later; a true answer says nothing about work queued after the call. cpu: always true.
/// An asynchronous error of earlier work is reported as a cuda_error.
[[nodiscard]] DEVICEKIT_DECL bool is_idle(device dev);

/// Whether cuda device `a` can read and write the memory of cuda device `b` directly (NVLink or
/// PCIe peer-to-peer; cudaDeviceCanAccessPeer). True for a == b. It may be possible yet not
/// enabled: enable_peer_access(a, b) does that. config_error for a cpu device or an ordinal this
/// process does not see.
[[nodiscard]] DEVICEKIT_DECL bool can_access_peer(device a, device b);

/// Lets cuda device `a` read and write `b`'s memory directly: cudaDeviceEnablePeerAccess on `a`,
/// and access for `a` to the memory of devicekit's driver pools on `b` (cuda_device_resource,
/// placement's default pool), which CUDA's peer access does not cover, including pools made
/// later. Idempotent: calling it again, or after the program enabled CUDA's part itself, is
/// harmless. One direction only: enable_peer_access(b, a) for the other. Devicekit's device-to-
/// device copies enable access on their own when they first need it (and stage through host
/// memory where the pair has none); call this for kernels of your own that read another
/// device's memory. a == b: nothing to do.
/// Errors: config_error for a cpu device, an ordinal this process does not see, or a pair
/// without peer support (see can_access_peer); cuda_error when CUDA refuses to enable it
/// otherwise (e.g. cudaErrorTooManyPeers).
DEVICEKIT_DECL void enable_peer_access(device a, device b);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/device_ops.ipp>
#endif
