#pragma once
/// \file
/// The definitions behind core/capture.hpp: the capture query, the refusal and the ledger.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/capture.hpp>
#include <devicekit/core/detail/driver_entry_point.hpp>

#include <algorithm>
#include <optional>

namespace devicekit {

#if DEVICEKIT_HAS_CUDA
namespace detail {
/// The driver's cuStreamIsCapturing (CUresult (CUstream, CUstreamCaptureStatus*), both enums of
/// int size), fetched once (driver_entry_point.hpp); nullptr where the driver does not hand it out.
using stream_is_capturing_fn = int (*)(native_stream_handle, int*);
inline stream_is_capturing_fn driver_stream_is_capturing() noexcept {
  static const stream_is_capturing_fn fn = driver_entry_point<stream_is_capturing_fn>("cuStreamIsCapturing");
  return fn;
}
}  // namespace detail
#endif

DEVICEKIT_DECL capture_state capture_of([[maybe_unused]] native_stream_handle s) noexcept {
#if DEVICEKIT_HAS_CUDA
  // Every stream-ordered pool operation and every placement asks this, and nearly always of a
  // stream that is not capturing. On an H200 the driver's cuStreamIsCapturing answers in about
  // 15 ns where the runtime's cudaStreamGetCaptureInfo takes 60 to 110 ns (bench_memory,
  // pool.capture_query), so the driver answers first and the runtime is asked only for a
  // capture's id, or when the driver has no plain answer. A default-stream handle goes to the
  // runtime: what it names depends on how the calling code was compiled (--default-stream), which
  // the runtime knows and a driver entry point fetched here does not.
  if (s != nullptr && s != cudaStreamLegacy && s != cudaStreamPerThread) {
    if (const auto is_capturing = detail::driver_stream_is_capturing(); is_capturing != nullptr) {
      int driver_status = -1;
      // The driver leaves the runtime's last error as it was, whatever it answers.
      if (is_capturing(s, &driver_status) == 0 && driver_status == static_cast<int>(cudaStreamCaptureStatusNone))
        return {};
    }
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(s, &status, &id) != cudaSuccess) {
    // The legacy stream while a blocking stream of its device captures answers
    // cudaErrorStreamCaptureImplicit: it is not capturing itself, and the work the caller queues
    // on it next fails with that error, which is the one the caller should see.
    (void)cudaGetLastError();
    return {};
  }
  if (status == cudaStreamCaptureStatusActive) return {true, false, id};
  if (status == cudaStreamCaptureStatusInvalidated) return {false, true, 0};
#endif
  return {};
}

DEVICEKIT_DECL capture_state capture_of(stream_ref s) noexcept {
#if DEVICEKIT_HAS_CUDA
  if (s.get_device().is_cpu()) return {};
  // A default-stream handle names the stream of the current device (CUDA runtime API, "Stream
  // synchronization behavior").
  const native_stream_handle h = s.native_handle();
  std::optional<scoped_device> on;
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
    on.emplace(s.get_device().ordinal(), std::nothrow);
  return capture_of(h);
#else
  (void)s;
  return {};
#endif
}

namespace detail {

DEVICEKIT_DECL void refuse_in_capture(const std::string& operation, const std::string& why,
                                      const std::string& what_to_do) {
  throw capture_error(operation + ": " + why + " while its stream is being captured into a CUDA graph (" +
                      "a graph replays only the work queued on its streams); " + what_to_do);
}

DEVICEKIT_DECL graph_memory_ledger& graph_memory_ledger::instance() {
  // Never destroyed: pools held by statics withdraw during exit, after a function-local static
  // ledger could already be gone.
  static auto* ledger = new graph_memory_ledger;
  return *ledger;
}

DEVICEKIT_DECL void graph_memory_ledger::enlist(unsigned long long id, graph_memory_holder* h) {
  std::lock_guard lock(mutex_);
  for (const entry& e : entries_) {
    if (e.id == id && e.holder == h) return;
  }
  entries_.push_back({id, h});
}

DEVICEKIT_DECL void graph_memory_ledger::withdraw(graph_memory_holder* h) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(entries_, [h](const entry& e) { return e.holder == h; });
}

DEVICEKIT_DECL std::size_t graph_memory_ledger::live_bytes(unsigned long long id) const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const entry& e : entries_) {
    if (e.id == id) n += e.holder->capture_live_bytes(id);
  }
  return n;
}

DEVICEKIT_DECL std::size_t graph_memory_ledger::peak_bytes(unsigned long long id) const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const entry& e : entries_) {
    if (e.id == id) n += e.holder->capture_peak_bytes(id);
  }
  return n;
}

DEVICEKIT_DECL void graph_memory_ledger::release(unsigned long long id) noexcept {
  std::vector<std::shared_ptr<void>> dropped;  // let go after the lock: their deleters may lock pools
  {
    // Under the lock, so that a holder cannot withdraw (be destroyed) meanwhile. The order is
    // always ledger, then holder: a holder never calls the ledger while holding its own lock.
    std::lock_guard lock(mutex_);
    for (const entry& e : entries_) {
      if (e.id == id) e.holder->release_capture(id);
    }
    std::erase_if(entries_, [id](const entry& e) { return e.id == id; });
    for (auto& [kid, r] : kept_) {
      if (kid == id) dropped.push_back(std::move(r));
    }
    std::erase_if(kept_, [id](const auto& k) { return k.first == id; });
  }
}

DEVICEKIT_DECL void graph_memory_ledger::keep_alive(unsigned long long id, std::shared_ptr<void> resource) {
  std::lock_guard lock(mutex_);
  kept_.emplace_back(id, std::move(resource));
}

DEVICEKIT_DECL bool graph_memory_ledger::keeps_alive(unsigned long long id) const {
  std::lock_guard lock(mutex_);
  return std::any_of(kept_.begin(), kept_.end(), [id](const auto& k) { return k.first == id; });
}

}  // namespace detail
}  // namespace devicekit
