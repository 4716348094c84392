#pragma once
/// \file
/// The recording half of a memory trace (memory/trace.hpp): each pool's `pool_trace_log`, and the
/// one `memory_trace_writer` that owns the file.
///
/// A pool records only while a trace is open (one relaxed load and a branch per operation
/// otherwise), into its own log, under the lock it holds anyway: no lock of the trace's is taken
/// per record. PyTorch's caching allocator keeps its trace the same way, in a ring buffer beside
/// the allocator's own state, under the allocator's lock. A log hands its block of records to the
/// writer when it is full (1 MiB: a write per block is what recording costs most, after the bytes), when its pool goes, and when the trace ends; only then is the
/// writer's lock taken, innermost of all. What is left is the order of records across pools, which
/// each record carries (trace_order, detail/trace_format.hpp): one thread's records in the order
/// it made them, other threads' around the blocks written meanwhile.
#include <devicekit/core/config.hpp>
#include <devicekit/memory/detail/pool_mutex.hpp>
#include <devicekit/memory/detail/trace_format.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/memory/strategy.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <source_location>
#include <string>
#include <unordered_map>
#include <vector>

namespace devicekit::detail {

class memory_trace_writer;

/// The process's open trace, or null: what every pool operation reads (relaxed) before anything
/// else of tracing.
inline std::atomic<memory_trace_writer*> active_memory_trace{nullptr};

/// The calling thread's part of trace_order: its number, and how many records it made.
struct trace_thread_state {
  std::uint32_t number = 0;  ///< 0 until its first record
  std::uint64_t records = 0;
};
inline thread_local trace_thread_state trace_thread{};

/// The client whose allocation the calling thread is making (client_memory sets it around its call
/// into the pool, memory/client_memory.hpp), by its ledger's name, which lives as long as the
/// pool; null: devicekit's own. Read only while a trace records.
inline thread_local const std::string* trace_current_client = nullptr;

/// Names the client of the allocations the calling thread makes while it lives.
class trace_client_scope {
 public:
  explicit trace_client_scope(const std::string& client) noexcept : outer_(trace_current_client) {
    trace_current_client = &client;
  }
  ~trace_client_scope() { trace_current_client = outer_; }
  trace_client_scope(const trace_client_scope&) = delete;
  trace_client_scope& operator=(const trace_client_scope&) = delete;

 private:
  const std::string* outer_;
};

/// What a pool tells the trace of itself when it joins it.
struct trace_pool_description {
  std::string device_name;
  bool gpu = false;
  bool has_events = false;
  bool has_fence = false;
  const pool_config* config = nullptr;
  const memory_budget* budget = nullptr;
  std::size_t max_size = 0;
};

/// One pool's records, made under the pool's lock. Nothing here throws: a record that cannot be
/// kept (no memory for the log) ends the pool's part of the trace, and the writer says so.
class pool_trace_log {
 public:
  /// Whether the log records into the trace now open, whose epoch is `epoch`
  /// (memory_trace_writer::epoch()).
  [[nodiscard]] bool joined(std::uint64_t epoch) const noexcept { return epoch_ == epoch; }
  /// What an event recorded now on one of the pool's streams is known as (trace_ready_body::upto).
  [[nodiscard]] std::uint64_t cover_mark() const noexcept { return seq_ + 1; }

  // The records, made by `w`'s open trace (these three are inline: a pool makes one per operation;
  // allocate is forced inline: as a call it cost about 1 ns of a traced allocation).
  [[gnu::always_inline]] void allocate(memory_trace_writer& w, trace_op op, std::uintptr_t addr, std::size_t bytes,
                                       std::size_t alignment, bool ordered, const void* stream,
                                       const std::source_location& where) noexcept;
  void deallocate(memory_trace_writer& w, std::uintptr_t addr, std::size_t bytes, bool ordered,
                  const void* stream) noexcept;
  /// An allocation live when the pool joined the trace (`where` null when not tracked).
  void live(memory_trace_writer& w, std::uintptr_t addr, std::size_t bytes, std::size_t alignment,
            const std::source_location* where) noexcept;
  DEVICEKIT_DECL void ready(const void* stream, std::uint64_t upto) noexcept;
  DEVICEKIT_DECL void maintenance(trace_maintenance what, const void* stream) noexcept;
  /// What other clients hold of the pool's GPU beside the pools (memory/clients.hpp), recorded when
  /// the pool grows and the figure differs from the one it recorded last.
  DEVICEKIT_DECL void outside(std::uint64_t bytes) noexcept;
  [[nodiscard]] std::uint64_t last_outside() const noexcept { return outside_; }
  /// The pool's figures, then everything the log holds goes to the file.
  DEVICEKIT_DECL void finish(std::uint64_t peak_allocated, std::uint64_t peak_reserved, std::uint64_t allocations,
                             std::uint64_t ooms) noexcept;

