#pragma once
/// \file
/// `pool_upstream`: the one interface through which a pool (device_memory) reaches where its
/// memory comes from, and `upstream_adapter<Upstream>`, its one implementation for any upstream
/// resource (memory/resources.hpp).
///
/// Why an abstract class: device_memory is the type placement code takes (`device_memory&`), so it
/// cannot be a template on its upstream; RMM's `device_memory_resource` (virtual do_allocate /
/// do_deallocate) and Thrust's `mr::memory_resource` make the same choice. The interface is
/// crossed only where the pool talks to its upstream: a chunk grows or is released, and a
/// stream-ordered free records its event. Allocations served from the cache make no virtual call.
///
/// The stream events are part of the one interface rather than a second one. An upstream that is
/// not a `stream_event_source` (host memory) has no work in flight on any stream: it reports
/// `has_events() == false` and the pool then treats every free as synchronous and asks for no
/// event: one interface, one vtable per pool type, and
/// no hooks with placeholder bodies in the pool itself.
#include <devicekit/core/capture.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/clients.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/resources.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace devicekit::detail {

class pool_upstream {
 public:
  pool_upstream(const pool_upstream&) = delete;
  pool_upstream& operator=(const pool_upstream&) = delete;

  /// A chunk of `bytes` aligned to `alignment`; throws when the upstream has none.
  virtual void* allocate(std::size_t bytes, std::size_t alignment) = 0;
  virtual void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept = 0;
  /// Hands back what the upstream caches itself (a driver pool's reserve), after the pool
  /// released its chunks.
  virtual void trim() noexcept = 0;

  /// Whether memory from this upstream is used by stream-ordered work (the event members below
  /// are called only then).
  [[nodiscard]] bool has_events() const noexcept { return has_events_; }
  /// Whether the upstream has a device-wide fence (fence() below does something).
  [[nodiscard]] bool has_fence() const noexcept { return has_fence_; }
  virtual void* create_event(native_stream_handle s) = 0;
  virtual void record_event(void* ev, native_stream_handle s) = 0;
  virtual bool event_complete(void* ev) = 0;
  virtual void wait_event(void* ev) = 0;
  virtual void destroy_event(void* ev) noexcept = 0;
  /// Whether fence() orders every earlier operation of stream `s` (a stream of the upstream's own
  /// device). Asked once per stream, when the pool first sees it; false for an upstream without a
  /// fence, whose streams' frees then each record an event.
  virtual bool fence_covers(native_stream_handle s) = 0;
  /// Waits, on the host, until every operation queued so far on the streams fence_covers()
  /// accepted has finished, without naming any of them (some may have been destroyed since).
  virtual void fence() = 0;
  /// Whether stream `s` is being captured into a CUDA graph. Called only when has_events(): the
  /// upstream that gives the stream's events knows what its stream handles are.
  virtual capture_state capture_of(native_stream_handle s) = 0;

  /// Stream-ordered allocation from the upstream itself, for a capturing stream: the capture
  /// records it as a graph memory node (memory/detail/graph_blocks.hpp). Called only when
  /// has_events(); throws capture_error for an upstream without stream-ordered allocation.
  virtual void* graph_allocate(std::size_t bytes, native_stream_handle s) = 0;
  /// The free node of a graph_allocate'd block, on the capturing stream.
  virtual void graph_deallocate(void* p, std::size_t bytes, native_stream_handle s) = 0;
  /// What other clients (NCCL's communicators) hold of GPU `d` beside the pools
  /// (memory/clients.hpp: device_client_bytes); a replay's upstream answers with what the run had
  /// recorded. Asked only when the pool grows.
  virtual std::uint64_t outside_bytes(device d) = 0;

 protected:
  pool_upstream(bool has_events, bool has_fence) noexcept : has_events_(has_events), has_fence_(has_fence) {}
  ~pool_upstream() = default;  // never deleted through the interface

 private:
  bool has_events_;
  bool has_fence_;
};

template <class U>
concept has_stream_ordered_allocation = requires(U& u, void* p, std::size_t n, native_stream_handle s) {
  { u.allocate_async(n, n, s) } -> std::same_as<void*>;
  u.deallocate_async(p, n, n, s);
};

