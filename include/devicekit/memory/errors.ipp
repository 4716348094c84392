#pragma once
/// \file
/// The definitions behind memory/errors.hpp: the out_of_memory message.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/errors.hpp>

#include <cstdio>
#include <string>

namespace devicekit {

DEVICEKIT_DECL std::string out_of_memory::format(device dev, std::size_t requested, const pool_stats& s,
                                                 const std::string& basis, const std::string& cause, shortage what) {
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
  if (what == shortage::preallocation) {
    // Nothing was tried: the pool is being made, and a smaller start is the remedy, not a larger budget.
    m += "\n  what to do: ask for a smaller start: a smaller start fraction (fraction_range<SN, SD, CN, CD>,"
         " runtime_fraction_range) or pool_config::initial_size (a pool without one grows on demand up to its"
         " budget), or free memory that other processes or libraries hold on " +
         dev.str() + "; no pool was made";
    return m;
  }
  m += "\n  already tried: waiting for other streams' frees, releasing cached blocks, retrying";
  m += "\n  what to do: free buffers you no longer need;";
  // A larger strategy is advised only where it would give a larger budget.
  const char* larger_budget =
      " use a larger strategy (aggressive = 0.90 of total), custom_fraction<N, D> or runtime_fraction"
      " (for a pool of your own, a larger pool_config::max_size),";
  if (what == shortage::upstream) {
    m += " the device itself is short (other processes, other libraries or other devicekit pools hold the rest"
         " of it), so a larger strategy would not help: call release_cached() on other pools of " +
         dev.str() + " (another manager's), free what other libraries hold, or use a smaller batch";
  } else if (what == shortage::available) {
    if (requested > s.max_size) m += " the request alone exceeds the budget: split it;";
    m += " the budget already is all the memory the device had for it (see above), so a larger strategy would"
         " not help: free memory that other processes, libraries or devicekit pools hold on " +
         dev.str() + " and make a new manager (its budget is measured again), or use a smaller batch";
  } else if (requested > s.max_size) {
    m += " the request alone exceeds the budget:";
    m += larger_budget;
    m += " or split the request";
  } else if (s.fragmentation > 0.3 && s.free_bytes >= requested) {
    m += " enough bytes are free but not in one piece: call defragment() or trim() between phases,"
         " allocate long-lived buffers first, or";
    m += larger_budget;
    m.pop_back();  // the list ends here
  } else {
    m += " call trim() to return cached memory,";
    m += larger_budget;
    m += " or a smaller batch";
  }
  return m;
}

}  // namespace devicekit
