#pragma once
/// \file
/// The lock that guards a pool's bookkeeping (device_memory): one compare-and-swap to take it
/// and one exchange to give it back while no other thread wants it, a futex wait and wake only
/// when one does. It is the mutex of Ulrich Drepper's "Futexes Are Tricky" (its "mutex2": 0 free,
/// 1 taken, 2 taken with waiters), on C++20's std::atomic wait and notify, which block on the
/// futex where the platform has one.
///
/// Why not std::mutex: with glibc, its lock and unlock are out-of-line calls into
/// pthread_mutex_lock and pthread_mutex_unlock, which first look at the mutex's kind (normal,
/// recursive, error-checking, robust, priority-inheriting) before the same atomic operations;
/// a pool operation takes about 40 ns, and replaying RMM's random_allocations trace through
/// memory_pool<host_resource>, those two calls were 53 of its 458 instructions (callgrind). Like
/// glibc's default mutex, it does not spin before it sleeps.
///
/// Like glibc's own locks (and libstdc++'s shared_ptr reference counts), it takes and gives back
/// the lock with plain loads and stores while the process has a single thread, as glibc's
/// `__libc_single_threaded` says (glibc manual, "Single-Threaded"): no other thread can then
/// contend, and a thread created later sees the lock's state through pthread_create's
/// synchronisation. A lock-prefixed instruction costs about 10 ns on the machines this project
/// measures on, and a pool operation takes and gives back the lock once. Where the C library has
/// no such variable, every operation is atomic.
#include <atomic>

#if defined(__has_include)
#  if __has_include(<sys/single_threaded.h>)
#    include <sys/single_threaded.h>
#    define DEVICEKIT_HAS_LIBC_SINGLE_THREADED 1
#  endif
#endif

namespace devicekit::detail {

/// A mutex (Lockable) for short critical sections that never block on anything else.
class pool_mutex {
 public:
  pool_mutex() = default;
  pool_mutex(const pool_mutex&) = delete;
  pool_mutex& operator=(const pool_mutex&) = delete;

  void lock() noexcept {
    if (single_threaded() && state_.load(std::memory_order_relaxed) == unlocked) {
      state_.store(locked, std::memory_order_relaxed);
      return;
    }
    int seen = unlocked;
    if (state_.compare_exchange_strong(seen, locked, std::memory_order_acquire, std::memory_order_relaxed)) return;
    lock_contended(seen);
  }

  [[nodiscard]] bool try_lock() noexcept {
    int seen = unlocked;
    return state_.compare_exchange_strong(seen, locked, std::memory_order_acquire, std::memory_order_relaxed);
  }

  /// Whether this thread is the process's only one, so that lock and unlock need no atomic
  /// read-modify-write (false where the C library cannot say).
  [[nodiscard]] static bool single_threaded() noexcept {
#if DEVICEKIT_HAS_LIBC_SINGLE_THREADED
    return __libc_single_threaded != 0;
#else
    return false;
#endif
  }

  void unlock() noexcept {
    // Taken single-threaded, the lock may be given back by a process that has created a thread
    // since (the CUDA driver's, inside the critical section): that takes the exchange below.
    if (single_threaded() && state_.load(std::memory_order_relaxed) == locked) {
      state_.store(unlocked, std::memory_order_relaxed);
      return;
    }
    // Only a thread that found the lock taken marks it contended, so only then is anyone to wake.
    if (state_.exchange(unlocked, std::memory_order_release) == contended) state_.notify_one();
  }

 private:
  static constexpr int unlocked = 0;
  static constexpr int locked = 1;     ///< taken, nobody waiting
  static constexpr int contended = 2;  ///< taken, and a thread may be waiting

  void lock_contended(int seen) noexcept {
    // Mark the lock contended before sleeping, so that its holder wakes a waiter when it unlocks;
    // the exchange also takes the lock if it was freed meanwhile (it then stays marked
    // contended: at worst one wake-up too many).
    if (seen != contended) seen = state_.exchange(contended, std::memory_order_acquire);
    while (seen != unlocked) {
      state_.wait(contended, std::memory_order_relaxed);
      seen = state_.exchange(contended, std::memory_order_acquire);
    }
  }

  std::atomic<int> state_{unlocked};
};

}  // namespace devicekit::detail
