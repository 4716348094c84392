#pragma once
/// \file
/// The errors the memory layer throws, all derived from devicekit::error (core/error.hpp):
///   out_of_memory   the request could not be met even after releasing cached memory, or a
///                   pool's preallocated start was refused; the message gives the request, the
///                   budget, the stats and what to do, which depends on what ran short (the
///                   budget, or the device itself), as PyTorch's CUDA caching allocator reports
///                   its OutOfMemoryError
///   invalid_free    double free, foreign pointer or wrong size: detected before the pool is
///                   touched, so the pool stays intact
///   invalid_request a bad argument (alignment not a power of two, a size that overflows the
///                   pool's rounding, alignment padding or growth arithmetic)
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/memory/pool_stats.hpp>

#include <cstddef>
#include <string>

namespace devicekit {

/// The request could not be met. Thrown after the pool released its cached blocks and retried
/// (see device_memory's recovery ladder), or when a pool is made and its preallocated start is
/// refused. Carries the figures so that a handler can log them, and what ran short, which decides
/// what the message advises.
class out_of_memory : public error {
 public:
  /// What ran short.
  enum class shortage {
    /// The pool's budget: a larger one (a larger strategy, max_size) would help.
    budget,
    /// The budget, which already is all the device had for it (capped to what it had available
    /// when it was measured, or all of it less the context headroom): a larger strategy gets no more.
    available,
    /// The memory under the pool refused more, below the budget: the device itself is short.
    upstream,
    /// The memory under the pool refused the start it preallocates when it is made
    /// (pool_config::initial_size, a strategy's start fraction): no pool was made.
    preallocation,
  };

  out_of_memory(device dev, std::size_t requested, const pool_stats& stats, std::string basis, std::string cause,
                shortage what = shortage::budget)
      : error(format(dev, requested, stats, basis, cause, what)),
        device_(dev),
        requested_(requested),
        stats_(stats),
        what_(what) {}

  /// `e` refused to a request made for `client` (a library allocating through devicekit, such as
  /// "cublas"): the same figures, the message led by the client's name.
  out_of_memory(const out_of_memory& e, const std::string& client)
      : error("client " + client + ": " + e.what()),
        device_(e.device_),
        requested_(e.requested_),
        stats_(e.stats_),
        what_(e.what_) {}

  [[nodiscard]] device get_device() const noexcept { return device_; }
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_; }
  /// The pool's stats when the request failed.
  [[nodiscard]] const pool_stats& stats() const noexcept { return stats_; }
  /// What ran short: the budget, or the device itself.
  [[nodiscard]] shortage short_of() const noexcept { return what_; }

 private:
  static std::string format(device dev, std::size_t requested, const pool_stats& s, const std::string& basis,
                            const std::string& cause, shortage what);

  device device_;
  std::size_t requested_;
  pool_stats stats_;
  shortage what_;
};

/// A deallocation the pool refuses. The pool is unchanged when this is thrown.
class invalid_free : public error {
 public:
  enum class kind { double_free, foreign_pointer, wrong_size };
  invalid_free(kind k, const std::string& message) : error(message), kind_(k) {}
  [[nodiscard]] kind what_kind() const noexcept { return kind_; }

 private:
  kind kind_;
};

/// A bad argument to an allocation: an alignment that is not a power of two, a size that
/// overflows. The pool is unchanged when this is thrown.
class invalid_request : public error {
 public:
  using error::error;
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/errors.ipp>
#endif
