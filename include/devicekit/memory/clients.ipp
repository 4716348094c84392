#pragma once
/// \file
/// The definitions behind memory/clients.hpp: the process's device-wide ledgers.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/clients.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace devicekit {

namespace detail {
struct device_ledgers {
  std::mutex m;
  std::vector<std::pair<device, std::unique_ptr<client_ledger>>> list;  ///< in the order they were made

  static device_ledgers& instance() {
    // Never destroyed: a communicator freed by a static destructor still finds its ledger.
    static auto* all = new device_ledgers();
    return *all;
  }
};
}  // namespace detail

DEVICEKIT_DECL client_ledger& device_client_ledger(device dev, const std::string& client) {
  auto& all = detail::device_ledgers::instance();
  const std::lock_guard lock(all.m);
  for (auto& [d, ledger] : all.list) {
    if (d == dev && ledger->name() == client) return *ledger;
  }
  all.list.emplace_back(dev, std::make_unique<client_ledger>(client));
  return *all.list.back().second;
}

DEVICEKIT_DECL std::vector<client_memory_stats> device_client_stats(device dev) {
  auto& all = detail::device_ledgers::instance();
  const std::lock_guard lock(all.m);
  std::vector<client_memory_stats> out;
  for (const auto& [d, ledger] : all.list) {
    if (d == dev) out.push_back(ledger->stats());
  }
  return out;
}

DEVICEKIT_DECL std::uint64_t device_client_bytes(device dev) {
  auto& all = detail::device_ledgers::instance();
  const std::lock_guard lock(all.m);
  std::uint64_t sum = 0;
  for (const auto& [d, ledger] : all.list) {
    if (d == dev) sum += ledger->bytes_in_use();
  }
  return sum;
}

}  // namespace devicekit
