#pragma once
/// \file
/// Where the stream-ordered forms of replicate and shard (replicate_into, shard_into;
/// place/shard.hpp) queue their copies: `stream_fork` makes one stream per destination device
/// wait for the caller's stream, and the caller's stream wait for all of them at the end. On a
/// capturing stream this is the fork and join of "Stream Capture" (CUDA C++ Programming Guide,
/// "Cross-stream Dependencies and Events"): the other streams join the capture through the events
/// and are joined back before the call returns, so the copies become nodes of the caller's graph.
/// `check_capturable` refuses, before anything is queued, the copies a graph cannot hold, and
/// `queue_fill` queues one device's copies and padding.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/transfer/detail/runs.hpp>

#include <cstddef>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// One device's part of a stream-ordered replicate or shard: the copies into its tree, and the
/// byte ranges there to zero first (shard's padding).
struct device_fill {
  device dev;
  std::vector<copy_run> runs;
  std::vector<std::pair<std::byte*, std::size_t>> zero;
};

}  // namespace devicekit::detail

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/stream.hpp>

#  include <span>
#  include <string>

namespace devicekit::detail {

/// A stream per device and thread for the forks of stream_fork, apart from the placement
/// streams (calls without a stream use those; a stream joined into a capture would take their
/// work into the graph). Destroyed at thread exit.
[[nodiscard]] DEVICEKIT_DECL const stream& fork_stream(device dev);

/// The caller's stream `origin` forked onto one stream per cuda device of `devices`: the origin
/// itself for its own device, fork_stream for the others, each made to wait for the work queued
/// on `origin` so far. join() (or the destructor, ignoring errors) makes `origin` wait for
/// everything queued on the forks.
class stream_fork {
 public:
  DEVICEKIT_DECL stream_fork(stream_ref origin, const std::vector<device>& devices);
  stream_fork(const stream_fork&) = delete;
  stream_fork& operator=(const stream_fork&) = delete;
  DEVICEKIT_DECL ~stream_fork();

  /// The stream to queue `dev`'s work on (one of the devices given).
  [[nodiscard]] DEVICEKIT_DECL native_stream_handle on(device dev) const;
  /// The origin waits for every fork: each records an event, the origin waits for it.
  DEVICEKIT_DECL void join();

 private:
  stream_ref origin_;
  std::vector<std::pair<device, native_stream_handle>> forks_;
  bool joined_ = false;
};

/// Throws capture_error, naming `operation`, when `fills` hold a copy a graph cannot replay: a
/// cpu destination, a source in pageable host memory, or two devices without peer access (the
/// copy would pass through host staging). Queues nothing.
DEVICEKIT_DECL void check_capturable(const std::string& operation, std::span<const device_fill> fills);

/// Queues `fill` on `s`, a stream of fill.dev: the zeroing (cudaMemsetAsync), then the copies
/// (copy_runs: the copy engine's paths, its capture path on a capturing stream).
DEVICEKIT_DECL void queue_fill(const device_fill& fill, native_stream_handle s);

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/detail/shard_streams.ipp>
#endif
