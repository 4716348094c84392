#pragma once
// Test upstreams for the pool: `counting_upstream` wraps host memory and records what the pool
// took (so the pool's `reserved` can be checked against the truth) and can be told to refuse;
// `event_upstream` adds simulated streams and events, so that the stream-ordered logic runs on a
// machine without a GPU. Copies share their state (the pool holds a copy).
#include <devicekit/memory/pool.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace dk_test {

namespace dk = devicekit;

struct upstream_state {
  std::mutex mutex;
  std::size_t outstanding_bytes = 0;
  std::size_t allocations = 0;
  std::size_t frees = 0;
  std::size_t limit = SIZE_MAX;  ///< refuse allocations that would pass this (a device's capacity)
  int fail_next = 0;             ///< refuse this many allocations
  std::vector<std::size_t> chunk_sizes;
  std::map<void*, std::size_t> live;
  // events: id -> done
  std::map<std::uintptr_t, bool> events;
  std::map<std::uintptr_t, dk::native_stream_handle> event_stream;
  std::uintptr_t next_event = 1;
  std::size_t records = 0;
  std::size_t waits = 0;
  std::size_t destroyed_events = 0;
  std::vector<dk::native_stream_handle> destroyed_streams;
  std::size_t records_on_destroyed_streams = 0;                      ///< undefined behaviour on a real GPU
  std::map<dk::native_stream_handle, unsigned long long> capturing;  ///< stream -> capture id
  std::size_t capture_queries = 0;
  std::size_t fences = 0;
  std::vector<dk::native_stream_handle> foreign_streams;  ///< of another device: no fence covers them
};

class counting_upstream {
 public:
  counting_upstream() : s_(std::make_shared<upstream_state>()) {}

  void* allocate(std::size_t bytes, std::size_t alignment) {
    std::lock_guard lock(s_->mutex);
    if (s_->fail_next > 0) {
      --s_->fail_next;
      throw std::bad_alloc();
    }
    if (bytes > s_->limit - std::min(s_->limit, s_->outstanding_bytes)) throw std::bad_alloc();
    void* p = ::operator new (bytes, std::align_val_t{alignment});
    s_->outstanding_bytes += bytes;
    ++s_->allocations;
    s_->chunk_sizes.push_back(bytes);
    s_->live[p] = bytes;
    return p;
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
    std::lock_guard lock(s_->mutex);
    auto it = s_->live.find(p);
    if (it == s_->live.end() || it->second != bytes) std::abort();  // the pool returned what it did not take
    s_->live.erase(it);
    s_->outstanding_bytes -= bytes;
    ++s_->frees;
    ::operator delete (p, std::align_val_t{alignment});
  }
  [[nodiscard]] dk::device get_device() const noexcept { return dk::device::cpu(); }
  friend bool operator==(const counting_upstream& a, const counting_upstream& b) noexcept { return a.s_ == b.s_; }

  [[nodiscard]] upstream_state& state() const noexcept { return *s_; }
  [[nodiscard]] std::size_t outstanding() const {
    std::lock_guard lock(s_->mutex);
    return s_->outstanding_bytes;
  }

 protected:
  std::shared_ptr<upstream_state> s_;
};

/// Streams are plain handles made from integers; an event completes when the test says so
/// (`complete_events`) or when the pool waits on it.
class event_upstream : public counting_upstream {
 public:
  void* create_event(dk::native_stream_handle) {
    std::lock_guard lock(s_->mutex);
    const std::uintptr_t id = s_->next_event++;
    s_->events[id] = true;
    return reinterpret_cast<void*>(id);
  }
  void record_event(void* ev, dk::native_stream_handle s) {
    std::lock_guard lock(s_->mutex);
    s_->events.at(reinterpret_cast<std::uintptr_t>(ev)) = false;
    s_->event_stream[reinterpret_cast<std::uintptr_t>(ev)] = s;
    ++s_->records;
    for (auto d : s_->destroyed_streams) {
      if (d == s) ++s_->records_on_destroyed_streams;
    }
  }
  bool event_complete(void* ev) {
    std::lock_guard lock(s_->mutex);
    return s_->events.at(reinterpret_cast<std::uintptr_t>(ev));
  }
  void wait_event(void* ev) {
    std::lock_guard lock(s_->mutex);
    s_->events.at(reinterpret_cast<std::uintptr_t>(ev)) = true;
    ++s_->waits;
  }
  void destroy_event(void* ev) noexcept {
    std::lock_guard lock(s_->mutex);
    s_->events.erase(reinterpret_cast<std::uintptr_t>(ev));
    ++s_->destroyed_events;
  }

