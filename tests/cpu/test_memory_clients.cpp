// memory/clients.hpp: a pool's allocations by client. A library that allocates through an adaptor
// (RMM through rmm_resource; here a client counted by hand, as an adaptor does) shows in the pool's
// breakdown, in the manager's memory_stats(dev).clients and in the report; devicekit's share is what
// no client holds, so the breakdown adds up to the pool's figures.
#include <catch2/catch.hpp>

#include <devicekit/manager.hpp>
#include <devicekit/memory/clients.hpp>
#include <devicekit/report/json.hpp>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dk = devicekit;

namespace {
std::uint64_t in_use_of(const std::vector<dk::client_memory_stats>& clients, const std::string& name) {
  for (const auto& c : clients) {
    if (c.client == name) return c.bytes_in_use;
  }
  FAIL("no client " << name);
  return 0;
}
}  // namespace

TEST_CASE("a pool's figures by client add up, with devicekit's share what no client holds", "[memory][clients]") {
  dk::memory_pool<dk::host_resource> pool;
  const auto ledger = pool.client_ledger_for("rmm");
  CHECK(pool.client_ledger_for("rmm") == ledger);  // one ledger per name
  REQUIRE(pool.client_stats().size() == 2);
  CHECK(pool.client_stats().front().client == "devicekit");

  void* own = pool.allocate(1000);
  void* theirs = pool.allocate(5000);
  ledger->allocated(5000);  // as an adaptor counts after the pool served it
  auto clients = pool.client_stats();
  CHECK(in_use_of(clients, "devicekit") == 1000);
  CHECK(in_use_of(clients, "rmm") == 5000);
  CHECK(in_use_of(clients, "devicekit") + in_use_of(clients, "rmm") == pool.stats().allocated_bytes);
  CHECK(clients.at(1).num_allocs == 1);
  CHECK(clients.at(0).num_allocs == 1);

  pool.deallocate(theirs, 5000);
  ledger->freed(5000);
  clients = pool.client_stats();
  CHECK(in_use_of(clients, "rmm") == 0);
  CHECK(clients.at(1).peak_bytes_in_use == 5000);
  CHECK(in_use_of(clients, "devicekit") == 1000);
  pool.deallocate(own, 1000);
}

TEST_CASE("a ledger read between the pool's free and the client's count never makes devicekit's share negative",
          "[memory][clients]") {
  dk::memory_pool<dk::host_resource> pool;
  const auto ledger = pool.client_ledger_for("rmm");
  void* p = pool.allocate(4096);
  ledger->allocated(4096);
  pool.deallocate(p, 4096);  // the ledger has not counted the free yet
  const auto clients = pool.client_stats();
  CHECK(in_use_of(clients, "devicekit") == 0);
  ledger->freed(4096);
}

TEST_CASE("ledgers count from many threads without a lock", "[memory][clients]") {
  dk::client_ledger ledger("thrust/cub");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        ledger.allocated(64);
        ledger.freed(64);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ledger.stats().bytes_in_use == 0);
  CHECK(ledger.stats().num_allocs == 40000);
  CHECK(ledger.stats().peak_bytes_in_use >= 64);
  CHECK(ledger.stats().peak_bytes_in_use <= 4 * 64);
}

TEST_CASE("the manager's memory_stats and report give a device's memory by client", "[memory][clients][report]") {
  dk::device_manager<dk::cpu_detector> dm{dk::settings::without_environment()};
  dk::device_memory& pool = dm.memory(dk::device::cpu());
  const auto ledger = pool.client_ledger_for("rmm");
  void* p = pool.allocate(3 << 20);
  ledger->allocated(3 << 20);

  const dk::device_memory_stats s = dm.memory_stats(dk::device::cpu());
  CHECK(in_use_of(s.clients, "rmm") == (3u << 20));
  std::uint64_t sum = 0;
  for (const auto& c : s.clients) sum += c.bytes_in_use;
  CHECK(sum == s.bytes_in_use);
  CHECK(s.as_map().size() == 7);  // jaxlib's keys only

  const dk::device_report r = dm.report();
  std::ostringstream text;
  dk::write_text(text, r);
  CHECK_THAT(text.str(), Catch::Contains("by client: devicekit ") && Catch::Contains(", rmm 3.0 MiB"));
  const auto j = dk::to_json(r).at("devices").at(0).at("memory").at("clients");
  REQUIRE(j.size() == 2);
  CHECK(j.at(1).at("client") == "rmm");
  CHECK(j.at(1).at("bytes_in_use") == (3u << 20));

  pool.deallocate(p, 3 << 20);
  ledger->freed(3 << 20);
  std::ostringstream after;
  dk::write_text(after, dm.report());
  CHECK_THAT(after.str(), Catch::Contains(", rmm 0.0 MiB"));
}
