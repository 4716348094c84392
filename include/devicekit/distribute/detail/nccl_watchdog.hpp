#pragma once
/// \file
/// `nccl_watchdog`: a thread that watches the NCCL communicators while the host waits for their
/// work, so that the wait itself can block in cudaStreamSynchronize, as a hand-written program's
/// does, instead of polling the stream. It asks each communicator for its asynchronous error
/// (ncclCommGetAsyncError) at growing intervals, and at the first error, or once the timeout has
/// passed, aborts every communicator it watches (ncclCommAbort). The abort makes NCCL's stuck
/// kernels exit, so the blocked cudaStreamSynchronize returns and the waiting thread throws what
/// the watchdog found.
///
/// The arrangement is the one NCCL's fault tolerance is built for: ncclCommAbort "will abort any
/// uncompleted operations", and may be called from another thread when one is blocked (NCCL docs,
/// "Fault Tolerance"; PyTorch's ProcessGroupNCCL watchdog thread and XLA:GPU's background check
/// of NCCL's asynchronous errors do the same).
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_NCCL
#  include <nccl.h>

#  include <algorithm>
#  include <atomic>
#  include <chrono>
#  include <condition_variable>
#  include <cstddef>
#  include <cstdint>
#  include <mutex>
#  include <new>
#  include <span>
#  include <string>
#  include <system_error>
#  include <thread>
#  include <vector>

namespace devicekit::detail {

/// NCCL's text for `r`, and the communicator's last error where NCCL has it (2.13 and later).
[[nodiscard]] inline std::string nccl_error_text(ncclResult_t r, [[maybe_unused]] ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
#  if NCCL_VERSION_CODE >= 21300
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') s.append("; ").append(last);
  }
#  endif
  return s;
}

class nccl_watchdog {
 public:
  /// What the watchdog found while watching: nothing, or the first asynchronous error (which
  /// communicator, NCCL's code and text), or the timeout. Either of the last two means every
  /// watched communicator has been aborted.
  struct verdict {
    enum class kind { none, async_error, timed_out };
    kind what = kind::none;
    std::size_t index = 0;  ///< the communicator with the error, as given to watch()
    ncclResult_t code = ncclSuccess;
    std::string text;
  };

  nccl_watchdog() = default;
  nccl_watchdog(const nccl_watchdog&) = delete;
  nccl_watchdog& operator=(const nccl_watchdog&) = delete;
  ~nccl_watchdog() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  /// Starts watching `comms` (none null) until done(); `timeout` 0: no timeout. The thread is
  /// started at the first watch. False, watching nothing, when the thread cannot be started (the
  /// process is out of threads or memory, std::thread's system_error): the caller then waits by
  /// polling, as it would without a watchdog.
  [[nodiscard]] bool watch(std::span<const ncclComm_t> comms, std::chrono::milliseconds timeout) {
    bool wake = false;
    {
      const std::lock_guard lock(mutex_);
      if (!thread_.joinable()) {
        try {
          if (refused_thread_starts.load(std::memory_order_relaxed) > 0) {
            refused_thread_starts.fetch_sub(1, std::memory_order_relaxed);
            throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                    "nccl_watchdog: thread start refused for a test");
          }
          thread_ = std::thread([this] { run(); });
        } catch (const std::system_error&) {
          return false;
        }
      }
      try {
        comms_.assign(comms.begin(), comms.end());
      } catch (const std::bad_alloc&) {
        comms_.clear();
        return false;
      }
      watching_ = true;
      ++generation_;
      timed_ = timeout.count() > 0;
      deadline_ = std::chrono::steady_clock::now() + timeout;
      verdict_ = verdict{};
      wake = parked_;
    }
    if (wake) wake_.notify_one();
    return true;
  }

  /// For tests: the next this many thread starts, in any watchdog, fail as std::thread's do when
  /// the process has no threads left (EAGAIN), so that the polling wait can be exercised.
  static inline std::atomic<int> refused_thread_starts{0};

  /// Stops watching and returns what was found. After it the watchdog touches no communicator.
  [[nodiscard]] verdict done() {
    const std::lock_guard lock(mutex_);
    watching_ = false;
    comms_.clear();
    last_watch_ = std::chrono::steady_clock::now();
    return std::move(verdict_);
  }

 private:
  /// Looks back off from first_look to slowest_look, so that an error in a short collective is
  /// found soon and a long collective costs the thread almost nothing.
  static constexpr std::chrono::microseconds first_look{100};
  static constexpr std::chrono::microseconds slowest_look{std::chrono::milliseconds(10)};
  /// Between watches the thread wakes every slowest_look, and so needs no waking by watch(): a
  /// wake-up is a system call on the waiting path, and a training loop waits every few
  /// milliseconds. After this long without a watch it parks until the next one wakes it.
  static constexpr std::chrono::seconds park_after{1};

  void run() {
    std::unique_lock lock(mutex_);
    std::uint64_t seen = 0;
    std::chrono::microseconds interval = first_look;
    while (!stop_) {
      if (!watching_ || verdict_.what != verdict::kind::none) {
        if (std::chrono::steady_clock::now() - last_watch_ > park_after) {
          parked_ = true;
          wake_.wait(lock);
          parked_ = false;
        } else {
          wake_.wait_for(lock, slowest_look);
        }
        continue;
      }
      if (seen != generation_) {  // a new watch: look soon
        seen = generation_;
        interval = first_look;
      }
      auto until = std::chrono::steady_clock::now() + interval;
      if (timed_) until = std::min(until, deadline_);
      wake_.wait_until(lock, until);
      if (stop_ || !watching_ || seen != generation_) continue;
      look();
      interval = std::min<std::chrono::microseconds>(interval * 2, slowest_look);
    }
  }

  /// Under the lock, while watching: the asynchronous errors, then the deadline.
  void look() {
    for (std::size_t k = 0; k < comms_.size(); ++k) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comms_[k], &async);
      const ncclResult_t bad = r != ncclSuccess ? r : async;
      if (bad == ncclSuccess || bad == ncclInProgress) continue;
      verdict_ = {verdict::kind::async_error, k, bad, {}};
      try {
        verdict_.text = nccl_error_text(bad, comms_[k]);
      } catch (const std::bad_alloc&) {
        // No memory for NCCL's text: the code is reported without it (the thread must not throw).
      }
      abort_all();
      return;
    }
    if (timed_ && std::chrono::steady_clock::now() >= deadline_) {
      verdict_ = {verdict::kind::timed_out, 0, ncclSuccess, {}};
      abort_all();
    }
  }

  /// Held under the lock, so that done() returns only once the aborts are over.
  void abort_all() noexcept {
    for (ncclComm_t c : comms_) (void)ncclCommAbort(c);
  }

  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::thread thread_;
  bool stop_ = false;
  bool watching_ = false;
  bool parked_ = false;                               ///< waiting for watch() to wake it
  std::chrono::steady_clock::time_point last_watch_;  ///< when the last watch ended
  std::uint64_t generation_ = 0;                      ///< counts watch() calls, so that a look belongs to its watch
  std::vector<ncclComm_t> comms_;
  bool timed_ = false;
  std::chrono::steady_clock::time_point deadline_;
  verdict verdict_;
};

}  // namespace devicekit::detail
#endif  // DEVICEKIT_HAS_NCCL
