#pragma once
/// \file
/// Replaying a memory trace (memory/trace.hpp): what `devicekit-replay` does, as a function. The
/// trace runs against devicekit's own pool (memory_pool, the recorded configuration with the
/// changes asked for) over a device that has addresses but no memory (detail/replay_upstream.hpp),
/// so a laptop replays a run of any size. Each pool is made when its first record comes, in the
/// trace's order; GPU pools on one device share its memory less the CUDA context's share.
///
///   const devicekit::memory_trace trace = devicekit::read_memory_trace("run.dkt");
///   devicekit::replay_options o;
///   o.gpu_memory_bytes = std::uint64_t{16} << 30;  // each GPU 16 GiB
///   const devicekit::replay_result r = devicekit::replay_memory_trace(trace, o);
///   if (!r.fits) std::cout << "fails at " << r.failure->location << "\n";
///
/// Faithful by construction where the run was deterministic: the same pool code takes the same
/// requests in the same order, and what only the device decided (when another stream's frees
/// became usable) is taken from the trace. A budget replayed on another size is worked out as the
/// run's was: the strategy's fraction of the memory, less the CUDA context's headroom (which
/// scales with the device, memory/context_headroom.hpp) and the reserve for collectives.
#include <devicekit/core/config.hpp>
#include <devicekit/memory/trace.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

/// What a replay changes.
struct replay_options {
  /// Each GPU's memory (unset: what it had when the trace was recorded).
  std::optional<std::uint64_t> gpu_memory_bytes;
  /// The strategy's fraction for every GPU pool whose budget came from a strategy (unset: the
  /// recorded one); a pool given its own max_size keeps it (capped to the GPU's memory).
  std::optional<double> fraction;
  /// Replay only the pools of GPUs 0..gpus-1 (and the host's); each GPU replays its own recorded
  /// work, nothing is re-sharded.
  std::optional<int> gpus;
  /// pool_config fields by name, for every pool: initial_size, growth_factor, min_chunk_size,
  /// max_chunk_size, small_size_limit, defrag_threshold, release_on_free, max_size.
  std::vector<std::pair<std::string, std::string>> pool_settings;
  /// Keep a sample of every pool's allocated and reserved bytes after each record.
  bool timeline = false;
};

struct replay_pool_result {
  std::uint32_t pool = 0;
  std::string device;
  std::uint64_t budget_bytes = 0;          ///< the replaying pool's budget
  std::uint64_t device_bytes = 0;          ///< the memory the replayed device had (0: unlimited)
  std::uint64_t peak_allocated_bytes = 0;  ///< live bytes at their highest
  std::uint64_t peak_reserved_bytes = 0;   ///< what the pool held from the device at its highest
  double fragmentation_at_peak = 0;        ///< 1 - largest free block / free bytes, when reserved peaked
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::optional<std::uint64_t> recorded_peak_allocated_bytes;
  std::optional<std::uint64_t> recorded_peak_reserved_bytes;
  std::uint64_t recorded_out_of_memory = 0;    ///< requests the run itself was refused
  std::uint64_t reproduced_out_of_memory = 0;  ///< ... which the replay refused too
};

struct replay_live_allocation {
  std::uint64_t bytes = 0;
  std::uint64_t seq = 0;  ///< the pool's request that made it (trace_record::seq)
  std::string location;
  std::string client;  ///< memory_trace::clients: "devicekit", or the library that asked
};

/// The first allocation the replay could not make.
struct replay_failure {
  std::uint32_t pool = 0;
  std::string device;
  std::uint64_t seq = 0;       ///< the pool's request (trace_record::seq)
  std::uint64_t position = 0;  ///< the record's index in memory_trace::records
  std::uint64_t bytes = 0;
  std::string location;
  std::string client;   ///< who asked: "devicekit", or the library (memory_trace::clients)
  std::string message;  ///< the out_of_memory's text
  std::uint64_t live_bytes = 0;
  std::uint64_t live_count = 0;
  std::vector<replay_live_allocation> largest_live;  ///< the largest live allocations, at most 10
};

struct replay_sample {
  std::uint64_t position = 0;  ///< after the record at this index of memory_trace::records
  std::uint32_t pool = 0;
  std::uint64_t allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;
};

struct replay_result {
  bool fits = true;
  std::vector<replay_pool_result> pools;
  std::optional<replay_failure> failure;
  std::vector<replay_sample> timeline;
};

/// Replays `trace` (see the file's comment). config_error for options it cannot apply (an unknown
/// pool setting, a fraction outside (0, 1]); trace_format_error where the trace contradicts itself
/// (a free of an address it never allocated).
[[nodiscard]] DEVICEKIT_DECL replay_result replay_memory_trace(const memory_trace& trace,
                                                               const replay_options& options = {});

/// The result as a JSON object (devicekit-replay --json).
[[nodiscard]] DEVICEKIT_DECL std::string replay_result_json(const replay_result& result);
/// The timeline as Chrome trace event JSON, which Perfetto (ui.perfetto.dev) opens: a counter track
/// of allocated and reserved bytes per pool, over the records' positions in the trace as microseconds.
[[nodiscard]] DEVICEKIT_DECL std::string replay_timeline_json(const replay_result& result);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/replay.ipp>
#endif
