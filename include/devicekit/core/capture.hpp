#pragma once
/// \file
/// CUDA stream capture as devicekit's layers see it: whether a stream is capturing, the error for
/// work that cannot be captured, and the ledger through which graph memory is given back.
///
/// Stream capture ("CUDA Graphs", CUDA C++ Programming Guide) records the work queued on a stream
/// into a graph instead of running it. What devicekit must know at each call is only whether the
/// stream it was given is capturing: then it may not wait on the host, query events it recorded
/// inside the capture, call cudaMemcpyBatchAsync (the runtime refuses it during capture with
/// cudaErrorStreamCaptureUnsupported), stage host bytes at call time (a replay would not stage
/// them again), or hand out memory that eager work could take while the graph still uses it.
/// Each layer asks `capture_of(stream)` and takes its capture path; what has none throws
/// `capture_error`, saying why and what to do, before anything is queued.
///
/// Graph memory: a devicekit pool serves a capturing stream from CUDA's graph memory nodes
/// (memory/device_memory.hpp). Such memory belongs to the graph, so the pool keeps counting it
/// against its budget until the graph is destroyed; `graph_memory_ledger` is how the graph
/// (core/graph.hpp), which knows nothing of pools, tells every pool that served its capture.
#include <devicekit/core/config.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

/// Work that cannot be queued on a capturing stream. The message names the operation, why a graph
/// cannot hold it, and what to do instead. Thrown before anything is queued: the capture is as it
/// was, and can be ended (dk::capture ends it itself).
class capture_error : public error {
 public:
  using error::error;
};

/// A stream's capture state (cuStreamIsCapturing, and cudaStreamGetCaptureInfo for the id).
struct capture_state {
  bool active = false;        ///< capturing now
  bool invalidated = false;   ///< was capturing, and an invalid call ended what can be captured
  unsigned long long id = 0;  ///< the capture sequence, unique in the process (0 when not capturing)
  explicit operator bool() const noexcept { return active; }
};

/// The capture state of `s`, a stream of the current device when it is a default-stream handle.
/// Without CUDA, and for a cpu stream, nothing captures.
[[nodiscard]] DEVICEKIT_DECL capture_state capture_of(native_stream_handle s) noexcept;
/// The capture state of `s` (its device is made current for a default-stream handle).
[[nodiscard]] DEVICEKIT_DECL capture_state capture_of(stream_ref s) noexcept;

namespace detail {

/// Throws capture_error: "<operation>: <why> while <stream> is being captured into a CUDA graph;
/// <what_to_do>".
[[noreturn]] DEVICEKIT_DECL void refuse_in_capture(const std::string& operation, const std::string& why,
                                                   const std::string& what_to_do);

/// Whoever holds memory on behalf of captured graphs: a devicekit pool, for the graph memory
/// nodes it made on capturing streams.
class graph_memory_holder {
 public:
  /// The bytes of capture `id` still allocated (made in it and not freed in it).
  [[nodiscard]] virtual std::size_t capture_live_bytes(unsigned long long id) const noexcept = 0;
  /// The most bytes capture `id` held at once: what its graph reserves while it exists.
  [[nodiscard]] virtual std::size_t capture_peak_bytes(unsigned long long id) const noexcept = 0;
  /// Forgets capture `id`: its graph is gone (or was never made), so its memory is no longer
  /// counted.
  virtual void release_capture(unsigned long long id) noexcept = 0;

 protected:
  graph_memory_holder() = default;
  graph_memory_holder(const graph_memory_holder&) = default;
  graph_memory_holder& operator=(const graph_memory_holder&) = default;
  ~graph_memory_holder() = default;  // never deleted through the interface
};

/// The process's holders of graph memory, by capture sequence. Thread-safe. A holder enlists
/// when it first serves a capture and withdraws when it is destroyed, never while holding a lock
/// of its own (the ledger calls holders under its lock); a graph asks the ledger for its memory
/// and releases it when destroyed.
class graph_memory_ledger {
 public:
  [[nodiscard]] DEVICEKIT_DECL static graph_memory_ledger& instance();

  DEVICEKIT_DECL void enlist(unsigned long long id, graph_memory_holder* h);
  DEVICEKIT_DECL void withdraw(graph_memory_holder* h) noexcept;
  /// Sums over the holders of capture `id`.
  [[nodiscard]] DEVICEKIT_DECL std::size_t live_bytes(unsigned long long id) const;
  [[nodiscard]] DEVICEKIT_DECL std::size_t peak_bytes(unsigned long long id) const;
  /// Every holder of `id` forgets it, and what keep_alive kept for it goes.
  DEVICEKIT_DECL void release(unsigned long long id) noexcept;
  /// Keeps `resource` for as long as the graph of capture `id`: host memory that a captured copy
  /// reads at every launch (a kernel's argument table in pinned memory, say).
  DEVICEKIT_DECL void keep_alive(unsigned long long id, std::shared_ptr<void> resource);
  /// Whether keep_alive kept anything for `id`: its graph must then see its last launch complete
  /// before it lets go (graph::reset).
  [[nodiscard]] DEVICEKIT_DECL bool keeps_alive(unsigned long long id) const;

 private:
  graph_memory_ledger() = default;
  struct entry {
    unsigned long long id;
    graph_memory_holder* holder;
  };
  mutable std::mutex mutex_;
  std::vector<entry> entries_;
  std::vector<std::pair<unsigned long long, std::shared_ptr<void>>> kept_;
};

}  // namespace detail
}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/capture.ipp>
#endif
