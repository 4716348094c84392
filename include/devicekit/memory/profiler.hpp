#pragma once
/// \file
/// `memory_profiler`: a scoped view of one pool (like PyTorch's torch.cuda.memory profiling
/// window, or a JAX device memory profile of one step). While it lives it
/// records the peak of allocated bytes and the number of allocations and frees; profilers nest
/// (each sees every event while it lives, and a timeline-recording profiler marks the scopes of
/// the profilers opened inside it). With a timeline it can write a Chrome trace JSON file that
/// Perfetto (ui.perfetto.dev) and chrome://tracing open: a counter track of allocated and
/// reserved bytes over time, and one slice per profiler scope.
///
///   {
///     devicekit::memory_profiler prof(dm.memory(), "forward", {.record_timeline = true});
///     model.forward(batch);
///     std::cout << prof.peak_bytes() << " bytes at peak, " << prof.allocation_count() << " allocations\n";
///     prof.write_chrome_trace("forward.trace.json");
///   }
///
/// Explicit control, besides the scope: `stop()` pauses the profiler and `start()` resumes it,
/// like a stopwatch (to leave out an evaluation pass inside a training step, say):
///   - stop() keeps everything recorded so far readable; events while stopped are not counted.
///   - start() adds to the same figures: counts and bytes_allocated go on summing, the peaks are
///     the highest over all running periods, peak_increase_bytes stays relative to what was
///     allocated at the first start, and the timeline gets one more slice (a start and a stop
///     sample around each period; the trace shows one scope slice per period).
///   - stop() on a stopped profiler and start() on a running one do nothing; the destructor
///     stops a running profiler. For fresh figures, make a new profiler.
/// start() and stop() of one profiler belong to one thread at a time; the figures may be read
/// from any thread.
///
/// A profiler must not outlive its pool. Recording costs one sample per allocation or free
/// (24 bytes) while a timeline is recorded, nothing otherwise.
#include <devicekit/memory/device_memory.hpp>

#include <devicekit/memory/detail/pool_observers.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

namespace detail {
/// A profiler's state: one observer of the pool (detail/pool_observers.hpp), updated by the pool
/// under its lock.
struct profile_state final : pool_observer {
  struct sample {
    double t_us;
    std::size_t allocated;
    std::size_t reserved;
  };
  struct marker {
    double t_us;
    bool begin;
    std::string name;
  };
  std::string name;
  bool record_timeline = false;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::size_t start_allocated = 0;
  std::size_t peak_allocated = 0;
  std::size_t peak_reserved = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t ooms = 0;
  std::size_t bytes_allocated = 0;
  std::vector<sample> samples;
  std::vector<marker> markers;

  [[nodiscard]] double now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }

  void on_event(pool_event e, std::size_t bytes, std::size_t allocated, std::size_t reserved) override;
  void on_attach(std::size_t allocated, std::size_t reserved) override;
  void on_detach(std::size_t allocated, std::size_t reserved) override;
  void on_scope(bool begin, const std::string& other) override {
    if (record_timeline) markers.push_back({now_us(), begin, other});
  }
  [[nodiscard]] const std::string& observer_name() const noexcept override { return name; }
};
}  // namespace detail

struct profiler_options {
  bool record_timeline = false;  ///< keep every sample for write_chrome_trace / timeline()
};

class memory_profiler {
 public:
  using sample = detail::profile_state::sample;

  explicit memory_profiler(device_memory& memory, std::string name = "memory_profiler", profiler_options options = {})
      : memory_(&memory) {
    state_.name = std::move(name);
    state_.record_timeline = options.record_timeline;
    memory_->attach_observer(&state_);
  }
  memory_profiler(const memory_profiler&) = delete;
  memory_profiler& operator=(const memory_profiler&) = delete;
  ~memory_profiler() { stop(); }

  /// Pauses recording (ends the scope early when not started again); the figures stay readable.
  /// Does nothing when already stopped.
  void stop() {
    if (!running_) return;
    memory_->detach_observer(&state_);
    running_ = false;
  }
  /// Resumes recording after stop(), adding to the figures recorded so far (see the file's
  /// comment). Does nothing when already running.
  void start();
  /// Whether events are being recorded: from construction to stop(), and after start().
  [[nodiscard]] bool running() const noexcept { return running_; }
  [[nodiscard]] const std::string& name() const noexcept { return state_.name; }

  /// The highest allocated bytes (of the whole pool) seen while the profiler ran.
  [[nodiscard]] std::size_t peak_bytes() const {
    return read([&] { return peak_allocated_locked(); });
  }
  /// How far the peak rose above what was allocated when the profiler (first) started.
  [[nodiscard]] std::size_t peak_increase_bytes() const;
  [[nodiscard]] std::size_t peak_reserved_bytes() const {
    return read([&] { return std::max(carried_peak_reserved_, state_.peak_reserved); });
  }
  [[nodiscard]] std::uint64_t allocation_count() const {
    return read([&] { return state_.allocations; });
  }
  [[nodiscard]] std::uint64_t free_count() const {
    return read([&] { return state_.frees; });
  }
  [[nodiscard]] std::size_t bytes_allocated() const {
    return read([&] { return state_.bytes_allocated; });
  }
  [[nodiscard]] std::uint64_t oom_count() const {
    return read([&] { return state_.ooms; });
  }
  /// The samples so far (empty unless record_timeline).
  [[nodiscard]] std::vector<sample> timeline() const {
    return read([&] { return state_.samples; });
  }

  /// Writes the timeline as Chrome trace event JSON (Perfetto opens it).
  void write_chrome_trace(std::ostream& os) const;
  /// Writes the trace to `path`; config_error if the file cannot be written.
  void write_chrome_trace(const std::string& path) const;

 private:
  template <class F>
  std::invoke_result_t<F&> read(F&& f) const {
    return memory_->with_lock(f);
  }

  [[nodiscard]] std::size_t peak_allocated_locked() const {
    return std::max(carried_peak_allocated_, state_.peak_allocated);
  }

  static std::string escape(const std::string& s);

  device_memory* memory_;
  detail::profile_state state_;
  bool running_ = true;
  // Figures of the periods before the last start() (read and written under the pool's lock).
  bool resumed_ = false;
  std::size_t first_start_allocated_ = 0;
  std::size_t carried_peak_allocated_ = 0;
  std::size_t carried_peak_reserved_ = 0;
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/profiler.ipp>
#endif
