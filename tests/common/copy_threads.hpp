#pragma once
// The copy threads of staged transfers (transfer/detail/copy_workers.hpp) set for one scope, for
// the cpu and sim tests that need a number other than this machine's default.
#include <devicekit/transfer/detail/copy_workers.hpp>

#include <cstddef>

namespace devicekit::testing {

/// Sets the copy threads for one scope and goes back to the default after.
struct scoped_copy_threads {
  explicit scoped_copy_threads(std::size_t n) { set_host_copy_threads(n); }
  scoped_copy_threads(const scoped_copy_threads&) = delete;
  scoped_copy_threads& operator=(const scoped_copy_threads&) = delete;
  ~scoped_copy_threads() { set_host_copy_threads(0); }
};

}  // namespace devicekit::testing
