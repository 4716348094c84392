#pragma once
/// \file
/// Host threads that share the host's half of a staged transfer: packing pageable leaves into
/// pinned staging before a host-to-device copy, and unpacking staging into them after a
/// device-to-host one; and large host-to-host copies (placement on the CPU device, copy.hpp). One thread's memcpy moves a fraction of what the copy engine does (on an
/// H200 host, about 7 GB/s against 55 GB/s for a pinned host-to-device copy), so a pageable
/// transfer staged by one thread runs at the memcpy's rate, not the bus's. Splitting each chunk's
/// copies over a few threads, while the copy engine moves the chunk before, lets the packing keep
/// up: the reason the CUDA Programming Guide gives for pinned memory (page-locked memory is what
/// the copy engine can read) leaves the host to fill it fast enough.
///
/// The threads are started on the first copy that needs them and wait on a condition variable
/// between jobs. How many (the calling thread included): set_host_copy_threads(n), else the
/// environment variable DEVICEKIT_COPY_THREADS, else half the CPUs this process may run on (its
/// affinity mask, so that MPI ranks bound to cores do not oversubscribe them; the other half is
/// left to the program's own threads), at most 8. More threads still pack faster where cores are
/// free (on a 16-core H200 host, 33-36 GB/s with 8 threads, 46-50 GB/s with 16: bench_place,
/// staging.pack.by_threads), but a default that takes every core would take them from the
/// program's own threads; DEVICEKIT_COPY_THREADS raises it. 1 turns the sharing off, as the default does with fewer than four CPUs: there the
/// other thread would share a core's memory bandwidth, and waking it (tens of microseconds on a
/// small virtual machine) costs about what it saves on a chunk of a few MiB.
///
/// Pinning the caller's pages instead (cudaHostRegister) is not done: registering costs about as
/// much as the copy it would save unless the same memory is sent many times, and devicekit cannot
/// know when a caller's pageable memory is freed, after which a registration would go stale.
#include <devicekit/core/config.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace devicekit {

/// How many host threads share the packing and unpacking of a staged transfer, the calling
/// thread included (see transfer/detail/copy_workers.hpp). Throws config_error when
/// DEVICEKIT_COPY_THREADS holds something other than a number from 1 to 64.
[[nodiscard]] DEVICEKIT_DECL std::size_t host_copy_threads();

/// Sets that number: 1 turns the sharing off, 0 goes back to the default (DEVICEKIT_COPY_THREADS,
/// else half the CPUs this process may run on, at most 8). Waits for a staged copy that is using the
/// threads; throws config_error above 64.
DEVICEKIT_DECL void set_host_copy_threads(std::size_t n);

}  // namespace devicekit

namespace devicekit::detail {

inline constexpr std::size_t max_host_copy_threads = 64;

/// A part of a staged chunk smaller than this stays on the calling thread. Waking a sleeping
/// thread costs up to tens of microseconds, about what one thread copies of a few hundred KiB,
/// but the threads poll between the pieces of one transfer, so only its first piece pays that:
/// small enough that the 1 MiB pieces of a pipelined 4 MiB transfer still go to eight threads.
inline constexpr std::size_t shared_copy_min_part_bytes = std::size_t{128} << 10;

/// The process's copy threads (one set, started on first use; see the file comment).
class copy_workers {
 public:
  [[nodiscard]] static copy_workers& instance();

  copy_workers() = default;
  copy_workers(const copy_workers&) = delete;
  copy_workers& operator=(const copy_workers&) = delete;
  ~copy_workers();

  /// The threads a job may use, the caller included.
  [[nodiscard]] std::size_t threads();
  /// 0: the default again. Waits for a running job, then stops the threads (they start again
  /// with the next job that needs them).
  void set_threads(std::size_t n);

  /// Runs task(i) for every i in [0, parts) and returns once all have run. The calling thread
  /// takes parts too; it runs them all alone when there is one part, one thread, or another
  /// thread's job holds the workers (no caller waits behind another's copy), and in a process
  /// forked after the threads started. `task` is called concurrently and must not throw.
  template <class F>
  void run(std::size_t parts, F& task) {
    run_erased(
        parts, [](void* f, std::size_t i) { (*static_cast<F*>(f))(i); }, &task);
  }

  /// Jobs that ran on more than one thread (for tests and benchmarks).
  [[nodiscard]] std::uint64_t shared_jobs() const noexcept { return shared_jobs_.load(std::memory_order_relaxed); }

 private:
  using task_fn = void (*)(void*, std::size_t);
  struct job {
    task_fn fn;
    void* ctx;
    std::size_t parts;
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> done{0};
  };

  void run_erased(std::size_t parts, task_fn fn, void* ctx);
  /// Starts the missing threads; false when the system refuses one (the caller then works alone).
  bool start(std::size_t wanted);
  void stop_all();
  void worker_loop(std::uint64_t seen);
  static void take_parts(job& j) noexcept;

  std::mutex caller_;  ///< held by the one caller whose job the workers run
  std::mutex m_;       ///< guards what follows
  std::condition_variable wake_;
  std::condition_variable finished_;
  std::vector<std::thread> threads_;
  job* current_ = nullptr;
  std::uint64_t generation_ = 0;
  std::atomic<std::uint64_t> posted_{0};  ///< generation_, for threads polling without the lock
  std::atomic<std::size_t> active_{0};    ///< workers inside the current job (changed under m_)
  bool stopping_ = false;
  std::size_t wanted_ = 0;  ///< 0: not yet decided
  long owner_pid_ = 0;      ///< the process that started the threads
  std::atomic<std::uint64_t> shared_jobs_{0};
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/copy_workers.ipp>
#endif
