#pragma once
/// \file
/// Ready events: the handshake between devicekit's stream-ordered work and code outside it (a
/// kernel launched on a stream of yours, another library), in both directions, without waiting on
/// the host.
///
///   record_ready(placed, s)     a `ready_event` recorded on `s` after the work queued there so far
///                               (the copy that filled `placed`): other code makes its own stream
///                               wait for it (`cudaStreamWaitEvent(theirs, ev.native_handle(), 0)`
///                               or `ev.wait(stream_ref(theirs))`) and then reads the tree there
///   record_ready(shards, streams) one event per device for what replicate and shard return
///                               (`streams`: {s...}, a std::vector<stream>, any range of streams)
///   wait_ready(s, producer)     devicekit's work queued on `s` after this call waits for the work
///                               an external producer recorded in its event `producer`
///
/// These are jaxlib's ready futures of a PjRtBuffer (what `jax.Array.block_until_ready` waits
/// for) in CUDA terms, and DLPack's stream handshake (`__dlpack__(stream=...)`: the producer makes
/// the consumer's stream wait on an event rather than synchronising). An event captures the work
/// queued on its stream when it was recorded, and `cudaStreamWaitEvent` orders all later work of
/// the waiting stream after that work, also for an event of another device (CUDA runtime API,
/// cudaEventRecord and cudaStreamWaitEvent).
///
/// The empty `ready_event` stands for data that is ready already: trees in host memory (placement
/// there finishes before it returns), the only ones a build without CUDA has. Querying it says
/// ready, waiting for it returns at once, and its native handle is null; a null producer event
/// given to `wait_ready` means the same.
#include <devicekit/core/capture.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/detail/leaves.hpp>
#include <devicekit/place/sharded.hpp>
#include <devicekit/transfer/detail/streams.hpp>
#include <devicekit/tree/tree.hpp>

#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

#if DEVICEKIT_HAS_CUDA
/// The handle of a CUDA event (`cudaEvent_t`); `void*` in a build without CUDA.
using native_event_handle = cudaEvent_t;
#else
using native_event_handle = void*;
#endif

/// An owning, move-only CUDA event that marks data ready: what `record_ready` returns. The empty
/// event (default-constructed, moved from, released) stands for data that is ready already.
/// The event is destroyed with the object, which CUDA allows before the work it captured has
/// completed: the call does not block, and the event's resources go once that work is done
/// (cudaEventDestroy). Waits queued before keep the state they were queued with
/// (cudaStreamWaitEvent).
class ready_event {
 public:
  /// The empty event: ready already.
  ready_event() noexcept = default;

#if DEVICEKIT_HAS_CUDA
  /// Takes ownership of `ev`, an event of device `dev` (null: the empty event).
  ready_event(cudaEvent_t ev, device dev) noexcept : event_(ev), device_(ev != nullptr ? dev : device::cpu()) {}
#endif

  ready_event(const ready_event&) = delete;
  ready_event& operator=(const ready_event&) = delete;
  ready_event(ready_event&& other) noexcept
      : event_(std::exchange(other.event_, nullptr)), device_(std::exchange(other.device_, device::cpu())) {}
  ready_event& operator=(ready_event&& other) noexcept {
    if (this != &other) {
      destroy();
      event_ = std::exchange(other.event_, nullptr);
      device_ = std::exchange(other.device_, device::cpu());
    }
    return *this;
  }
  ~ready_event() { destroy(); }

  /// The CUDA event, for `cudaStreamWaitEvent` and the like; null for the empty event. It stays
  /// this object's: do not destroy it (see release).
  [[nodiscard]] native_event_handle native_handle() const noexcept { return event_; }
  /// True for the empty event (ready already; no CUDA event).
  [[nodiscard]] bool empty() const noexcept { return event_ == nullptr; }
  /// The device of the stream the event was recorded on; cpu:0 for the empty event.
  [[nodiscard]] device get_device() const noexcept { return device_; }

  /// True once the work the event captured has finished (cudaEventQuery); never blocks.
  /// cuda_error when the runtime reports a failure of that work.
  [[nodiscard]] bool query() const {
#if DEVICEKIT_HAS_CUDA
    if (event_ == nullptr) return true;
    const cudaError_t r = cudaEventQuery(event_);
    if (r == cudaErrorNotReady) return false;  // a status, not the last error: nothing to clear
    check_cuda(r, "cudaEventQuery(event)");
#endif
    return true;
  }

  /// Makes the work queued on `s` after this call wait for the event, on the device
  /// (cudaStreamWaitEvent; `s` may be a stream of another device). On the cpu inline stream,
  /// whose work runs on the calling thread, the thread waits (synchronize).
  void wait(stream_ref s) const;

  /// Blocks the calling thread until the work the event captured has finished
  /// (cudaEventSynchronize; record_ready's events are made with cudaEventBlockingSync, so the
  /// thread sleeps rather than spins, core/detail/event.hpp).
  void synchronize() const {
#if DEVICEKIT_HAS_CUDA
    if (event_ != nullptr) check_cuda(cudaEventSynchronize(event_), "cudaEventSynchronize(event)");
#endif
  }

  /// Hands the CUDA event to the caller, who destroys it (cudaEventDestroy); the object is empty
  /// afterwards. Null for the empty event.
  [[nodiscard]] native_event_handle release() noexcept {
    device_ = device::cpu();
    return std::exchange(event_, nullptr);
  }

