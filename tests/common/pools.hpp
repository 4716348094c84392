// Pools the tests make for a case of their own.
#pragma once

#include <devicekit/memory/pool_config.hpp>

#include <cstddef>

namespace devicekit::testing {

/// A pool of at most 64 MiB without tracking, for a test of its own.
inline pool_config small_pool() {
  pool_config c;
  c.max_size = std::size_t{64} << 20;
  c.tracking = tracking_mode::off;
  return c;
}

}  // namespace devicekit::testing
