#pragma once
/// \file
/// The device a replay (memory/replay.hpp) runs a pool on: `replay_host_upstream` hands out
/// addresses from a range no memory backs (a pool never touches the memory it hands out, as it
/// cannot touch a GPU's), refused past the device's capacity; `replay_upstream` adds the events of
/// stream-ordered frees, which complete when the run saw them complete (its ready records), when
/// the pool waits for them, or at a fence, as the pool's own upstreams answer
/// (memory/resource_concepts.hpp: stream_event_source, device_fence_source).
#include <devicekit/core/capture.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/stream.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>

namespace devicekit::detail {

/// One device of a replay: its memory, shared by the pools replayed on it.
struct replay_device {
  std::uint64_t capacity = 0;  ///< 0: unlimited
  std::uint64_t used = 0;
  std::uint64_t outside = 0;  ///< what other clients held beside the pools (the run's outside records)
  std::uintptr_t next_address = std::uintptr_t{1} << 40;
};

/// One pool of a replay: where it stands in the trace, and what the run saw of its streams' events.
struct replay_pool_state {
  std::uint64_t last_seq = 0;
  std::unordered_map<std::uint64_t, std::uint64_t> ready_upto;  ///< by stream
};

struct replay_event {
  std::uint64_t stream = 0;
  std::uint64_t cover = 0;
  bool done = false;
};

/// The upstream of a replaying pool whose run had no stream-ordered work (host memory): addresses
/// from a range no memory backs (a pool never touches the memory it hands out), refused past the
/// device's capacity.
class replay_host_upstream {
 public:
  static constexpr bool is_device_accessible = true;
  static constexpr bool is_host_accessible = false;

  replay_host_upstream(device dev, replay_device* memory) : dev_(dev), memory_(memory) {}

  void* allocate(std::size_t bytes, std::size_t alignment) {
    const std::uint64_t taken = memory_->used + memory_->outside;
    if (memory_->capacity != 0 && bytes > memory_->capacity - std::min(memory_->capacity, taken)) {
      throw refusal("the replayed device has " +
                    std::to_string(memory_->capacity - std::min(memory_->capacity, taken)) + " of its " +
                    std::to_string(memory_->capacity) + " bytes left" +
                    (memory_->outside != 0 ? " (other clients hold " + std::to_string(memory_->outside) + ")" : ""));
    }
    const std::uintptr_t a = (memory_->next_address + alignment - 1) & ~(std::uintptr_t(alignment) - 1);
    if (a < memory_->next_address || bytes > address_limit - a) {
      throw refusal("the replay ran out of addresses (the trace asks for more than 2^62 bytes in all)");
    }
    memory_->next_address = a + bytes;
    memory_->used += bytes;
    return reinterpret_cast<void*>(a);
  }
  void deallocate(void*, std::size_t bytes, std::size_t) noexcept { memory_->used -= std::min(bytes, memory_->used); }
  [[nodiscard]] device get_device() const noexcept { return dev_; }
  /// What the run's other clients held of the device at this point of the replay.
  [[nodiscard]] std::uint64_t outside_bytes() const noexcept { return memory_->outside; }

 private:
  /// What the device says when it has no more: a std::bad_alloc, as host memory says it, which the
  /// pool turns into out_of_memory wherever it asks (its growth, and the start it preallocates).
  class refusal : public std::bad_alloc {
   public:
    explicit refusal(std::string what) : what_(std::move(what)) {}
    [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }

   private:
    std::string what_;
  };
  static constexpr std::uintptr_t address_limit = std::uintptr_t{1} << 62;
  device dev_;
  replay_device* memory_;
};

/// The upstream of a replaying pool whose run ordered frees on streams: events complete when the
/// run saw them complete (its ready records), when the pool waits for them, or at a fence.
class replay_upstream : public replay_host_upstream {
 public:
  replay_upstream(device dev, replay_device* memory, replay_pool_state* state, bool has_fence)
      : replay_host_upstream(dev, memory),
        state_(state),
        has_fence_(has_fence),
        events_(std::make_shared<std::deque<replay_event>>()) {}

  void* create_event(native_stream_handle) {
    events_->emplace_back();
    return &events_->back();
  }
  void record_event(void* ev, native_stream_handle s) {
    auto& e = *static_cast<replay_event*>(ev);
    e.stream = reinterpret_cast<std::uintptr_t>(s);
    e.cover = state_->last_seq + 1;
    e.done = false;
  }
  bool event_complete(void* ev) {
    auto& e = *static_cast<replay_event*>(ev);
    if (!e.done) {
      const auto it = state_->ready_upto.find(e.stream);
      e.done = it != state_->ready_upto.end() && it->second >= e.cover;
    }
    return e.done;
  }
  void wait_event(void* ev) { static_cast<replay_event*>(ev)->done = true; }
  void destroy_event(void*) noexcept {}
  bool fence_covers(native_stream_handle) { return has_fence_; }
  void fence() {
    for (auto& e : *events_) e.done = true;
  }
  /// The recorded handles are numbers, not streams: nothing is being captured (the pool would
  /// otherwise ask the CUDA runtime about them).
  capture_state capture_of(native_stream_handle) { return {}; }

 private:
  replay_pool_state* state_;
  bool has_fence_;
  std::shared_ptr<std::deque<replay_event>> events_;  // stable addresses; shared by the pool's copy
};

}  // namespace devicekit::detail
