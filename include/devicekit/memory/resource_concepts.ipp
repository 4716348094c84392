#pragma once
/// \file
/// The definitions behind memory/resource_concepts.hpp: the alignment check.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/resource_concepts.hpp>

#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL void check_alignment(std::size_t alignment) {
  // Not std::has_single_bit: without -mpopcnt (x86-64's baseline) it becomes a call into libgcc,
  // and this runs on every allocation.
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw invalid_request("alignment " + std::to_string(alignment) +
                          " is not a power of two: pass 1, 2, 4, ..., 256 (the default), 512, ...");
  }
}

}  // namespace devicekit::detail
