#pragma once
/// \file
/// The definitions behind memory/errors.hpp: the out_of_memory message.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/errors.hpp>

#include <cstdio>
#include <string>

namespace devicekit {

DEVICEKIT_DECL std::string out_of_memory::format(device dev, std::size_t requested, const pool_stats& s,
                                                 const std::string& basis, const std::string& cause) {
  using detail::human_bytes;
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.2f", s.fragmentation);
  std::string m = "out of memory on " + dev.str() + ": cannot allocate " + human_bytes(requested) + " (" +
                  std::to_string(requested) + " bytes)";
  if (!cause.empty()) m += ": " + cause;
  m += "\n  budget " + human_bytes(s.max_size);
  if (!basis.empty()) m += " (" + basis + ")";
  m += "\n  allocated " + human_bytes(s.allocated_bytes) + " in " + std::to_string(s.active_blocks) +
       " blocks, reserved " + human_bytes(s.reserved_bytes) + ", largest free block " +
       human_bytes(s.largest_free_block) + ", fragmentation " + frag;
  if (s.graph_bytes != 0) {
    m += "\n  captured CUDA graphs hold ";
    m += human_bytes(s.graph_bytes);
    m += " of the budget until they are destroyed (graph memory nodes)";
  }
  m += "\n  already tried: waiting for other streams' frees, releasing cached blocks, retrying";
  m += "\n  what to do: free buffers you no longer need;";
  if (requested > s.max_size) {
    m += " the request alone exceeds the budget: use a larger strategy (aggressive = 0.90 of total),"
         " custom_fraction<N, D> or runtime_fraction, or split the request";
  } else if (s.fragmentation > 0.3 && s.free_bytes >= requested) {
    m += " enough bytes are free but not in one piece: call defragment() or trim() between phases,"
         " allocate long-lived buffers first, or use a larger strategy";
  } else {
    m += " call trim() to return cached memory, use a larger strategy (aggressive = 0.90 of total),"
         " custom_fraction<N, D> or runtime_fraction, or a smaller batch";
  }
  return m;
}

}  // namespace devicekit
