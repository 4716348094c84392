#pragma once
/// \file
/// Memory traces: record what a run's pools did, and replay it on another device size, strategy or
/// pool setting to answer "will it fit?" before the long job runs (the question PyTorch's memory
/// snapshots answer only for the GPU you have, and RMM's replay benchmark without stream order).
///
/// Record, from any run (a GPU, simulated GPUs, the CPU):
///
///   DEVICEKIT_TRACE=run.dkt ./train          # every pool of the process, from its first pool
///   devicekit::start_memory_trace("step.dkt");  // or from the program, around what matters
///   ...
///   devicekit::stop_memory_trace();
///
/// Each pool appears with its configuration and budget when it first does something; then every
/// allocation and free (size, alignment, stream, the call's source location, and the client: the
/// library that asked through client_memory, or devicekit itself), every request
/// refused as out_of_memory, the moments the pool saw another stream's frees complete (what only
/// the device's progress decided), trim / release_cached / defragment / release_stream, and the
/// pool's peaks when it is destroyed. A pool in use when a trace starts first lists what is live.
/// Copies and collectives are noted too (record_transfer: what moved, between which devices, how
/// many bytes, on which stream), for the timeline; a replay moves no data. Not recorded: memory a
/// CUDA graph capture allocates (device_memory's graph nodes).
///
/// Replay with `devicekit-replay` (tools/devicekit_replay.cpp, docs/memory-trace.md) or
/// replay_memory_trace() (memory/replay.hpp): the trace runs against devicekit's own pool over a device that has
/// addresses but no memory, so a laptop replays an 80 GiB run. Streams keep their order: a block
/// freed on a stream is reused by that stream at once and by others once the run saw that stream's
/// event complete (or the replaying pool waits for it, as the real one would).
///
/// The file is binary (version 3, layout in memory/detail/trace_format.hpp; versions 1 and 2 are
/// read too): a pool operation
/// takes about 40 ns, and a JSON line several times that. `devicekit-replay --dump` prints it as
/// JSON lines.
#include <devicekit/core/config.hpp>
#include <devicekit/core/config_error.hpp>
#include <devicekit/core/device.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

/// What moved bytes, in a trace's transfer records.
enum class transfer_kind : std::uint8_t { copy, broadcast, all_reduce, all_gather, reduce_scatter, scatter };
[[nodiscard]] constexpr const char* to_string(transfer_kind k) noexcept {
  constexpr const char* names[] = {"copy", "broadcast", "all_reduce", "all_gather", "reduce_scatter", "scatter"};
  return names[static_cast<int>(k)];
}

/// Notes in the trace being recorded that `bytes` in `count` leaves moved from `from` to `to` (a
/// collective: both the device it runs on), queued on `stream` (null: done on return). Nothing,
/// at the cost of one relaxed load, when no trace is recorded. devicekit's copy engine and its
/// collectives call it; a library that moves bytes beside them may too.
DEVICEKIT_DECL void record_transfer(transfer_kind what, device from, device to, std::uint64_t bytes,
                                    std::uint64_t count, const void* stream) noexcept;

/// Whether a memory trace is being recorded: one relaxed load, so that a caller can skip gathering
/// what it would record.
[[nodiscard]] DEVICEKIT_DECL bool memory_trace_recording() noexcept;

/// Starts recording every pool of the process to `path`. config_error when a trace is being
/// recorded already (DEVICEKIT_TRACE's included) or the file cannot be written.
DEVICEKIT_DECL void start_memory_trace(const std::string& path);
/// Writes the trace's end record and closes it. Does nothing when no trace is being recorded.
DEVICEKIT_DECL void stop_memory_trace() noexcept;
/// The file being recorded to; empty when none.
[[nodiscard]] DEVICEKIT_DECL std::string memory_trace_path();

/// A trace that cannot be read: what is wrong, and the byte offset of the record where it was
/// found.
class trace_format_error : public config_error {
 public:
  trace_format_error(const std::string& what, std::uint64_t offset)
      : config_error("memory trace, at byte " + std::to_string(offset) + ": " + what), offset_(offset) {}
  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::uint64_t offset_;
};