 private:
  friend class memory_trace_writer;
  static constexpr std::size_t capacity = std::size_t{1024} << 10;

  [[nodiscard]] trace_order next_order(memory_trace_writer& w, std::uint32_t extra) noexcept;
  /// A trace_block_body record, its stream after it when `stream_follows`: copies of fixed sizes,
  /// which the compiler makes a few moves.
  void put_block(trace_op op, std::uint8_t flags, const trace_block_body& body, bool stream_follows,
                 const void* stream) noexcept;
  DEVICEKIT_DECL void put(trace_op op, std::uint8_t flags, const void* body, std::size_t body_bytes,
                          const char* tail = nullptr, std::size_t tail_bytes = 0, const char* tail2 = nullptr,
                          std::size_t tail2_bytes = 0) noexcept;
  [[nodiscard]] DEVICEKIT_DECL std::uint32_t location_id(const std::source_location& where) noexcept;
  /// The id of trace_current_client in this pool (0: devicekit's own), its client record written
  /// at its first allocation.
  [[nodiscard]] DEVICEKIT_DECL std::uint32_t client_id() noexcept;

  struct location_key {
    const char* file;
    const char* function;
    std::uint_least32_t line;
    bool operator==(const location_key&) const = default;
  };
  struct location_hash {
    std::size_t operator()(const location_key& k) const noexcept {
      return std::hash<const void*>{}(k.file) ^ (std::hash<const void*>{}(k.function) << 1) ^ (k.line * 0x9e3779b9u);
    }
  };
  /// The pool's call sites: current() gives each the same static strings, so pointers identify
  /// them. A small direct-mapped cache answers first: the map's lookup costs about as much as the
  /// rest of a record.
  struct location_table {
    struct cached {
      location_key key{nullptr, nullptr, 0};
      std::uint32_t id = 0;
    };
    static constexpr std::size_t cache_size = 64;
    cached cache[cache_size];
    std::unordered_map<location_key, std::uint32_t, location_hash> ids;
    std::vector<const std::string*> clients;  ///< client id - 1 -> the client's name (few: a search)
  };

  std::uint64_t epoch_ = 0;  ///< of the trace the log records into (0: none)
  std::uint32_t pool_ = 0;   ///< the pool's number in that trace
  std::uint64_t seq_ = 0;    ///< allocations, frees and refused requests so far
  std::uint64_t records_ = 0;
  std::uint64_t outside_ = 0;  ///< the last outside record's figure (0 before any)
  std::size_t used_ = 0;
  std::unique_ptr<unsigned char[]> block_;
  std::unique_ptr<location_table> locations_;
};

class memory_trace_writer {
 public:
  /// The one writer (never destroyed: pools may outlive static destructors).
  [[nodiscard]] DEVICEKIT_DECL static memory_trace_writer& instance();

  /// Opens `path` and makes this the open trace; config_error when a trace is open already or
  /// the file cannot be written.
  DEVICEKIT_DECL void open(const std::string& path);
  /// Writes the end record and closes the file; the logs still joined to it stop recording. Call
  /// finish_memory_trace (memory/device_memory.hpp), which first has every live pool hand over its
  /// log. Nothing when no trace is open.
  DEVICEKIT_DECL void close() noexcept;
  /// The path of the open trace (empty when none).
  [[nodiscard]] DEVICEKIT_DECL std::string path() const;

