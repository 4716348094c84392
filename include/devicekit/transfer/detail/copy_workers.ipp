#pragma once
/// \file
/// The definitions behind transfer/detail/copy_workers.hpp: the copy threads and their jobs.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/copy_workers.hpp>

#include <devicekit/core/error.hpp>
#include <devicekit/core/settings.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <string>
#include <system_error>

#if defined(__x86_64__) || defined(_M_X64)
#  include <emmintrin.h>  // _mm_pause (SSE2, part of every x86-64 CPU)
#endif

#if defined(__linux__)
#  include <sched.h>
#endif
#include <unistd.h>

namespace devicekit::detail {

namespace copy_workers_impl {

/// The CPUs this process may run on: its affinity mask where the system has one.
inline std::size_t usable_cpus() noexcept {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<std::size_t>(std::max(1, CPU_COUNT(&set)));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

/// DEVICEKIT_COPY_THREADS, else half of usable_cpus(), at least 1 and at most 8.
inline std::size_t default_threads() {
  if (auto v = getenv_string("DEVICEKIT_COPY_THREADS"); v && !v->empty()) {
    std::size_t n = 0;
    const char* end = v->data() + v->size();
    const auto [p, ec] = std::from_chars(v->data(), end, n);
    if (ec != std::errc{} || p != end || n < 1 || n > max_host_copy_threads) {
      throw config_error("DEVICEKIT_COPY_THREADS='" + *v + "': expected a number of threads from 1 to " +
                         std::to_string(max_host_copy_threads) +
                         " (the host threads that share a staged copy, the calling thread included; 1 turns the "
                         "sharing off); unset it for the default, half the usable CPUs up to 8");
    }
    return n;
  }
  return std::clamp<std::size_t>(usable_cpus() / 2, 1, 8);
}

/// How long a thread that finished a job polls for the next before it sleeps: the chunks of one
/// transfer come microseconds apart, and waking a sleeping thread costs tens of microseconds
/// (libgomp's threads spin the same way before they block: GOMP_SPINCOUNT, OMP_WAIT_POLICY).
inline constexpr std::chrono::microseconds spin_before_sleep{100};

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

/// Polls `ready` for up to spin_before_sleep: the caller then sleeps on a condition variable if it
/// is still false.
template <class Ready>
void spin_until(Ready&& ready) noexcept {
  const auto until = std::chrono::steady_clock::now() + spin_before_sleep;
  while (!ready() && std::chrono::steady_clock::now() < until) cpu_relax();
}

}  // namespace copy_workers_impl

DEVICEKIT_DECL copy_workers& copy_workers::instance() {
  static copy_workers w;
  return w;
}

DEVICEKIT_DECL copy_workers::~copy_workers() { stop_all(); }

DEVICEKIT_DECL std::size_t copy_workers::threads() {
  std::lock_guard lk(m_);
  if (wanted_ == 0) wanted_ = copy_workers_impl::default_threads();
  return wanted_;
}

DEVICEKIT_DECL void copy_workers::set_threads(std::size_t n) {
  if (n > max_host_copy_threads) {
    throw config_error("set_host_copy_threads(" + std::to_string(n) + "): at most " +
                       std::to_string(max_host_copy_threads) + " threads (1 turns the sharing off, 0 is the default)");
  }
  const std::size_t wanted = n == 0 ? copy_workers_impl::default_threads() : n;
  std::lock_guard job_lock(caller_);  // no job runs while the threads change
  stop_all();
  std::lock_guard lk(m_);
  wanted_ = wanted;
}

DEVICEKIT_DECL void copy_workers::take_parts(job& j) noexcept {
  for (;;) {
    const std::size_t i = j.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= j.parts) return;
    j.fn(j.ctx, i);
    j.done.fetch_add(1, std::memory_order_release);
  }
}

DEVICEKIT_DECL void copy_workers::run_erased(std::size_t parts, task_fn fn, void* ctx) {
  auto alone = [&] {
    for (std::size_t i = 0; i < parts; ++i) fn(ctx, i);
  };
  if (parts <= 1) return alone();
  std::unique_lock job_lock(caller_, std::try_to_lock);
  if (!job_lock.owns_lock()) return alone();  // another thread's copy has the workers
  const std::size_t wanted = threads();
  if (wanted <= 1 || !start(wanted)) return alone();
  job j{fn, ctx, parts};
  {
    std::lock_guard lk(m_);
    current_ = &j;
    ++generation_;
    posted_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  take_parts(j);
  // The parts left are running on the workers: poll for them before sleeping, for the same reason
  // the workers poll (a wake-up costs tens of microseconds, about what a part takes).
  auto finished = [&] {
    return j.done.load(std::memory_order_acquire) == parts && active_.load(std::memory_order_acquire) == 0;
  };
  copy_workers_impl::spin_until(finished);
  std::unique_lock lk(m_);
  // A worker touches `j` only while counted in active_, and joins only while current_ is `j`:
  // once both conditions hold under the lock, none can reach it after this returns.
  finished_.wait(lk, finished);
  current_ = nullptr;
  shared_jobs_.fetch_add(1, std::memory_order_relaxed);
}

DEVICEKIT_DECL bool copy_workers::start(std::size_t wanted) {
  std::lock_guard lk(m_);
  const long pid = static_cast<long>(::getpid());
  if (!threads_.empty() && owner_pid_ != pid) return false;  // forked: those threads are not here
  owner_pid_ = pid;
  try {
    // Each thread starts from the current generation, so the job about to be posted wakes it
    // even if it has not reached its first wait yet.
    while (threads_.size() + 1 < wanted) threads_.emplace_back([this, g = generation_] { worker_loop(g); });
  } catch (const std::system_error&) {
    return !threads_.empty();  // work with the threads there are
  }
  return true;
}

DEVICEKIT_DECL void copy_workers::stop_all() {
  std::vector<std::thread> old;
  {
    std::lock_guard lk(m_);
    if (owner_pid_ != static_cast<long>(::getpid())) {
      // In a forked child the threads do not exist: forget them without joining.
      for (auto& t : threads_) t.detach();
      threads_.clear();
      return;
    }
    stopping_ = true;
    old.swap(threads_);
  }
  wake_.notify_all();
  for (auto& t : old) t.join();
  std::lock_guard lk(m_);
  stopping_ = false;
}

DEVICEKIT_DECL void copy_workers::worker_loop(std::uint64_t seen) {
  for (;;) {
    copy_workers_impl::spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
    std::unique_lock lk(m_);
    wake_.wait(lk, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    job* j = current_;
    if (j == nullptr) continue;  // that job finished before this thread woke
    ++active_;
    lk.unlock();
    take_parts(*j);
    lk.lock();
    if (--active_ == 0) finished_.notify_all();
  }
}

}  // namespace devicekit::detail

namespace devicekit {

DEVICEKIT_DECL std::size_t host_copy_threads() { return detail::copy_workers::instance().threads(); }

DEVICEKIT_DECL void set_host_copy_threads(std::size_t n) { detail::copy_workers::instance().set_threads(n); }

}  // namespace devicekit