/// One pool of a trace, as it described itself.
struct traced_pool {
  std::uint32_t id = 0;
  std::string device;  ///< "cuda:0", "cpu:0"
  bool gpu = false;
  bool has_events = false;
  bool has_fence = false;
  bool release_on_free = false;
  bool capped_to_available = false;
  bool own_max_size = false;
  std::uint64_t total_bytes = 0;
  std::uint64_t headroom_bytes = 0;
  std::uint64_t budget_bytes = 0;
  std::uint64_t collective_reserve_bytes = 0;
  std::uint64_t initial_size = 0;
  std::uint64_t min_chunk_size = 0;
  std::uint64_t max_chunk_size = 0;
  std::uint64_t small_size_limit = 0;
  double fraction = 0;
  double growth_factor = 1;
  double defrag_threshold = 0.5;
  /// The figures the pool reported when it was destroyed (unset: it lived past the trace's end).
  std::optional<std::uint64_t> peak_allocated_bytes;
  std::optional<std::uint64_t> peak_reserved_bytes;
};

/// One record of a trace after the pool descriptions and source locations, in the process's order:
/// each pool's records in the order the pool made them, and each thread's in the order it made
/// them (thread, tick and thread_seq, detail/trace_format.hpp's trace_order).
struct trace_record {
  enum class kind : std::uint8_t {
    live,
    allocate,
    deallocate,
    out_of_memory,
    ready,
    maintenance,
    pool_end,
    outside,
    transfer,  ///< a copy or a collective (record_transfer); its pool is 0
  };
  kind what = kind::allocate;
  bool ordered = false;        ///< on a stream (allocate, deallocate)
  std::uint32_t pool = 0;      ///< traced_pool::id
  std::uint32_t location = 0;  ///< index into memory_trace::locations (0: none)
  std::uint32_t client = 0;    ///< allocations: index into memory_trace::clients (0: devicekit's own)
  std::uint64_t seq = 0;       ///< the pool's count of allocations, frees and refused requests (live: 0)
  std::uint64_t addr = 0;
  std::uint64_t bytes = 0;
  std::uint64_t alignment = 0;
  std::uint64_t stream = 0;
  std::uint64_t value = 0;  ///< ready: which event (the pool's seq + 1 when it was recorded); transfer: leaves;
                            ///< maintenance: which call (1 release_cached, 2 trim, 3 defragment,
                            ///< 4 forced, 5 release_stream); outside: the bytes other clients
                            ///< held of the pool's GPU beside the pools (memory/clients.hpp)
  transfer_kind transfer = transfer_kind::copy;  ///< transfer: what moved the bytes (`bytes`, in `value` leaves)
  device from;                                   ///< transfer: the source
  device to;                                     ///< transfer: the destination
  std::uint32_t thread = 0;                      ///< the recording thread's number
  std::uint32_t tick = 0;                        ///< blocks written before the record was made
  std::uint64_t thread_seq = 0;                  ///< the thread's count of records
  std::uint64_t offset = 0;                      ///< in the file
};

/// A trace read back.
struct memory_trace {
  std::uint32_t version = 0;
  std::vector<traced_pool> pools;
  std::vector<std::string> locations;  ///< "file:line (function)"; [0] is ""
  /// Who made each allocation (memory/client_memory.hpp): [0] is "devicekit", then the libraries
  /// that allocated through a client_memory ("rmm", "cublas", ...), one entry per pool that saw
  /// them. An allocation live when its pool joined the trace is listed as devicekit's.
  std::vector<std::string> clients;
  std::vector<trace_record> records;
  bool complete = false;  ///< it ends with its end record

  [[nodiscard]] const traced_pool* pool(std::uint32_t id) const noexcept;
};

/// Reads a trace. trace_format_error for anything it cannot read (a wrong magic or version, a cut
/// or corrupt record, a free of an address the trace never allocated, sizes that overflow), with
/// the offset; a trace without its end record (the run stopped before closing it) only with
/// `allow_partial`.
[[nodiscard]] DEVICEKIT_DECL memory_trace parse_memory_trace(std::span<const unsigned char> bytes,
                                                             bool allow_partial = false);
/// parse_memory_trace of a file; config_error when it cannot be read.
[[nodiscard]] DEVICEKIT_DECL memory_trace read_memory_trace(const std::string& path, bool allow_partial = false);
/// The trace as JSON lines, one object per record.
[[nodiscard]] DEVICEKIT_DECL std::string memory_trace_json(const memory_trace& trace);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/trace.ipp>
#endif
