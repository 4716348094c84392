#pragma once
/// \file
/// Exit safety: whether CUDA calls are still allowed. Destructors of devicekit objects ask
/// `cuda_calls_allowed()` before they release CUDA resources, so that a static object destroyed
/// after the CUDA runtime has shut down makes no CUDA call (it leaves the memory to the
/// process's exit instead).
#include <devicekit/core/config.hpp>

#include <atomic>
#include <cstdlib>

namespace devicekit {
namespace detail {

inline std::atomic<bool> process_exiting{false};
inline std::atomic<bool> exit_hook_registered{false};

inline void mark_process_exiting() noexcept { process_exiting.store(true); }

}  // namespace detail

/// Call right after the first successful CUDA runtime call. It registers an `atexit` hook; since
/// the runtime registered its own teardown earlier, our hook runs first and flags the exit, and
/// every static object constructed before it (and so destroyed after it) skips its CUDA calls.
inline void note_cuda_runtime_used() noexcept {
  bool expected = false;
  if (detail::exit_hook_registered.compare_exchange_strong(expected, true)) {
    std::atexit(&detail::mark_process_exiting);
  }
}

/// False once the process has begun to exit (see note_cuda_runtime_used).
[[nodiscard]] inline bool cuda_calls_allowed() noexcept { return !detail::process_exiting.load(); }

}  // namespace devicekit
