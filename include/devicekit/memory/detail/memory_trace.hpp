#pragma once
/// \file
/// `memory_trace_writer`: the recording half of a memory trace (memory/trace.hpp). Pools call it
/// under their own lock, only while a trace is active (one relaxed load and a branch otherwise),
/// and it appends fixed binary records to one buffer under a lock of its own, innermost of all.
/// The record layout is here, beside the writer, so that the reader (memory/trace.ipp) and the
/// writer cannot disagree on it.
///
/// Why binary: a pool operation takes about 40 ns, and formatting a JSON line takes several times
/// that; RMM's replay benchmark and PyTorch's memory snapshots record in binary form too (a
/// CSV log written at the end, a pickled ring buffer). devicekit-replay --dump prints a trace as
/// JSON lines.
#include <devicekit/core/config.hpp>
#include <devicekit/memory/detail/pool_mutex.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/memory/strategy.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <source_location>
#include <string>
#include <unordered_map>
#include <vector>

namespace devicekit::detail {

/// The file layout, version 1. Little-endian, as the machines that run CUDA are. A header
/// (trace_magic, then the version and an endianness mark, each a uint32), then records: a 4-byte
/// prefix (trace_op, flags, the record's size in bytes with the prefix) and a body by op.
inline constexpr char trace_magic[8] = {'D', 'K', 'M', 'T', 'R', 'A', 'C', 'E'};
inline constexpr std::uint32_t trace_version = 1;
inline constexpr std::uint32_t trace_endian_mark = 0x01020304u;
inline constexpr std::size_t trace_header_bytes = 16;

enum class trace_op : std::uint8_t {
  pool = 1,           ///< a pool's configuration, before its first event (trace_pool_body + device name)
  location = 2,       ///< a source location's id (trace_location_body + file + function)
  allocate = 3,       ///< trace_alloc_body; flag trace_ordered: on a stream
  deallocate = 4,     ///< trace_free_body
  out_of_memory = 5,  ///< trace_alloc_body of the request that failed (addr 0)
  ready = 6,          ///< trace_ready_body: the pool saw a stream's event complete
  maintenance = 7,    ///< trace_maintenance_body: release_cached, trim, defragment, release_stream
  live = 8,           ///< trace_alloc_body of an allocation live when the trace started
  pool_end = 9,       ///< trace_pool_end_body: the pool's figures when it was destroyed
  end = 10,           ///< trace_end_body: the trace was closed (a file without it was cut short)
};
inline constexpr std::uint8_t trace_ordered = 1;

/// trace_pool_body::flags
inline constexpr std::uint32_t trace_pool_has_events = 1;  ///< the upstream orders frees on streams
inline constexpr std::uint32_t trace_pool_has_fence = 2;   ///< ... and has a device-wide fence
inline constexpr std::uint32_t trace_pool_release_on_free = 4;
inline constexpr std::uint32_t trace_pool_gpu = 8;            ///< the device is a GPU (--memory applies)
inline constexpr std::uint32_t trace_pool_capped = 16;        ///< the budget was cut to what was available
inline constexpr std::uint32_t trace_pool_own_max_size = 32;  ///< pool_config::max_size, not a strategy, set the budget

enum class trace_maintenance : std::uint32_t {
  release_cached = 1,
  trim = 2,
  defragment = 3,
  defragment_forced = 4,
  release_stream = 5,
};

struct trace_prefix {
  trace_op op;
  std::uint8_t flags;
  std::uint16_t size;
};
struct trace_pool_body {
  std::uint32_t pool;
  std::uint32_t flags;
  std::uint64_t total_bytes;     ///< the device's memory (0: not known)
  std::uint64_t headroom_bytes;  ///< left for the CUDA context
  std::uint64_t budget_bytes;    ///< what the pool enforced (its max_size)
  std::uint64_t collective_reserve_bytes;
  std::uint64_t initial_size;
  std::uint64_t min_chunk_size;
  std::uint64_t max_chunk_size;
  std::uint64_t small_size_limit;
  double fraction;
  double growth_factor;
  double defrag_threshold;
};
struct trace_location_body {
  std::uint32_t id;
  std::uint32_t line;
  std::uint32_t file_bytes;  ///< the file name's length; the function's name follows it
  std::uint32_t reserved;
};
struct trace_alloc_body {
  std::uint32_t pool;
  std::uint32_t location;  ///< 0: none
  std::uint64_t seq;       ///< order of allocations, frees and failures, over every pool
  std::uint64_t addr;
  std::uint64_t bytes;
  std::uint64_t alignment;
  std::uint64_t stream;
};
struct trace_free_body {
  std::uint32_t pool;
  std::uint32_t reserved;
  std::uint64_t seq;
  std::uint64_t addr;
  std::uint64_t bytes;
  std::uint64_t stream;
};
struct trace_ready_body {
  std::uint32_t pool;
  std::uint32_t reserved;
  std::uint64_t stream;
  std::uint64_t upto;  ///< the event covers this stream's frees with a smaller seq
};
struct trace_maintenance_body {
  std::uint32_t pool;
  std::uint32_t what;  ///< trace_maintenance
  std::uint64_t stream;
};
struct trace_pool_end_body {
  std::uint32_t pool;
  std::uint32_t reserved;
  std::uint64_t peak_allocated_bytes;
  std::uint64_t peak_reserved_bytes;
  std::uint64_t allocation_count;
  std::uint64_t oom_count;
};
struct trace_end_body {
  std::uint64_t records;
};

/// What a pool tells the trace of itself when it first appears in it.
struct trace_pool_description {
  std::string device_name;
  bool gpu = false;
  bool has_events = false;
  bool has_fence = false;
  const pool_config* config = nullptr;
  const memory_budget* budget = nullptr;
  std::size_t max_size = 0;
};

class memory_trace_writer;
/// The process's active trace, or null: what every pool operation reads (relaxed) before anything
/// else of tracing.
inline std::atomic<memory_trace_writer*> active_memory_trace{nullptr};

class memory_trace_writer {
 public:
  /// The one writer (never destroyed: pools may outlive static destructors).
  [[nodiscard]] DEVICEKIT_DECL static memory_trace_writer& instance();

