// parse_memory_trace, the reader of memory traces (memory/trace.hpp): the file comes from a run
// that may have been killed mid-write, a copy, or anyone. Any bytes are either a trace or a
// trace_format_error naming the offset; a trace that is read replays (devicekit-replay's work)
// without any other exception: a configuration no pool accepts is a config_error, and running
// short is a result (fits false), not an error.
#include "fuzz_check.hpp"

#include <devicekit/memory/replay.hpp>
#include <devicekit/memory/trace.hpp>

#include <span>

namespace dk = devicekit;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const unsigned char> bytes(data, size);
  const auto trace = fuzz::value_or_config_error([&] { return dk::parse_memory_trace(bytes, true); });
  if (!trace) return 0;
  fuzz::check(!trace->locations.empty() && trace->locations[0].empty(), "a trace read without its empty location 0");
  for (const dk::trace_record& r : trace->records) {
    fuzz::check(trace->pool(r.pool) != nullptr, "a record of a pool the trace never described was accepted");
    fuzz::check(r.location < trace->locations.size(), "a record at a location the trace never named was accepted");
  }
  const auto result = fuzz::value_or_config_error([&] { return dk::replay_memory_trace(*trace); });
  if (!result) return 0;
  fuzz::check(result->fits == !result->failure.has_value(), "a replay that fits with a failure, or fails without one");
  (void)dk::replay_result_json(*result);
  (void)dk::memory_trace_json(*trace);
  return 0;
}