/// An upstream that answers for its own streams' captures (resources.hpp).
template <class U>
concept has_capture_query = requires(U& u, native_stream_handle s) {
  { u.capture_of(s) } -> std::same_as<capture_state>;
};

/// An upstream with a device-wide fence (resources.hpp, `device_fence_source`).
template <class U>
concept has_device_fence = requires(U& u, native_stream_handle s) {
  { u.fence_covers(s) } -> std::same_as<bool>;
  u.fence();
};

template <class U>
concept has_upstream_trim = requires(U& u) {
  u.trim();
};

/// An upstream that says itself what other clients hold of its device (a replay's).
template <class U>
concept has_outside_bytes = requires(const U& u) {
  { u.outside_bytes() } -> std::same_as<std::uint64_t>;
};

/// Owns the upstream resource and implements pool_upstream for it.
template <class Upstream>
class upstream_adapter final : public pool_upstream {
 public:
  explicit upstream_adapter(Upstream upstream)
      : pool_upstream(stream_event_source<Upstream>, has_device_fence<Upstream>), upstream_(std::move(upstream)) {}
  ~upstream_adapter() = default;

  [[nodiscard]] Upstream& resource() noexcept { return upstream_; }
  [[nodiscard]] const Upstream& resource() const noexcept { return upstream_; }

  void* allocate(std::size_t bytes, std::size_t alignment) override { return upstream_.allocate(bytes, alignment); }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override {
    upstream_.deallocate(p, bytes, alignment);
  }
  void trim() noexcept override {
    if constexpr (has_upstream_trim<Upstream>) upstream_.trim();
  }

  // Without events (has_events() is false) the pool never calls these; what they do then is what
  // host memory means: no stream uses it, so every free is complete when it is made.
  void* create_event(native_stream_handle s) override {
    if constexpr (stream_event_source<Upstream>) return upstream_.create_event(s);
    (void)s;
    return nullptr;
  }
  void record_event(void* ev, native_stream_handle s) override {
    if constexpr (stream_event_source<Upstream>) upstream_.record_event(ev, s);
    (void)ev;
    (void)s;
  }
  bool event_complete(void* ev) override {
    if constexpr (stream_event_source<Upstream>) return upstream_.event_complete(ev);
    (void)ev;
    return true;
  }
  void wait_event(void* ev) override {
    if constexpr (stream_event_source<Upstream>) upstream_.wait_event(ev);
    (void)ev;
  }
  void destroy_event(void* ev) noexcept override {
    if constexpr (stream_event_source<Upstream>) upstream_.destroy_event(ev);
    (void)ev;
  }
  bool fence_covers(native_stream_handle s) override {
    if constexpr (has_device_fence<Upstream>) return upstream_.fence_covers(s);
    (void)s;
    return false;
  }
  void fence() override {
    if constexpr (has_device_fence<Upstream>) upstream_.fence();
  }
  capture_state capture_of(native_stream_handle s) override {
    if constexpr (has_capture_query<Upstream>) {
      return upstream_.capture_of(s);
    } else {
      return devicekit::capture_of(s);
    }
  }
  void* graph_allocate(std::size_t bytes, native_stream_handle s) override {
    if constexpr (has_stream_ordered_allocation<Upstream>) {
      return upstream_.allocate_async(bytes, pool_granule, s);
    } else {
      (void)bytes;
      (void)s;
      refuse_in_capture("allocate", "this pool's upstream has no stream-ordered allocation, which a graph needs",
                        "use a pool over cuda_device_resource (the manager's and placement's pools are)");
    }
  }
  void graph_deallocate(void* p, std::size_t bytes, native_stream_handle s) override {
    if constexpr (has_stream_ordered_allocation<Upstream>) upstream_.deallocate_async(p, bytes, pool_granule, s);
    (void)p;
    (void)bytes;
    (void)s;
  }
  std::uint64_t outside_bytes(device d) override {
    if constexpr (has_outside_bytes<Upstream>) {
      return upstream_.outside_bytes();
    } else {
      return device_client_bytes(d);
    }
  }

 private:
  Upstream upstream_;
};

}  // namespace devicekit::detail
