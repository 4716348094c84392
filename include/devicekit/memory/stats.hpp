#pragma once
/// \file
/// What a pool reports about itself (`pool_stats`, PyTorch's memory_stats keys reduced to what a
/// user acts on), one device's figures in jaxlib's terms (`device_memory_stats`) and the errors the memory layer throws:
///   out_of_memory   the request could not be met even after releasing cached memory; the
///                   message gives the request, the budget, the stats and what to do
///   invalid_free    double free, foreign pointer or wrong size: detected before the pool is
///                   touched, so the pool stays intact
///   invalid_request a bad argument (alignment not a power of two, a size that overflows)
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <cstdio>
#include <string>

namespace devicekit {

/// A pool's figures. Bytes "allocated" are what callers asked for; "in use" adds the rounding to
/// blocks and size classes; "reserved" is what the pool holds from its upstream.
struct pool_stats {
  std::size_t allocated_bytes = 0;       ///< live bytes as requested
  std::size_t peak_allocated_bytes = 0;  ///< highest allocated_bytes since creation (or reset)
  std::size_t in_use_bytes = 0;          ///< live bytes as blocks (rounded)
  std::size_t reserved_bytes = 0;        ///< held from the upstream
  std::size_t peak_reserved_bytes = 0;
  std::size_t free_bytes = 0;            ///< reserved - in use (cached, ready or pending on a stream)
  std::size_t largest_free_block = 0;    ///< the largest request served without growing
  double fragmentation = 0.0;            ///< 1 - largest free block / free bytes (0 when nothing is free)
  std::size_t active_blocks = 0;         ///< live allocations
  std::size_t peak_active_blocks = 0;
  std::uint64_t allocation_count = 0;    ///< successful allocations (0-byte requests are not counted)
  std::size_t largest_allocation_bytes = 0;  ///< the largest request served since creation
  std::uint64_t free_count = 0;          ///< successful frees
  std::uint64_t oom_count = 0;           ///< out_of_memory errors thrown
  std::uint64_t alloc_retries = 0;       ///< allocations that needed the recovery ladder
  std::uint64_t upstream_allocations = 0;
  std::uint64_t upstream_frees = 0;
  std::size_t chunk_count = 0;           ///< upstream allocations held now
  std::size_t pending_stream_frees = 0;  ///< frees waiting for another stream's event
  std::size_t max_size = 0;              ///< the cap on reserved bytes (the budget)

  friend bool operator==(const pool_stats&, const pool_stats&) = default;
};

/// One device's memory in jaxlib's terms (Device.memory_stats(), whose keys come from XLA's
/// AllocatorStats): what `device_manager::memory_stats(dev)` returns. Summed over the pools that
/// serve the device (the manager's, and the process's default placement pool where one exists);
/// a peak is then the sum of the pools' peaks, an upper bound. bytes_limit is the manager's
/// budget for the device (`operator+=` leaves it alone).
struct device_memory_stats {
  std::uint64_t bytes_in_use = 0;              ///< live bytes as requested
  std::uint64_t peak_bytes_in_use = 0;         ///< highest bytes_in_use (per pool, summed)
  std::uint64_t bytes_limit = 0;               ///< the budget: what the manager's pool may reserve
  std::uint64_t num_allocs = 0;                ///< allocations served since creation
  std::uint64_t largest_alloc_size = 0;        ///< the largest single allocation served
  std::uint64_t bytes_reserved = 0;            ///< held from the driver now
  std::uint64_t largest_free_block_bytes = 0;  ///< the largest request served without growing

  /// Adds one pool's figures.
  device_memory_stats& operator+=(const pool_stats& p) {
    bytes_in_use += p.allocated_bytes;
    peak_bytes_in_use += p.peak_allocated_bytes;
    num_allocs += p.allocation_count;
    largest_alloc_size = std::max<std::uint64_t>(largest_alloc_size, p.largest_allocation_bytes);
    bytes_reserved += p.reserved_bytes;
    largest_free_block_bytes = std::max<std::uint64_t>(largest_free_block_bytes, p.largest_free_block);
    return *this;
  }

  /// The figures under jaxlib's key names, exactly those seven.
  [[nodiscard]] std::map<std::string, std::int64_t> as_map() const {
    auto i = [](std::uint64_t v) { return static_cast<std::int64_t>(v); };
    return {{"bytes_in_use", i(bytes_in_use)},
            {"peak_bytes_in_use", i(peak_bytes_in_use)},
            {"bytes_limit", i(bytes_limit)},
            {"num_allocs", i(num_allocs)},
            {"largest_alloc_size", i(largest_alloc_size)},
            {"bytes_reserved", i(bytes_reserved)},
            {"largest_free_block_bytes", i(largest_free_block_bytes)}};
  }
  /// The map as a JSON object, keys in alphabetical order (stable for comparisons and logs).
  [[nodiscard]] std::string to_json() const {
    std::string out = "{";
    for (const auto& [key, value] : as_map()) {
      out += (out.size() > 1 ? ", \"" : "\"") + key + "\": " + std::to_string(value);
    }
    return out + "}";
  }

  friend bool operator==(const device_memory_stats&, const device_memory_stats&) = default;
};

namespace detail {
[[nodiscard]] inline std::string human_bytes(std::uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / static_cast<double>(1ull << 30));
  } else if (bytes >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / static_cast<double>(1ull << 20));
  } else if (bytes >= (1ull << 10)) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}
}  // namespace detail

/// The request could not be met. Thrown after the pool released its cached blocks and retried
/// (see device_memory's recovery ladder). Carries the figures so that a handler can log them.
class out_of_memory : public error {
 public:
  out_of_memory(device dev, std::size_t requested, const pool_stats& stats, std::string basis, std::string cause)
      : error(format(dev, requested, stats, basis, cause)),
        device_(dev),
        requested_(requested),
        stats_(stats) {}

  [[nodiscard]] device get_device() const noexcept { return device_; }
  [[nodiscard]] std::size_t requested_bytes() const noexcept { return requested_; }
  /// The pool's stats when the request failed.
  [[nodiscard]] const pool_stats& stats() const noexcept { return stats_; }

 private:
  static std::string format(device dev, std::size_t requested, const pool_stats& s, const std::string& basis,
                            const std::string& cause) {
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

  device device_;
  std::size_t requested_;
  pool_stats stats_;
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
