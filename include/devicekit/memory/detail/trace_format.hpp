#pragma once
/// \file
/// The layout of a memory trace file (memory/trace.hpp), version 3, shared by the writer
/// (detail/memory_trace.hpp) and the reader (memory/trace.ipp) so that they cannot disagree.
///
/// Little-endian, as the machines that run CUDA are. A header (trace_magic, then the version and an
/// endianness mark, each a uint32), then records: a 4-byte prefix (trace_op, flags, the record's
/// size in bytes with the prefix) and a body by op. Each pool writes its own records in blocks
/// (detail/memory_trace.hpp), so the file holds every pool's records in that pool's order, and the
/// records of different pools interleaved by block; `trace_order` in each record puts them back in
/// the process's order.
///
/// Why binary: a pool operation takes about 40 ns, and formatting a JSON line takes several times
/// that; PyTorch's memory snapshots are binary too (a pickled ring buffer). devicekit-replay --dump
/// prints a trace as JSON lines.
#include <cstddef>
#include <cstdint>

namespace devicekit::detail {

inline constexpr char trace_magic[8] = {'D', 'K', 'M', 'T', 'R', 'A', 'C', 'E'};
inline constexpr std::uint32_t trace_version = 3;
/// The oldest version the reader reads: version 1 is version 2 without the outside records, and
/// version 2 is version 3 without the client records (every allocation devicekit's own).
inline constexpr std::uint32_t trace_oldest_version = 1;
inline constexpr std::uint32_t trace_endian_mark = 0x01020304u;
inline constexpr std::size_t trace_header_bytes = 16;

enum class trace_op : std::uint8_t {
  pool = 1,           ///< a pool's configuration, its first record (trace_pool_body + device name)
  location = 2,       ///< a source location's id in its pool (trace_location_body + file + function)
  allocate = 3,       ///< trace_block_body
  deallocate = 4,     ///< trace_block_body
  out_of_memory = 5,  ///< trace_block_body of the request that failed (addr 0)
  ready = 6,          ///< trace_ready_body: the pool saw a stream's event complete
  maintenance = 7,    ///< trace_maintenance_body: release_cached, trim, defragment, release_stream
  live = 8,           ///< trace_block_body of an allocation live when the trace started
  pool_end = 9,       ///< trace_pool_end_body: the pool's figures when it was destroyed or the trace ended
  end = 10,           ///< trace_end_body: the trace was closed (a file without it was cut short)
  /// trace_outside_body (version 2): what other clients (NCCL's communicators) held of the pool's
  /// GPU beside the pools, when the pool grew and it had changed since the pool's last record
  outside = 11,
  /// trace_client_body + the client's name (version 3): a library that allocates through
  /// client_memory (memory/client_memory.hpp), numbered from 1 in its pool, before its first
  /// allocation there
  client = 12,
  /// trace_transfer_body (version 3): a copy the copy engine queued or made, or a collective, in
  /// the process's order; informational (a replay moves no data). Recorded by no pool: its
  /// trace_order::pool is 0.
  transfer = 13,
};

/// trace_order::extra of a transfer record: what moved the bytes.
enum class trace_transfer : std::uint32_t {
  copy = 1,
  broadcast = 2,
  all_reduce = 3,
  all_gather = 4,
  reduce_scatter = 5,
  scatter = 6,
};
inline constexpr std::uint32_t trace_transfer_last = 6;

/// A device in a transfer record: its kind (core/device.hpp's device_kind) in the high 8 bits,
/// its ordinal in the low 24.
[[nodiscard]] constexpr std::uint32_t trace_device_code(std::uint32_t kind, std::uint32_t ordinal) noexcept {
  return (kind << 24) | (ordinal & 0xffffffu);
}

/// trace_order::extra of an allocation (version 3): the source location's id in the low 24 bits
/// (0: none), the client's in the high 8 (0: devicekit itself). Versions 1 and 2 hold only the
/// location. A pool past 2^24 - 1 call sites, or 255 clients, records the rest without them.
inline constexpr unsigned trace_location_bits = 24;
inline constexpr std::uint32_t trace_most_locations = (std::uint32_t{1} << trace_location_bits) - 1;
inline constexpr std::uint32_t trace_most_clients = 255;
[[nodiscard]] constexpr std::uint32_t trace_allocation_extra(std::uint32_t location, std::uint32_t client) noexcept {
  return location | (client << trace_location_bits);
}

/// trace_prefix::flags of a trace_block_body record: bit 0, the call was on a stream (the stream's
/// handle follows the body, 8 bytes); bits 1-6, log2 of the alignment plus one (0: not known, for a
/// live allocation of an untracked pool).
inline constexpr std::uint8_t trace_ordered = 1;
[[nodiscard]] constexpr std::uint8_t trace_alignment_flags(std::size_t alignment) noexcept {
  std::uint8_t log = 0;
  while (log < 62 && (std::size_t{1} << log) < alignment) ++log;
  return alignment == 0 ? 0 : static_cast<std::uint8_t>((log + 1) << 1);
}
[[nodiscard]] constexpr std::uint64_t trace_alignment_of(std::uint8_t flags) noexcept {
  const unsigned code = (flags >> 1) & 63u;
  return code == 0 ? 0 : std::uint64_t{1} << (code - 1);
}

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

/// The head of every record of a pool after its description: the pool, and where the record falls
/// in the process's order. One thread's records are ordered by `thread_seq`; records of different
/// threads by `tick`, the number of blocks written before the record was made (a thread's record
/// made after another's block was written comes after that block's records).
struct trace_order {
  std::uint32_t pool;
  std::uint32_t thread;  ///< the recording thread's number (from 1)
  std::uint32_t tick;
  std::uint32_t extra;       ///< allocations: trace_allocation_extra; maintenance: trace_maintenance
  std::uint64_t thread_seq;  ///< the recording thread's count of records, over every pool
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
  std::uint32_t pool;
  std::uint32_t id;  ///< from 1 in each pool
  std::uint32_t line;
  std::uint32_t file_bytes;  ///< the file name's length; the function's name follows it
};
/// An allocation, a free, a refused request or a live allocation. The pool's count of requests
/// (trace_record::seq) is not written: the reader counts the allocate, free and refused records.
struct trace_block_body {
  trace_order order;
  std::uint64_t addr;
  std::uint64_t bytes;
};
struct trace_ready_body {
  trace_order order;
  std::uint64_t stream;
  std::uint64_t upto;  ///< which event: the pool's seq + 1 when the event was recorded
};
struct trace_maintenance_body {
  trace_order order;
  std::uint64_t stream;
};
struct trace_pool_end_body {
  trace_order order;
  std::uint64_t peak_allocated_bytes;
  std::uint64_t peak_reserved_bytes;
  std::uint64_t allocation_count;
  std::uint64_t oom_count;
};
struct trace_outside_body {
  trace_order order;
  std::uint64_t bytes;  ///< memory/clients.hpp: device_client_bytes of the pool's device
};
struct trace_client_body {
  std::uint32_t pool;
  std::uint32_t id;  ///< from 1 in each pool; the name fills the rest of the record
};
struct trace_transfer_body {
  trace_order order;   ///< extra: trace_transfer
  std::uint32_t from;  ///< trace_device_code of the source (a collective: the device it runs on)
  std::uint32_t to;    ///< ... of the destination
  std::uint64_t bytes;
  std::uint64_t count;   ///< leaves or runs copied; a collective: the leaves of one rank's tree
  std::uint64_t stream;  ///< the stream it was queued on (0: none, done on return)
};
struct trace_end_body {
  std::uint64_t records;
};

}  // namespace devicekit::detail