  /// Its streams are not CUDA streams, so it answers for their captures itself (the pool would
  /// otherwise ask the runtime, which may crash on a handle it did not make).
  dk::capture_state capture_of(dk::native_stream_handle s) {
    std::lock_guard lock(s_->mutex);
    ++s_->capture_queries;
    const auto it = s_->capturing.find(s);
    if (it == s_->capturing.end()) return {};
    return {true, false, it->second};
  }
  void begin_capture(dk::native_stream_handle s, unsigned long long id) {
    std::lock_guard lock(s_->mutex);
    s_->capturing[s] = id;
  }
  void end_capture(dk::native_stream_handle s) {
    std::lock_guard lock(s_->mutex);
    s_->capturing.erase(s);
  }

  /// The program destroys stream `s` (its queued work still completes, as with cudaStreamDestroy).
  void destroy_stream(dk::native_stream_handle s) {
    std::lock_guard lock(s_->mutex);
    s_->destroyed_streams.push_back(s);
  }

  /// Work queued so far on every stream (or one) has finished.
  void complete_events(dk::native_stream_handle only = reinterpret_cast<dk::native_stream_handle>(~std::uintptr_t{0})) {
    std::lock_guard lock(s_->mutex);
    for (auto& [id, done] : s_->events) {
      if (only == reinterpret_cast<dk::native_stream_handle>(~std::uintptr_t{0}) || s_->event_stream[id] == only)
        done = true;
    }
  }
};

/// An event_upstream with a device-wide fence, as cuda_device_resource has (cudaDeviceSynchronize):
/// it covers every stream but those marked foreign, and completes all their work.
class fenced_upstream : public event_upstream {
 public:
  bool fence_covers(dk::native_stream_handle s) {
    std::lock_guard lock(s_->mutex);
    for (auto f : s_->foreign_streams) {
      if (f == s) return false;
    }
    return true;
  }
  void fence() {
    std::lock_guard lock(s_->mutex);
    ++s_->fences;
    for (auto& [id, done] : s_->events) done = true;
  }
  void mark_foreign(dk::native_stream_handle s) {
    std::lock_guard lock(s_->mutex);
    s_->foreign_streams.push_back(s);
  }
};

inline dk::native_stream_handle fake_stream(std::uintptr_t n) {
  return reinterpret_cast<dk::native_stream_handle>(n * 4096);
}

static_assert(dk::upstream_resource<counting_upstream>);
static_assert(!dk::stream_event_source<counting_upstream>);
static_assert(dk::stream_event_source<event_upstream>);
static_assert(!dk::device_fence_source<event_upstream>);
static_assert(dk::device_fence_source<fenced_upstream>);

/// A small pool configuration for tests: tracking as asked, no environment dependence.
inline dk::pool_config test_config(std::size_t max_size = 256u << 20) {
  dk::pool_config c;
  c.max_size = max_size;
  c.tracking = dk::tracking_mode::off;
  return c;
}

/// test_config without small-size slabs: every block is exactly its request, so the tests can
/// count bytes and chunks.
inline dk::pool_config exact_config(std::size_t max_size = 256u << 20) {
  auto c = test_config(max_size);
  c.small_size_limit = 0;
  return c;
}

}  // namespace dk_test