  /// Which trace is open: odd while one is, even otherwise (a log of epoch 0 has joined none).
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_relaxed); }
  /// Blocks written so far (trace_order::tick).
  [[nodiscard]] std::uint32_t tick() const noexcept { return tick_.load(std::memory_order_relaxed); }
  /// A number for the calling thread, the same for its life.
  [[nodiscard]] DEVICEKIT_DECL std::uint32_t thread_number() noexcept;

  /// Joins `log` to the open trace: empties it, numbers its pool and records the description.
  /// False when no trace is open, or no memory was left for the log.
  DEVICEKIT_DECL bool join(pool_trace_log& log, const trace_pool_description& d) noexcept;
  /// Writes the block `log` holds, when it belongs to the open trace, and empties it.
  DEVICEKIT_DECL void write(pool_trace_log& log) noexcept;

  /// Records a copy or a collective (trace_transfer_body) in the process's own log, which belongs
  /// to no pool (trace_order::pool 0); nothing when no trace is open. Devices as trace_device_code.
  DEVICEKIT_DECL void transfer(trace_transfer what, std::uint32_t from, std::uint32_t to, std::uint64_t bytes,
                               std::uint64_t count, const void* stream) noexcept;
  /// Hands the process's log to the file (before the trace closes).
  DEVICEKIT_DECL void flush_transfers() noexcept;

 private:
  memory_trace_writer() = default;

  mutable pool_mutex mutex_;
  /// Guards transfers_; taken before mutex_ (a full log is written under both).
  pool_mutex transfers_mutex_;
  pool_trace_log transfers_;
  std::FILE* file_ = nullptr;
  std::string path_;
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::uint32_t> tick_{0};
  std::atomic<std::uint32_t> threads_{0};
  std::uint64_t records_ = 0;
  std::uint32_t next_pool_ = 0;
  bool write_failed_ = false;
  bool records_lost_ = false;
};

inline trace_order pool_trace_log::next_order(memory_trace_writer& w, std::uint32_t extra) noexcept {
  trace_thread_state& t = trace_thread;
  if (t.number == 0) [[unlikely]]
    t.number = w.thread_number();
  return {pool_, t.number, w.tick(), extra, ++t.records};
}

inline void pool_trace_log::put_block(trace_op op, std::uint8_t flags, const trace_block_body& body,
                                      bool stream_follows, const void* stream) noexcept {
  constexpr std::size_t short_size = sizeof(trace_prefix) + sizeof(trace_block_body);
  const std::size_t size = short_size + (stream_follows ? sizeof(std::uint64_t) : 0);
  if (used_ + size > capacity || !block_) [[unlikely]] {
    put(op, flags, &body, sizeof body, stream_follows ? reinterpret_cast<const char*>(&stream) : nullptr,
        stream_follows ? sizeof(std::uint64_t) : 0);
    return;
  }
  const trace_prefix prefix{op, flags, static_cast<std::uint16_t>(size)};
  unsigned char* out = block_.get() + used_;
  std::memcpy(out, &prefix, sizeof prefix);
  std::memcpy(out + sizeof prefix, &body, sizeof body);
  if (stream_follows) {
    const auto handle = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(stream));
    std::memcpy(out + short_size, &handle, sizeof handle);
  }
  used_ += size;
  ++records_;
}

inline void pool_trace_log::allocate(memory_trace_writer& w, trace_op op, std::uintptr_t addr, std::size_t bytes,
                                     std::size_t alignment, bool ordered, const void* stream,
                                     const std::source_location& where) noexcept {
  ++seq_;
  const std::uint32_t client = trace_current_client != nullptr ? client_id() : 0;
  const trace_block_body body{next_order(w, trace_allocation_extra(location_id(where), client)), addr, bytes};
  put_block(op, static_cast<std::uint8_t>(trace_alignment_flags(alignment) | (ordered ? trace_ordered : 0)), body,
            ordered, stream);
}

inline void pool_trace_log::deallocate(memory_trace_writer& w, std::uintptr_t addr, std::size_t bytes, bool ordered,
                                       const void* stream) noexcept {
  ++seq_;
  const trace_block_body body{next_order(w, 0), addr, bytes};
  put_block(trace_op::deallocate, ordered ? trace_ordered : 0, body, ordered, stream);
}

inline void pool_trace_log::live(memory_trace_writer& w, std::uintptr_t addr, std::size_t bytes, std::size_t alignment,
                                 const std::source_location* where) noexcept {
  const trace_block_body body{next_order(w, where != nullptr ? location_id(*where) : 0), addr, bytes};
  put_block(trace_op::live, trace_alignment_flags(alignment), body, false, nullptr);
}

/// Opens the trace DEVICEKIT_TRACE names, once per process, at the first pool made, and registers
/// `finish` to close it at exit. A file that cannot be opened is reported on standard error, and
/// the run goes on.
DEVICEKIT_DECL void memory_trace_from_environment(void (*finish)()) noexcept;

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/memory_trace.ipp>
#endif
