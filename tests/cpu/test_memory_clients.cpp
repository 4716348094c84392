// memory/clients.hpp: a pool's allocations by client. A library that allocates through an adaptor
// (RMM through rmm_resource; here a client counted by hand, as an adaptor does) shows in the pool's
// breakdown, in the manager's memory_stats(dev).clients and in the report; devicekit's share is what
// no client holds, so the breakdown adds up to the pool's figures.
#include <catch2/catch.hpp>

#include <devicekit/manager.hpp>
#include <devicekit/memory/client_memory.hpp>
#include <devicekit/memory/clients.hpp>
#include <devicekit/memory/cub_temp_storage.hpp>
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

TEST_CASE("CUB's temporary storage: both calls made, the storage from the pool as thrust/cub, kept while large enough",
          "[memory][clients]") {
  dk::memory_pool<dk::host_resource> pool;
  std::vector<std::size_t> seen;
  auto call_needing = [&](std::size_t need) {
    return [&seen, need](void* storage, std::size_t& bytes) {
      if (storage == nullptr) {
        bytes = need;  // the size query
      } else {
        seen.push_back(bytes);
      }
      return 0;  // cudaSuccess
    };
  };
  {
    dk::cub_temp_storage tmp(pool, dk::stream_ref{});
    CHECK(tmp.run(call_needing(1000)) == 0);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0] == 1000);
    CHECK(tmp.size() == 1000);
    CHECK(in_use_of(pool.client_stats(), "thrust/cub") == 1000);
    void* first = tmp.data();
    CHECK(tmp.run(call_needing(500)) == 0);  // fits: kept
    CHECK(tmp.data() == first);
    CHECK(tmp.run(call_needing(5000)) == 0);  // grows
    CHECK(tmp.size() == 5000);
    CHECK(in_use_of(pool.client_stats(), "thrust/cub") == 5000);
    // A failing size query is returned as is, and nothing more is allocated.
    CHECK(tmp.run([](void*, std::size_t& bytes) {
      bytes = 1u << 30;
      return 2;  // cudaErrorMemoryAllocation
    }) == 2);
    CHECK(tmp.size() == 5000);
  }
  CHECK(in_use_of(pool.client_stats(), "thrust/cub") == 0);  // the destructor freed it
  CHECK(pool.stats().allocated_bytes == 0);
}

TEST_CASE("CUB's temporary storage past the budget: out_of_memory, nothing left allocated", "[memory][clients]") {
  dk::pool_config c;
  c.max_size = 4u << 20;
  dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, c};
  dk::cub_temp_storage tmp(pool, dk::stream_ref{});
  tmp.reserve(1u << 20);
  CHECK_THROWS_WITH(tmp.run([](void*, std::size_t& bytes) {
    bytes = 64u << 20;
    return 0;
  }),
                    Catch::StartsWith("client thrust/cub: "));
  CHECK(tmp.size() == 0);
  CHECK(pool.stats().allocated_bytes == 0);
  CHECK(in_use_of(pool.client_stats(), "thrust/cub") == 0);
  pool.check_consistency();
}

TEST_CASE("client_memory: a library's allocations counted under its name, refused past the budget naming it",
          "[memory][clients]") {
  dk::pool_config c;
  c.max_size = 4u << 20;
  dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, c};
  const dk::client_memory mine(pool, "my-library");
  CHECK(mine.client() == "my-library");
  CHECK(&mine.pool() == &pool);
  CHECK(&mine.ledger() == pool.client_ledger_for("my-library").get());  // the pool's one ledger of that name

  void* ordered = mine.allocate(3000, 256, dk::native_stream_handle{});
  const dk::client_memory copy = mine;  // copies share the pool and the ledger
  void* plain = copy.allocate(1000, 256);
  void* own = pool.allocate(500);
  CHECK(in_use_of(pool.client_stats(), "my-library") == 4000);
  CHECK(in_use_of(pool.client_stats(), "devicekit") == 500);
  CHECK(mine.allocate(0, 256) == nullptr);  // nothing asked, nothing counted
  CHECK(mine.ledger().stats().num_allocs == 2);

  // Past the budget: out_of_memory led by the client's name, with the pool's figures; nothing
  // allocated or counted.
  const auto before = pool.stats();
  try {
    (void)mine.allocate(64u << 20, 256, dk::native_stream_handle{});
    FAIL("no out_of_memory");
  } catch (const dk::out_of_memory& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("client my-library: "));
    CHECK(e.requested_bytes() == (64u << 20));
    CHECK(e.stats().allocated_bytes == before.allocated_bytes);
  }
  CHECK(pool.stats().allocated_bytes == before.allocated_bytes);
  CHECK(in_use_of(pool.client_stats(), "my-library") == 4000);

  // A bad free throws as the pool's does and changes nothing, the count included.
  CHECK_THROWS_AS(mine.deallocate(plain, 999, 256), dk::invalid_free);
  CHECK(in_use_of(pool.client_stats(), "my-library") == 4000);
  mine.deallocate(nullptr, 5, 256);  // null does nothing

  mine.deallocate(plain, 1000, 256);
  copy.deallocate(ordered, 3000, 256, dk::native_stream_handle{});
  CHECK(in_use_of(pool.client_stats(), "my-library") == 0);
  CHECK(mine.ledger().stats().peak_bytes_in_use == 4000);
  pool.deallocate(own, 500);
  CHECK(pool.stats().allocated_bytes == 0);
  pool.check_consistency();
}