  /// Opens `path` and makes this the active trace; config_error when a trace is active already or
  /// the file cannot be written.
  DEVICEKIT_DECL void open(const std::string& path);
  /// Writes the end record, closes the file, stops recording. Nothing when no trace is open.
  DEVICEKIT_DECL void close() noexcept;
  /// The path of the open trace (empty when none).
  [[nodiscard]] DEVICEKIT_DECL std::string path() const;

  /// Registers `pool` (described by `d`) unless it is in the trace already; returns whether it was
  /// new (the caller then records its live allocations with live()).
  DEVICEKIT_DECL bool add_pool(const void* pool, const trace_pool_description& d);
  DEVICEKIT_DECL void live(const void* pool, std::uintptr_t addr, std::size_t bytes, std::size_t alignment,
                           const std::source_location* where);
  /// An allocation (or, with op out_of_memory, a failed request); false, and nothing recorded,
  /// when `pool` is not in the trace yet (add_pool first).
  DEVICEKIT_DECL bool allocate(const void* pool, trace_op op, std::uintptr_t addr, std::size_t bytes,
                               std::size_t alignment, bool ordered, const void* stream,
                               const std::source_location& where);
  /// A free; false, and nothing recorded, when `pool` is not in the trace yet.
  DEVICEKIT_DECL bool deallocate(const void* pool, std::uintptr_t addr, std::size_t bytes, bool ordered,
                                 const void* stream);
  /// What an event recorded now on a stream of `pool` will cover (its upto, trace_ready_body).
  [[nodiscard]] DEVICEKIT_DECL std::uint64_t cover_mark(const void* pool);
  DEVICEKIT_DECL void ready(const void* pool, const void* stream, std::uint64_t upto);
  DEVICEKIT_DECL void maintenance(const void* pool, trace_maintenance what, const void* stream);
  DEVICEKIT_DECL void pool_end(const void* pool, std::uint64_t peak_allocated, std::uint64_t peak_reserved,
                               std::uint64_t allocations, std::uint64_t ooms);

 private:
  memory_trace_writer() = default;

  struct pool_entry {
    std::uint32_t id = 0;
    std::uint64_t last_seq = 0;  ///< the seq of the pool's last allocation or free
  };

  void put(trace_op op, std::uint8_t flags, const void* body, std::size_t body_bytes, const char* tail = nullptr,
           std::size_t tail_bytes = 0, const char* tail2 = nullptr, std::size_t tail2_bytes = 0);
  std::uint32_t location_id(const std::source_location& where);
  void forget_caches() noexcept;
  /// The entry of `pool`, or null; the last one found is kept, as one pool usually makes many
  /// calls in a row.
  pool_entry* find_pool(const void* pool) {
    if (pool == last_pool_) return last_entry_;
    const auto it = pools_.find(pool);
    if (it == pools_.end()) return nullptr;
    last_pool_ = pool;
    last_entry_ = &it->second;  // nodes of an unordered_map stay put until erased
    return last_entry_;
  }
  void flush_locked() noexcept;

  mutable pool_mutex mutex_;
  std::FILE* file_ = nullptr;
  std::string path_;
  std::vector<unsigned char> buffer_;
  std::uint64_t seq_ = 0;
  std::uint64_t records_ = 0;
  std::uint32_t next_pool_ = 0;
  std::uint32_t next_location_ = 0;
  bool write_failed_ = false;
  std::unordered_map<const void*, pool_entry> pools_;
  /// Source locations by (file name, line, function name) pointers: current() gives each call site
  /// the same static strings.
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
  std::unordered_map<location_key, std::uint32_t, location_hash> locations_;
  /// Before locations_, a direct-mapped cache of the ids of recent call sites: the map's lookup
  /// (a hash, a division, a node) costs about as much as the rest of the record.
  struct cached_location {
    location_key key{nullptr, nullptr, 0};
    std::uint32_t id = 0;
  };
  static constexpr std::size_t location_cache_size = 256;
  cached_location location_cache_[location_cache_size];
  const void* last_pool_ = nullptr;
  pool_entry* last_entry_ = nullptr;
};

/// Opens the trace DEVICEKIT_TRACE names, once per process, at the first pool made, and registers
/// `finish` to close it at exit. A file that cannot be opened is reported on standard error, and
/// the run goes on.
DEVICEKIT_DECL void memory_trace_from_environment(void (*finish)()) noexcept;

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/memory_trace.ipp>
#endif
