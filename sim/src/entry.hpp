#pragma once
// The entry of a simulated runtime call: current device, last error, contexts, the call's RAII.
// Locking: an entry point holds the state's mutex for the whole call (SIM_ENTER); config.cpp
// defines the configuration, violations and injected failures declared here.
#include "scheduler.hpp"
#include "state.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <string>

namespace devicekit::cuda_sim::detail {

inline thread_local int tl_device = 0;
inline thread_local bool tl_bound = false;  // the current device's primary context is current on this thread
inline thread_local cudaError_t tl_last_error = cudaSuccess;

/// `e`, kept as the thread's last error unless it is cudaSuccess.
inline cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) tl_last_error = e;
  return e;
}

/// Reads the configuration from the environment, once (lock held).
void configure(state& g);
/// Records and prints a violation of a CUDA rule (lock held).
void violation(state& g, const char* api, const std::string& rule);
/// Fault injection (lock held): counts a call of `api`; the error it must fail with, or
/// cudaSuccess. For NCCL calls the number is an ncclResult_t.
cudaError_t injected(state& g, const char* api);
/// Locks the state and reads the configuration; `torn_down` says whether the runtime has gone.
/// The entry of the NCCL calls, which fail in their own way.
std::unique_lock<std::mutex> enter(state& g, bool& torn_down);

inline bool valid_device(const state& g, int d) { return d >= 0 && static_cast<std::size_t>(d) < g.devices.size(); }

/// CUDA creates the primary context at cudaSetDevice (since CUDA 12.0) and at the first call
/// that needs one on the current device (CUDA programming guide, "Initialization").
inline void ensure_context(state& g, int d) {
  if (valid_device(g, d) && g.contexts[static_cast<std::size_t>(d)] == 0) g.contexts[static_cast<std::size_t>(d)] = 1;
}

/// A call that needs a context on the current device: its primary context is created if need be
/// and becomes current on this thread (what cuCtxGetCurrent then reports).
inline void bind_current(state& g) {
  ensure_context(g, tl_device);
  if (valid_device(g, tl_device)) tl_bound = true;
}

/// The RAII of an entry point: configuration, teardown, fault injection, the lock.
struct entry {
  state& g = global();
  std::unique_lock<std::mutex> lk{g.m};
  cudaError_t early = cudaSuccess;
  stream_obj* stream = nullptr;  ///< the stream a call on a stream names (see below)
  explicit entry(const char* api) {
    configure(g);
    if (g.torn_down) {
      early = cudaErrorCudartUnloading;
    } else {
      early = injected(g, api);
    }
  }
  /// The entry of a call on stream `h`: `stream` is the stream it names, or nullptr and `early`
  /// the error (resolve) when the call may go no further.
  entry(const char* api, cudaStream_t h) : entry(api) {
    if (early == cudaSuccess) stream = resolve(g, h, api, early);
  }
};

}  // namespace devicekit::cuda_sim::detail

/// Opens a runtime entry point `api`: `g` is the state, locked until the call returns; a call
/// after teardown, or one chosen to fail, returns its error at once.
#define SIM_ENTER(api) \
  entry e_(api);       \
  state& g = e_.g;     \
  (void)g;             \
  if (e_.early != cudaSuccess) return fail(e_.early)

/// SIM_ENTER for a call whose first check is its stream `h`: `s` is the stream it names.
#define SIM_ENTER_STREAM(api, h)   \
  entry e_(api, h);                \
  state& g = e_.g;                 \
  stream_obj* const s = e_.stream; \
  (void)g;                         \
  if (e_.early != cudaSuccess) return fail(e_.early)
