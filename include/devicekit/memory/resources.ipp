#pragma once
/// \file
/// The definitions behind memory/resources.hpp: the alignment check.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/resources.hpp>

#include <bit>
#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL void check_alignment(std::size_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment)) {
    throw invalid_request("alignment " + std::to_string(alignment) +
                          " is not a power of two: pass 1, 2, 4, ..., 256 (the default), 512, ...");
  }
}

}  // namespace devicekit::detail
