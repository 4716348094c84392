#pragma once
/// \file
/// Who holds a device's memory. A library that allocates from a devicekit pool through an adaptor
/// (RMM through rmm_resource, devicekit/rmm/resource.hpp: the client "rmm") keeps a ledger in that
/// pool (device_memory::client_ledger_for): what it has live, its peak and its count. The pool's
/// figures less its clients' are devicekit's own (the client "devicekit"), so the breakdown always
/// adds up to the pool's figures; `device_manager::memory_stats(dev).clients` sums it over the pools
/// of a device. Counting is two atomic additions per allocation or free, and only on a client's
/// route: devicekit's own allocations count nothing more (PyTorch's allocator likewise counts by
/// pool, not by caller).
///
/// Memory a library takes beside devicekit's pools (NCCL's communicators: the client "nccl",
/// measured when a communicator is made and after its first collective of each kind) is kept in a
/// ledger of the device (device_client_ledger), shown with the pools' clients, and charged to the
/// budget of every pool of that device past the reserve kept for collectives
/// (settings::set_collective_memory_size): the budget then holds across clients.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

/// One client's share of a pool's (or a device's) memory: bytes as requested, as in pool_stats.
struct client_memory_stats {
  std::string client;  ///< "devicekit", "rmm", ...
  std::uint64_t bytes_in_use = 0;
  std::uint64_t peak_bytes_in_use = 0;  ///< over several pools: the sum of the peaks, an upper bound
  std::uint64_t num_allocs = 0;

  friend bool operator==(const client_memory_stats&, const client_memory_stats&) = default;
};

/// A client's allocations from one pool. Counted without a lock; the adaptor calls allocated()
/// after the pool served a request and freed() after the pool took a block back, so the ledger
/// never holds more than the pool does.
class client_ledger {
 public:
  explicit client_ledger(std::string name) : name_(std::move(name)) {}
  client_ledger(const client_ledger&) = delete;
  client_ledger& operator=(const client_ledger&) = delete;

  void allocated(std::uint64_t bytes) noexcept {
    const std::uint64_t now = in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    allocs_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
  }
  void freed(std::uint64_t bytes) noexcept { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::uint64_t bytes_in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }
  [[nodiscard]] client_memory_stats stats() const {
    return {name_, in_use_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed),
            allocs_.load(std::memory_order_relaxed)};
  }

 private:
  std::string name_;
  std::atomic<std::uint64_t> in_use_{0};
  std::atomic<std::uint64_t> peak_{0};
  std::atomic<std::uint64_t> allocs_{0};
};

/// Adds `c` to `list`, summing into the entry of the same client where there is one (the order of
/// first appearance is kept: "devicekit" first where a pool's breakdown came first).
inline void add_client_stats(std::vector<client_memory_stats>& list, const client_memory_stats& c) {
  const auto it =
      std::find_if(list.begin(), list.end(), [&](const client_memory_stats& e) { return e.client == c.client; });
  if (it == list.end()) {
    list.push_back(c);
    return;
  }
  it->bytes_in_use += c.bytes_in_use;
  it->peak_bytes_in_use += c.peak_bytes_in_use;
  it->num_allocs += c.num_allocs;
}

/// The ledger of `client`'s memory on `dev` outside any pool, made at the first call for that name
/// and kept for the process (never destroyed, as the process's pools are not).
[[nodiscard]] DEVICEKIT_DECL client_ledger& device_client_ledger(device dev, const std::string& client);
/// The figures of `dev`'s device-wide ledgers, one per client, in the order they were made.
[[nodiscard]] DEVICEKIT_DECL std::vector<client_memory_stats> device_client_stats(device dev);
/// The bytes the device-wide ledgers of `dev` hold now, all clients together.
[[nodiscard]] DEVICEKIT_DECL std::uint64_t device_client_bytes(device dev);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/clients.ipp>
#endif
