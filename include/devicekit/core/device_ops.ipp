#pragma once
/// \file
/// The definitions behind core/device_ops.hpp: device-wide synchronisation, the idle query and peer
/// access. Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION
/// (core/config.hpp).
#include <devicekit/core/device_ops.hpp>

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace devicekit {

namespace detail {

DEVICEKIT_DECL void check_peer_pair(device a, device b, const char* operation) {
  const std::string call = std::string(operation) + "(" + a.str() + ", " + b.str() + ")";
  for (const device d : {a, b}) {
    if (d.is_cpu()) {
      throw config_error(call + ": peer access is between two cuda devices, and " + d.str() +
                         " is the host (device copies reach host memory through pinned staging)");
    }
  }
  check_device_exists(a, call);
  check_device_exists(b, call);
}

#if DEVICEKIT_HAS_CUDA
/// What try_enable_peer_access remembers, and the listener, under one lock.
struct peer_access_record {
  std::mutex mutex;
  std::map<std::pair<int, int>, peer_access_state> known;
  peer_access_listener listener = nullptr;
  void* context = nullptr;

  static peer_access_record& instance() {
    static auto* record = new peer_access_record();  // never destroyed: pools may outlive statics
    return *record;
  }
};

DEVICEKIT_DECL peer_access_state try_enable_peer_access(int accessor, int owner) {
  peer_access_record& r = peer_access_record::instance();
  std::lock_guard lock(r.mutex);
  if (auto it = r.known.find({accessor, owner}); it != r.known.end()) return it->second;
  int can = 0;
  DEVICEKIT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, accessor, owner));
  peer_access_state state;
  if (can != 0) {
    cudaError_t e = cudaSuccess;
    {
      scoped_device on(accessor);
      e = cudaDeviceEnablePeerAccess(owner, 0);
    }
    if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) {
      if (e != cudaSuccess) (void)cudaGetLastError();  // our own status, not the program's error
      // Memory of devicekit's driver pools on `owner` (placement's default included) needs access
      // of its own: cudaDeviceEnablePeerAccess does not cover it (memory/resources.hpp). A
      // failure there throws and is not remembered: the next call tries again.
      if (r.listener != nullptr) r.listener(r.context, accessor, owner);
      state.result = peer_access_state::status::enabled;
    } else {
      (void)cudaGetLastError();
      state.result = peer_access_state::status::failed;
      state.error = e;
    }
  }
  r.known[{accessor, owner}] = state;
  return state;
}

DEVICEKIT_DECL void set_peer_access_listener(peer_access_listener f, void* context) {
  peer_access_record& r = peer_access_record::instance();
  std::lock_guard lock(r.mutex);
  r.listener = f;
  r.context = context;
  for (const auto& [pair, state] : r.known) {
    if (state.result == peer_access_state::status::enabled) f(context, pair.first, pair.second);
  }
}
#endif

}  // namespace detail

DEVICEKIT_DECL void synchronize(device dev) {
  if (dev.is_cpu()) return;
  detail::check_device_exists(dev, "synchronize");
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dev.ordinal());
  DEVICEKIT_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

DEVICEKIT_DECL bool is_idle(device dev) {
  if (dev.is_cpu()) return true;
  detail::check_device_exists(dev, "is_idle");
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

DEVICEKIT_DECL bool can_access_peer(device a, device b) {
  detail::check_peer_pair(a, b, "can_access_peer");
  if (a == b) return true;
  int can = 0;
#if DEVICEKIT_HAS_CUDA
  DEVICEKIT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a.ordinal(), b.ordinal()));
#endif
  return can != 0;
}

DEVICEKIT_DECL void enable_peer_access(device a, device b) {
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
