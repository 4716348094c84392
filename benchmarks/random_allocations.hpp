#pragma once
// RMM's `random_allocations` trace (rapidsai/rmm, cpp/benchmarks/random_allocations), shared by
// bench_memory and bench_vs_rmm: 2N steps; while fewer than N allocations were made, a step
// allocates a uniformly random size in [1, max_size] with probability 0.73 (unless the live bytes
// would pass max_usage), otherwise it frees a random live allocation; what is left is freed at
// the end. With several streams each allocation also draws the stream it is made (and later
// freed) on. The trace is made once, outside any timing, and replayed identically everywhere.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace bench {

struct alloc_step {
  std::uint32_t value;  ///< size to allocate, or index (in the live list) to free
  std::uint8_t stream;  ///< for an allocation: which stream (0 with one stream)
  bool allocate;
};

struct alloc_trace {
  std::size_t n = 0;
  int streams = 1;
  std::vector<alloc_step> steps;
  std::size_t operations = 0;  ///< allocations + frees, the final frees included
};

inline alloc_trace make_alloc_trace(std::size_t n, std::size_t max_size, std::size_t max_usage, std::uint64_t seed,
                                    int streams = 1) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::size_t> size_dist(1, max_size);
  std::uniform_int_distribution<int> op_dist(0, 99);
  std::uniform_int_distribution<int> stream_dist(0, streams - 1);
  alloc_trace t;
  t.n = n;
  t.streams = streams;
  std::vector<std::size_t> live;  // sizes, in the order a replay keeps them
  std::size_t usage = 0;
  std::size_t made = 0;
  for (std::size_t i = 0; i < 2 * n; ++i) {
    const std::size_t size = size_dist(gen);
    bool alloc = true;
    if (!live.empty()) alloc = op_dist(gen) < 73 && made < n && usage + size < max_usage;
    if (alloc) {
      // One stream draws nothing, so that the single-stream trace is the same for every seed user.
      const int s = streams > 1 ? stream_dist(gen) : 0;
      t.steps.push_back({static_cast<std::uint32_t>(size), static_cast<std::uint8_t>(s), true});
      live.push_back(size);
      usage += size;
      ++made;
    } else {
      const std::size_t k = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(gen);
      t.steps.push_back({static_cast<std::uint32_t>(k), 0, false});
      usage -= live[k];
      live[k] = live.back();
      live.pop_back();
    }
  }
  t.operations = t.steps.size() + live.size();
  return t;
}

}  // namespace bench
