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
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/core/pool_access.hpp>

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace devicekit {
namespace detail {

/// Throws config_error unless `dev` is a cuda device this process sees.
inline void check_cuda_ordinal(device dev, const char* operation) {
#if DEVICEKIT_HAS_CUDA
  int count = 0;
  const cudaError_t r = cudaGetDeviceCount(&count);
  std::string why;
  if (r == cudaErrorNoDevice || r == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    count = 0;
    why = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorName(r) + ")";
  } else {
    DEVICEKIT_CUDA_CHECK(r);
  }
  if (dev.ordinal() >= 0 && dev.ordinal() < count) return;
  throw config_error(std::string(operation) + ": " + dev.str() + " does not exist: this process sees " +
                     std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + why +
                     (count > 0 ? ", cuda:0 to cuda:" + std::to_string(count - 1) : std::string()) +
                     " (CUDA_VISIBLE_DEVICES chooses which)");
#else
  throw config_error(std::string(operation) + " on " + dev.str() +
                     ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)");
#endif
}

/// Checks the pair for the peer-access calls: two cuda devices this process sees.
inline void check_peer_pair(device a, device b, const char* operation) {
  const std::string call = std::string(operation) + "(" + a.str() + ", " + b.str() + ")";
  for (const device d : {a, b}) {
    if (d.is_cpu()) {
      throw config_error(call + ": peer access is between two cuda devices, and " + d.str() +
                         " is the host (device copies reach host memory through pinned staging)");
    }
  }
  check_cuda_ordinal(a, call.c_str());
  check_cuda_ordinal(b, call.c_str());
}

#if DEVICEKIT_HAS_CUDA
/// What enabling peer access from `accessor` to `owner` gave, kept per ordered pair.
struct peer_access_state {
  enum class status { enabled, unsupported, failed } result = status::unsupported;
  cudaError_t error = cudaSuccess;  ///< the failure of cudaDeviceEnablePeerAccess (failed)
};

/// The one implementation of enabling peer access (enable_peer_access and the copy engine's
/// ensure_peer_access use it): cudaDeviceCanAccessPeer, then cudaDeviceEnablePeerAccess on
/// `accessor` (already enabled, by devicekit or the program, counts as success), then access from
/// every devicekit driver pool on `owner`, now and for pools made later (pool_peer_access). The
/// outcome is remembered per process, so repeated calls cost one map look-up. Ordinals are valid
/// and distinct (the caller checked). Never throws for an unsupported or failed enable: the
/// caller decides (the copy engine stages through the host instead).
[[nodiscard]] inline peer_access_state try_enable_peer_access(int accessor, int owner) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, peer_access_state> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find({accessor, owner}); it != known.end()) return it->second;
  int can = 0;
  DEVICEKIT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, accessor, owner));
  peer_access_state state;
  if (can != 0) {
    cudaError_t r = cudaSuccess;
    {
      scoped_device on(accessor);
      r = cudaDeviceEnablePeerAccess(owner, 0);
    }
    if (r == cudaSuccess || r == cudaErrorPeerAccessAlreadyEnabled) {
      if (r != cudaSuccess) (void)cudaGetLastError();  // our own status, not the program's error
      // Memory of devicekit's driver pools on `owner` (placement's default included) needs access
      // of its own: cudaDeviceEnablePeerAccess does not cover it (memory/resources.hpp). A
      // failure here throws and is not remembered: the next call tries again.
      pool_peer_access::instance().grant(accessor, owner);
      state.result = peer_access_state::status::enabled;
    } else {
      (void)cudaGetLastError();
      state.result = peer_access_state::status::failed;
      state.error = r;
    }
  }
  known[{accessor, owner}] = state;
  return state;
}
#endif

}  // namespace detail

/// Blocks until every piece of work queued on `dev` has finished: all streams of all libraries
/// and of the program, the default streams included (cudaDeviceSynchronize on `dev`). Reports
/// an asynchronous error of earlier work as a cuda_error. Under CUDA's default scheduling
/// (cudaDeviceScheduleAuto) the waiting thread may spin, as in cudaStreamSynchronize. cpu: a
/// no-op. config_error for a cuda ordinal this process does not see.
inline void synchronize(device dev) {
  if (dev.is_cpu()) return;
  detail::check_cuda_ordinal(dev, "synchronize");
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dev.ordinal());
  DEVICEKIT_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

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
[[nodiscard]] inline bool is_idle(device dev) {
  if (dev.is_cpu()) return true;
  detail::check_cuda_ordinal(dev, "is_idle");
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dev.ordinal());
  const auto done = [](cudaStream_t s) {
    const cudaError_t r = cudaStreamQuery(s);
    // cudaErrorNotReady is a status and does not become the last error (core/stream.hpp).
    if (r == cudaErrorNotReady) return false;
    DEVICEKIT_CUDA_CHECK(r);
    return true;
  };
  if (!done(cudaStreamLegacy) || !done(cudaStreamPerThread)) return false;
  return detail::stream_registry::instance().all_of(dev.ordinal(), done);
#else
  return true;
#endif
}

/// Whether cuda device `a` can read and write the memory of cuda device `b` directly (NVLink or
/// PCIe peer-to-peer; cudaDeviceCanAccessPeer). True for a == b. It may be possible yet not
/// enabled: enable_peer_access(a, b) does that. config_error for a cpu device or an ordinal this
/// process does not see.
[[nodiscard]] inline bool can_access_peer(device a, device b) {
  detail::check_peer_pair(a, b, "can_access_peer");
  if (a == b) return true;
  int can = 0;
#if DEVICEKIT_HAS_CUDA
  DEVICEKIT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a.ordinal(), b.ordinal()));
#endif
  return can != 0;
}

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
inline void enable_peer_access(device a, device b) {
  detail::check_peer_pair(a, b, "enable_peer_access");
  if (a == b) return;
#if DEVICEKIT_HAS_CUDA
  const auto state = detail::try_enable_peer_access(a.ordinal(), b.ordinal());
  using status = detail::peer_access_state::status;
  if (state.result == status::enabled) return;
  if (state.result == status::unsupported) {
    throw config_error("enable_peer_access(" + a.str() + ", " + b.str() + "): " + a.str() +
                       " cannot access the memory of " + b.str() +
                       " directly (cudaDeviceCanAccessPeer says no: no NVLink or PCIe peer-to-peer path "
                       "between them, or it is disabled); check can_access_peer first. devicekit's own "
                       "copies between them stage through host memory");
  }
  check_cuda(state.error, "cudaDeviceEnablePeerAccess(" + std::to_string(b.ordinal()) + ", 0) on " + a.str());
#endif
}

}  // namespace devicekit
