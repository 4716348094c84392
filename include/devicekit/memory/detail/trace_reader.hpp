#pragma once
/// \file
/// What the memory trace reader (memory/trace.ipp) keeps while it reads: each pool's records in the
/// pool's own order, merged back into the process's order at the end, and the checks of a record's
/// figures. Written over the record type (memory/trace.hpp's trace_record), because trace.hpp's
/// definitions are what include this.
#include <devicekit/memory/detail/trace_format.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace devicekit::detail {

/// Reads one record's body of a fixed layout; the reader has checked the size.
template <class Body>
Body read_body(const unsigned char* at) {
  Body b;
  std::memcpy(&b, at + sizeof(trace_prefix), sizeof b);
  return b;
}

[[nodiscard]] inline bool plausible_size(std::uint64_t bytes) noexcept {
  // Past 2^56 bytes (64 PiB) no device has it, and the pool's arithmetic would wrap.
  return bytes < (std::uint64_t{1} << 56);
}

[[nodiscard]] inline bool valid_fraction(double f) noexcept { return std::isfinite(f) && f > 0.0 && f <= 1.0; }

/// What the reader keeps of one pool while it reads.
template <class Record>
struct trace_reader_pool {
  std::uint64_t last_seq = 0;
  std::uint32_t locations = 0;                             ///< ids seen so far (from 1)
  std::unordered_map<std::uint32_t, std::uint32_t> where;  ///< the pool's location id -> memory_trace::locations
  std::vector<std::uint32_t> clients;                      ///< the pool's client id - 1 -> memory_trace::clients
  std::unordered_map<std::uint64_t, std::uint64_t> live;   ///< address -> bytes
  std::vector<Record> records;                             ///< in the pool's order
  bool ended = false;
};

/// The records of every pool in the process's order: a merge of the pools' own orders, taking
/// next the record made first by (tick, thread, thread_seq) among the pools' next records.
template <class Record>
std::vector<Record> merge_pool_records(std::map<std::uint32_t, trace_reader_pool<Record>>& pools) {
  using key = std::tuple<std::uint32_t, std::uint32_t, std::uint64_t, std::uint32_t>;
  std::priority_queue<std::pair<key, std::uint32_t>, std::vector<std::pair<key, std::uint32_t>>, std::greater<>> heads;
  std::unordered_map<std::uint32_t, std::size_t> next;
  std::size_t total = 0;
  auto push = [&](std::uint32_t pool) {
    const auto& list = pools[pool].records;
    const std::size_t i = next[pool];
    if (i < list.size()) heads.emplace(key(list[i].tick, list[i].thread, list[i].thread_seq, pool), pool);
  };
  for (auto& [id, p] : pools) {
    total += p.records.size();
    push(id);
  }
  std::vector<Record> out;
  out.reserve(total);
  while (!heads.empty()) {
    const std::uint32_t pool = heads.top().second;
    heads.pop();
    out.push_back(pools[pool].records[next[pool]++]);
    push(pool);
  }
  return out;
}

}  // namespace devicekit::detail