 private:
  void destroy() noexcept {
#if DEVICEKIT_HAS_CUDA
    if (event_ != nullptr && cuda_calls_allowed()) (void)cudaEventDestroy(event_);
#endif
    event_ = nullptr;
  }

  native_event_handle event_ = nullptr;
  device device_ = device::cpu();
};

/// Makes devicekit's work queued on `s` after this call (placement, copies, to_host on `s`, and
/// any other work queued there) wait for the work an external producer captured in `producer`
/// (an event it recorded on its own stream, of any device), without waiting on the host. On the
/// cpu inline stream the calling thread waits instead. A null `producer` is ready already.
/// The event stays the caller's. Without CUDA only a null event can be given (config_error
/// otherwise).
inline void wait_ready(stream_ref s, native_event_handle producer) {
  if (producer == nullptr) return;
#if DEVICEKIT_HAS_CUDA
  detail::check_device_exists(s.get_device(), "wait_ready");
  if (s.get_device().is_cpu()) {
    DEVICEKIT_CUDA_CHECK(cudaEventSynchronize(producer));
    return;
  }
  // A null handle names the legacy default stream of the current device: hence the guard.
  scoped_device on(s.get_device().ordinal());
  DEVICEKIT_CUDA_CHECK(cudaStreamWaitEvent(s.native_handle(), producer, 0));
#else
  (void)s;
  throw config_error("wait_ready: devicekit was built without CUDA, so there is no CUDA event to wait for");
#endif
}

/// wait_ready for a ready_event (ready_event::wait).
inline void wait_ready(stream_ref s, const ready_event& ev) { wait_ready(s, ev.native_handle()); }

inline void ready_event::wait(stream_ref s) const { wait_ready(s, event_); }

namespace detail {
#if DEVICEKIT_HAS_CUDA
/// An event of `dev` recorded on `s` (a stream of `dev`); refused while `s` is capturing a graph.
[[nodiscard]] inline ready_event record_ready_on(device dev, stream_ref s) {
  if (capture_of(s).active) {
    refuse_in_capture("record_ready",
                      "an event recorded on a capturing stream marks a point of the graph, not data that is ready",
                      "record it on the stream you launch the graph on, after cudaGraphLaunch");
  }
  // cudaEventRecord needs an event of the stream's device (context).
  scoped_device on(dev.ordinal());
  return ready_event(record_event(s.native_handle()), dev);
}
#endif
}  // namespace detail

/// An event recorded on `s` after the work queued there so far, which marks `placed` ready once
/// the work that fills it has been queued on `s` (place, copy, to_host's source... on `s`, or a
/// kernel of yours there). `s` must be a stream of the tree's device: device_mismatch otherwise,
/// and for a tree whose leaves lie on several GPUs (use the per-device form for what replicate
/// and shard return). A tree in host memory, or without array leaves, gets the empty event: it
/// is ready. capture_error while `s` is capturing a graph.
///
/// The event says nothing about the tree's lifetime: keep the tree until the work that waits for
/// the event and reads it has finished, as for any work of yours on a placed tree.
template <class T>
requires(!detail::is_per_device_v<T>) [[nodiscard]] ready_event record_ready(const T& placed, stream_ref s) {
  static_assert(require_tree<T>(),
                "record_ready(placed, s): placed must be a tree; for what replicate and shard return, pass one "
                "stream per device");
  const std::optional<device> dev = detail::source_device(placed, "record_ready");
  if (!dev) return {};
  if (s.get_device() != *dev) {
    detail::check_device_exists(s.get_device(), "record_ready");
    throw device_mismatch("record_ready: the tree is on " + dev->str() + " but the stream is on " +
                              s.get_device().str() + "; record on a stream of " + dev->str() +
                              " (the one its work was queued on)",
                          *dev, s.get_device());
  }
#if DEVICEKIT_HAS_CUDA
  return detail::record_ready_on(*dev, s);
#else
  throw config_error("record_ready: the tree is on " + dev->str() + " but devicekit was built without CUDA");
#endif
}

/// One event per device for what replicate and shard return: the i-th of `streams`, a stream of
/// `placed.devices[i]`, records the event of `placed[i]` (record_ready). `streams` is any range
/// of things that convert to stream_ref: a `std::vector<stream>` (the streams you made, one per
/// device), `stream_ref`s, an array, a span. config_error unless there is one stream per tree. A
/// consumer waits for each event it needs.
template <class Tree, std::ranges::forward_range Streams>
requires std::convertible_to<std::ranges::range_reference_t<const Streams&>, stream_ref>
[[nodiscard]] std::vector<ready_event> record_ready(const per_device<Tree>& placed, const Streams& streams) {
  const auto count = static_cast<std::size_t>(std::ranges::distance(streams));
  if (count != placed.size()) {
    throw config_error("record_ready: " + std::to_string(count) + " stream(s) for trees on " +
                       std::to_string(placed.size()) +
                       " device(s); pass one stream per device, in the order of placed.devices");
  }
  std::vector<ready_event> out;
  out.reserve(placed.size());
  std::size_t i = 0;
  for (const auto& s : streams) out.push_back(record_ready(placed[i++], stream_ref(s)));
  return out;
}

/// The same for a braced list of streams: `record_ready(shards, {s0, s1})`.
template <class Tree>
[[nodiscard]] std::vector<ready_event> record_ready(const per_device<Tree>& placed,
                                                    std::initializer_list<stream_ref> streams) {
  return record_ready<Tree, std::initializer_list<stream_ref>>(placed, streams);
}

}  // namespace devicekit
