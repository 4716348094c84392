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
#include <cstdio>
#include <fstream>
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

  void on_event(pool_event e, std::size_t bytes, std::size_t allocated, std::size_t reserved) override {
    switch (e) {
      case pool_event::grew: peak_reserved = std::max(peak_reserved, reserved); return;
      case pool_event::out_of_memory: ++ooms; return;
      case pool_event::allocate:
        ++allocations;
        bytes_allocated += bytes;
        break;
      case pool_event::free: ++frees; break;
      case pool_event::other: break;
    }
    peak_allocated = std::max(peak_allocated, allocated);
    peak_reserved = std::max(peak_reserved, reserved);
    if (record_timeline) samples.push_back({now_us(), allocated, reserved});
  }
  void on_attach(std::size_t allocated, std::size_t reserved) override {
    start_allocated = peak_allocated = allocated;
    peak_reserved = reserved;
    if (record_timeline) {
      markers.push_back({now_us(), true, name});
      samples.push_back({now_us(), allocated, reserved});
    }
  }
  void on_detach(std::size_t allocated, std::size_t reserved) override {
    if (record_timeline) {
      samples.push_back({now_us(), allocated, reserved});
      markers.push_back({now_us(), false, name});
    }
  }
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
  void start() {
    if (running_) return;
    // Attaching sets the start and peak figures to the pool's present ones: the earlier periods'
    // are carried here first, and the readers combine both under the pool's lock, so a reader
    // never sees the peak drop.
    read([&] {
      if (!resumed_) first_start_allocated_ = state_.start_allocated;
      resumed_ = true;
      carried_peak_allocated_ = std::max(carried_peak_allocated_, state_.peak_allocated);
      carried_peak_reserved_ = std::max(carried_peak_reserved_, state_.peak_reserved);
      return 0;
    });
    memory_->attach_observer(&state_);
    running_ = true;
  }
  /// Whether events are being recorded: from construction to stop(), and after start().
  [[nodiscard]] bool running() const noexcept { return running_; }
  [[nodiscard]] const std::string& name() const noexcept { return state_.name; }

  /// The highest allocated bytes (of the whole pool) seen while the profiler ran.
  [[nodiscard]] std::size_t peak_bytes() const {
    return read([&] { return peak_allocated_locked(); });
  }
  /// How far the peak rose above what was allocated when the profiler (first) started.
  [[nodiscard]] std::size_t peak_increase_bytes() const {
    return read([&] {
      const std::size_t peak = peak_allocated_locked();
      return peak - std::min(peak, resumed_ ? first_start_allocated_ : state_.start_allocated);
    });
  }
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
  void write_chrome_trace(std::ostream& os) const {
    const auto [samples, markers] = read([&] { return std::make_pair(state_.samples, state_.markers); });
    const std::string dev = memory_->get_device().str();
    os << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    os << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"devicekit memory " << dev
       << "\"}},\n";
    os << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"profiler scopes\"}}";
    char ts[64];
    for (const auto& s : samples) {
      std::snprintf(ts, sizeof ts, "%.3f", s.t_us);
      os << ",\n{\"name\":\"memory " << dev << " (bytes)\",\"ph\":\"C\",\"pid\":1,\"ts\":" << ts
         << ",\"args\":{\"allocated\":" << s.allocated << ",\"reserved\":" << s.reserved << "}}";
    }
    // Slices must nest: a scope still open inside this profiler when it stopped ends there (this
    // profiler saw no more of it), and the end it reports later is dropped.
    std::vector<const std::string*> open;
    auto slice = [&](const std::string& name, bool begin, double t_us) {
      std::snprintf(ts, sizeof ts, "%.3f", t_us);
      os << ",\n{\"name\":\"" << escape(name) << "\",\"ph\":\"" << (begin ? 'B' : 'E')
         << "\",\"pid\":1,\"tid\":1,\"ts\":" << ts << "}";
    };
    for (const auto& m : markers) {
      if (m.begin) {
        open.push_back(&m.name);
        slice(m.name, true, m.t_us);
        continue;
      }
      const auto it = std::find_if(open.rbegin(), open.rend(), [&](const std::string* n) { return *n == m.name; });
      if (it == open.rend()) continue;
      const auto keep = static_cast<std::size_t>(open.rend() - it) - 1;
      while (open.size() > keep) {
        slice(*open.back(), false, m.t_us);
        open.pop_back();
      }
    }
    os << "\n]}\n";
  }
  /// Writes the trace to `path`; config_error if the file cannot be written.
  void write_chrome_trace(const std::string& path) const {
    std::ofstream f(path);
    if (!f) throw config_error("memory_profiler: cannot open '" + path + "' for writing");
    write_chrome_trace(f);
    if (!f) throw config_error("memory_profiler: writing '" + path + "' failed");
  }

 private:
  template <class F>
  std::invoke_result_t<F&> read(F&& f) const {
    return memory_->with_lock(f);
  }

  [[nodiscard]] std::size_t peak_allocated_locked() const {
    return std::max(carried_peak_allocated_, state_.peak_allocated);
  }

  static std::string escape(const std::string& s) {
    std::string out;
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
        out += buf;
      } else {
        out += c;
      }
    }
    return out;
  }

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
