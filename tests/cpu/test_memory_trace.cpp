// Memory traces (memory/trace.hpp): what a run's pools did is recorded and read back; replayed as
// recorded it gives the run's own peaks, with streams in the order the run saw them; replayed with
// less memory it fails at the first allocation that does not fit and says what was live; a trace
// cut short, corrupt or self-contradictory is refused with the offset, never a crash.
#include "memory_test_support.hpp"

#include <devicekit/distribute/self.hpp>
#include <devicekit/distribute/tree_collectives.hpp>
#include <devicekit/memory/client_memory.hpp>
#include <devicekit/memory/replay.hpp>
#include <devicekit/memory/trace.hpp>
#include <devicekit/place.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace dk = devicekit;
using namespace dk_test;

namespace {

constexpr std::size_t KiB = 1u << 10;
constexpr std::size_t MiB = 1u << 20;

/// A trace file of its own for each test, removed afterwards.
struct trace_file {
  std::string path;
  explicit trace_file(const char* name)
      : path((std::filesystem::temp_directory_path() /
              ("devicekit_test_" + std::to_string(::getpid()) + "_" + name + ".dkt"))
                 .string()) {}
  ~trace_file() {
    dk::stop_memory_trace();
    std::remove(path.c_str());
  }
  [[nodiscard]] std::vector<unsigned char> bytes() const {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
};

/// Mixed sizes, small (slabs) and large (the heap), with frees in between and the maintenance calls.
void churn(dk::device_memory& pool) {
  std::vector<std::pair<void*, std::size_t>> live;
  std::uint32_t rng = 7;
  for (int i = 0; i < 400; ++i) {
    rng = rng * 1664525u + 1013904223u;
    const std::size_t bytes = (std::size_t{64} << ((rng >> 16) % 15)) + (rng >> 24);
    live.emplace_back(pool.allocate(bytes), bytes);
    if ((rng >> 8) % 3 == 0) {
      const std::size_t victim = (rng >> 4) % live.size();
      pool.deallocate(live[victim].first, live[victim].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    if (i == 200) (void)pool.trim();
    if (i == 300) (void)pool.defragment(true);
  }
  (void)pool.release_cached();
  for (auto& [p, n] : live) pool.deallocate(p, n);
}

const dk::replay_pool_result& only_pool(const dk::replay_result& r) {
  REQUIRE(r.pools.size() == 1);
  return r.pools[0];
}

}  // namespace

TEST_CASE("a trace replayed as recorded gives the run's own peaks", "[memory][trace]") {
  trace_file file("peaks");
  dk::pool_stats run;
  dk::start_memory_trace(file.path);
  CHECK(dk::memory_trace_path() == file.path);
  {
    dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, test_config(64 * MiB)};
    churn(pool);
    run = pool.stats();
  }
  dk::stop_memory_trace();
  CHECK(dk::memory_trace_path().empty());

  const dk::memory_trace t = dk::read_memory_trace(file.path);
  CHECK(t.complete);
  REQUIRE(t.pools.size() == 1);
  CHECK(t.pools[0].device == "cpu:0");
  CHECK(t.pools[0].budget_bytes == 64 * MiB);
  REQUIRE(t.pools[0].peak_allocated_bytes);
  CHECK(*t.pools[0].peak_allocated_bytes == run.peak_allocated_bytes);
  const auto count = [&](dk::trace_record::kind k) {
    return std::count_if(t.records.begin(), t.records.end(), [&](const dk::trace_record& r) { return r.what == k; });
  };
  CHECK(count(dk::trace_record::kind::allocate) == 400);
  CHECK(count(dk::trace_record::kind::deallocate) == 400);
  CHECK(count(dk::trace_record::kind::maintenance) == 3);
  // Each allocation names this file's churn() as where it was made.
  const auto& first = *std::find_if(t.records.begin(), t.records.end(), [](const dk::trace_record& r) {
    return r.what == dk::trace_record::kind::allocate;
  });
  CHECK(t.locations[first.location].find("test_memory_trace.cpp") != std::string::npos);

  const dk::replay_result r = dk::replay_memory_trace(t);
  CHECK(r.fits);
  const auto& p = only_pool(r);
  CHECK(p.peak_allocated_bytes == run.peak_allocated_bytes);
  CHECK(p.peak_reserved_bytes == run.peak_reserved_bytes);
  CHECK(p.allocations == 400);
  CHECK(p.frees == 400);
  CHECK(memory_trace_json(t).find("\"op\":\"maintenance\",\"pool\":1,\"what\":\"trim\"") != std::string::npos);
}

TEST_CASE("a replay sees another stream's frees become usable when the run saw them", "[memory][trace][stream]") {
  // Stream 2 frees; stream 1 then allocates. Whether stream 1 may take stream 2's blocks depends on
  // the device's progress (the event), which only the run knew: the trace records when the pool saw
  // it, and the replay reuses (or grows) exactly where the run did.
  std::size_t run_reserved[2] = {0, 0};
  for (const bool completed : {false, true}) {
    CAPTURE(completed);
    trace_file file(completed ? "streams_done" : "streams_pending");
    dk::pool_stats run;
    dk::start_memory_trace(file.path);
    {
      event_upstream up;  // no fence: an event per free
      dk::memory_pool<event_upstream> pool(up, exact_config(64 * MiB));
      const auto s1 = fake_stream(1);
      const auto s2 = fake_stream(2);
      void* freed = pool.allocate_async(2 * MiB, 256, s2);  // the pool's first chunk, all of it
      pool.deallocate_async(freed, 2 * MiB, 256, s2);
      if (completed) up.complete_events(s2);
      void* taken = pool.allocate_async(2 * MiB, 256, s1);  // the same chunk, or a second one
      pool.deallocate_async(taken, 2 * MiB, 256, s1);
      run = pool.stats();
    }
    dk::stop_memory_trace();
    const dk::memory_trace t = dk::read_memory_trace(file.path);
    const bool saw_ready = std::any_of(t.records.begin(), t.records.end(), [](const dk::trace_record& r) {
      return r.what == dk::trace_record::kind::ready;
    });
    CHECK(saw_ready == completed);
    const dk::replay_result r = dk::replay_memory_trace(t);
    const auto& p = only_pool(r);
    CHECK(p.peak_reserved_bytes == run.peak_reserved_bytes);
    CHECK(p.peak_allocated_bytes == run.peak_allocated_bytes);
    run_reserved[completed ? 1 : 0] = run.peak_reserved_bytes;
  }
  // The two runs differ only in the device's progress, and that changed what the pool held.
  CHECK(run_reserved[1] == 2 * MiB);
  CHECK(run_reserved[0] == 4 * MiB);
}

TEST_CASE("pools recording from several threads at once make one trace in each pool's order",
          "[memory][trace][threads]") {
  trace_file file("threads");
  constexpr int threads = 4;
  std::vector<dk::pool_stats> run(threads);
  dk::start_memory_trace(file.path);
  {
    std::vector<std::unique_ptr<dk::memory_pool<dk::host_resource>>> pools;
    for (int i = 0; i < threads; ++i) {
      pools.push_back(std::make_unique<dk::memory_pool<dk::host_resource>>(dk::host_resource{}, test_config(64 * MiB)));
    }
    dk::memory_pool<dk::host_resource> shared{dk::host_resource{}, test_config(64 * MiB)};
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; ++i) {
      workers.emplace_back([&, i] {
        // Enough records to fill several blocks: their order comes back from the merge.
        for (int round = 0; round < 40; ++round) churn(*pools[static_cast<std::size_t>(i)]);
        void* p = shared.allocate(1 * KiB);
        shared.deallocate(p, 1 * KiB);
      });
    }
    for (auto& w : workers) w.join();
    for (int i = 0; i < threads; ++i) run[static_cast<std::size_t>(i)] = pools[static_cast<std::size_t>(i)]->stats();
  }
  dk::stop_memory_trace();
  const dk::memory_trace t = dk::read_memory_trace(file.path);
  REQUIRE(t.pools.size() == threads + 1);
  // Each pool's records come back in its order, and those a thread made in one pool in the
  // thread's order (across pools a thread's order holds where no pool is shared; the shared pool's
  // own order wins where they disagree).
  std::map<std::uint32_t, std::uint64_t> last_seq;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> last_of_thread;
  for (const dk::trace_record& r : t.records) {
    if (r.seq != 0) {
      CHECK(r.seq == last_seq[r.pool] + 1);
      last_seq[r.pool] = r.seq;
    }
    std::uint64_t& mine = last_of_thread[{r.pool, r.thread}];
    CHECK(r.thread_seq > mine);
    mine = r.thread_seq;
  }
  const dk::replay_result r = dk::replay_memory_trace(t);
  CHECK(r.fits);
  for (const dk::replay_pool_result& p : r.pools) {
    CHECK(p.peak_allocated_bytes == p.recorded_peak_allocated_bytes);
    CHECK(p.peak_reserved_bytes == p.recorded_peak_reserved_bytes);
    CHECK((p.allocations == 40 * 400 || p.allocations == threads));
  }
}

TEST_CASE("a replay with less memory fails at the first allocation that does not fit", "[memory][trace]") {
  trace_file file("fails");
  dk::start_memory_trace(file.path);
  {
    dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, exact_config(64 * MiB)};
    void* a = pool.allocate(3 * MiB);
    void* b = pool.allocate(2 * MiB);
    void* c = pool.allocate(4 * MiB);  // the one that does not fit in 8 MiB
    pool.deallocate(c, 4 * MiB);
    pool.deallocate(b, 2 * MiB);
    pool.deallocate(a, 3 * MiB);
  }
  dk::stop_memory_trace();
  const dk::memory_trace t = dk::read_memory_trace(file.path);

  dk::replay_options o;
  o.pool_settings = {{"max_size", "8MiB"}};
  const dk::replay_result r = dk::replay_memory_trace(t, o);
  CHECK_FALSE(r.fits);
  REQUIRE(r.failure);
  CHECK(r.failure->seq == 3);
  CHECK(r.failure->bytes == 4 * MiB);
  CHECK(r.failure->location.find("test_memory_trace.cpp") != std::string::npos);
  CHECK(r.failure->live_bytes == 5 * MiB);
  CHECK(r.failure->live_count == 2);
  REQUIRE(r.failure->largest_live.size() == 2);
  CHECK(r.failure->largest_live[0].bytes == 3 * MiB);
  CHECK(r.failure->message.find("out of memory") != std::string::npos);
  CHECK(dk::replay_result_json(r).find("\"fits\":false") != std::string::npos);

  o.pool_settings = {{"max_size", "16MiB"}};
  CHECK(dk::replay_memory_trace(t, o).fits);
}

TEST_CASE("an allocation a library makes through client_memory is recorded with its client", "[memory][trace]") {
  trace_file file("clients");
  dk::start_memory_trace(file.path);
  {
    dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, exact_config(64 * MiB)};
    const dk::client_memory rmm(pool, "rmm");
    const dk::client_memory cublas(pool, "cublas");
    void* a = pool.allocate(1 * MiB);  // devicekit's own
    void* b = rmm.allocate(2 * MiB, 256);
    void* c = cublas.allocate(4 * MiB, 256);
    void* d = rmm.allocate(1 * MiB, 256);
    CHECK_THROWS_AS(rmm.allocate(128 * MiB, 256), dk::out_of_memory);
    cublas.deallocate(c, 4 * MiB, 256);
    rmm.deallocate(d, 1 * MiB, 256);
    rmm.deallocate(b, 2 * MiB, 256);
    pool.deallocate(a, 1 * MiB);
  }
  dk::stop_memory_trace();
  const dk::memory_trace t = dk::read_memory_trace(file.path);
  CHECK(t.version == 3);
  std::vector<std::string> allocated_by;
  std::vector<std::string> refused_for;
  for (const auto& r : t.records) {
    if (r.what == dk::trace_record::kind::allocate) allocated_by.push_back(t.clients.at(r.client));
    if (r.what == dk::trace_record::kind::out_of_memory) refused_for.push_back(t.clients.at(r.client));
  }
  CHECK(allocated_by == std::vector<std::string>{"devicekit", "rmm", "cublas", "rmm"});
  CHECK(refused_for == std::vector<std::string>{"rmm"});
  CHECK(dk::memory_trace_json(t).find("\"client\":\"cublas\"") != std::string::npos);

  dk::replay_options o;
  o.pool_settings = {{"max_size", "6MiB"}};
  const dk::replay_result r = dk::replay_memory_trace(t, o);
  REQUIRE(r.failure);
  CHECK(r.failure->bytes == 4 * MiB);
  CHECK(r.failure->client == "cublas");
  REQUIRE(r.failure->largest_live.size() == 2);
  CHECK(r.failure->largest_live[0].client == "rmm");
  CHECK(r.failure->largest_live[1].client == "devicekit");
  CHECK(dk::replay_result_json(r).find("\"client\":\"cublas\"") != std::string::npos);
}

TEST_CASE("copies and collectives are noted in the trace, in order, and a replay passes over them", "[memory][trace]") {
  trace_file file("transfers");
  std::vector<std::vector<float>> tree{std::vector<float>(100, 1.f), std::vector<float>(28, 2.f)};
  dk::start_memory_trace(file.path);
  auto placed = dk::place(tree, dk::device::cpu());
  dk::self_communicator comm;
  dk::all_reduce(comm, placed);
  dk::record_transfer(dk::transfer_kind::broadcast, dk::device::cpu(), dk::device::cpu(), 12, 3, nullptr);
  dk::stop_memory_trace();
  const dk::memory_trace t = dk::read_memory_trace(file.path);
  std::vector<const dk::trace_record*> transfers;
  std::size_t allocations_before_copy = 0;
  for (const auto& r : t.records) {
    if (r.what == dk::trace_record::kind::transfer) transfers.push_back(&r);
    if (r.what == dk::trace_record::kind::allocate && transfers.empty()) ++allocations_before_copy;
  }
  REQUIRE(transfers.size() == 3);
  CHECK(allocations_before_copy >= 1);  // the placed tree's block, allocated before its copy
  CHECK(transfers[0]->transfer == dk::transfer_kind::copy);
  CHECK(transfers[0]->from == dk::device::cpu());
  CHECK(transfers[0]->to == dk::device::cpu());
  CHECK(transfers[0]->bytes == 128 * sizeof(float));
  CHECK(transfers[0]->value == 2);
  CHECK(transfers[1]->transfer == dk::transfer_kind::all_reduce);
  CHECK(transfers[1]->bytes == 128 * sizeof(float));
  CHECK(transfers[2]->transfer == dk::transfer_kind::broadcast);
  CHECK(transfers[2]->bytes == 12);
  CHECK(transfers[2]->value == 3);
  CHECK(transfers[2]->pool == 0);
  CHECK(dk::memory_trace_json(t).find("\"op\":\"transfer\",\"pool\":0,\"kind\":\"all_reduce\"") != std::string::npos);
  CHECK(dk::replay_memory_trace(t).fits);
  dk::record_transfer(dk::transfer_kind::copy, dk::device::cpu(), dk::device::cpu(), 1, 1, nullptr);  // none open
}

TEST_CASE("a request the run was refused is recorded, and the replay says whether it was refused too",
          "[memory][trace]") {
  trace_file file("oom");
  dk::start_memory_trace(file.path);
  {
    dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, exact_config(4 * MiB)};
    void* a = pool.allocate(3 * MiB);
    CHECK_THROWS_AS(pool.allocate(2 * MiB), dk::out_of_memory);
    pool.deallocate(a, 3 * MiB);
  }
  dk::stop_memory_trace();
  const dk::memory_trace t = dk::read_memory_trace(file.path);
  const dk::replay_result recorded = dk::replay_memory_trace(t);
  const auto& as_recorded = only_pool(recorded);
  CHECK(as_recorded.recorded_out_of_memory == 1);
  CHECK(as_recorded.reproduced_out_of_memory == 1);
  dk::replay_options o;
  o.pool_settings = {{"max_size", "8MiB"}};
  const dk::replay_result bigger = dk::replay_memory_trace(t, o);
  CHECK(bigger.fits);
  CHECK(only_pool(bigger).reproduced_out_of_memory == 0);
}

TEST_CASE("a trace started while a pool is in use lists what is live first", "[memory][trace]") {
  trace_file file("live");
  dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, exact_config(64 * MiB)};
  void* before = pool.allocate(1 * MiB);
  dk::start_memory_trace(file.path);
  void* during = pool.allocate(2 * MiB);
  pool.deallocate(before, 1 * MiB);  // allocated before the trace: known from the live list
  pool.deallocate(during, 2 * MiB);
  dk::stop_memory_trace();
  const dk::memory_trace t = dk::read_memory_trace(file.path);
  REQUIRE_FALSE(t.records.empty());
  CHECK(t.records[0].what == dk::trace_record::kind::live);
  CHECK(t.records[0].bytes == 1 * MiB);
  // The pool outlived the trace: its figures are taken when the trace ends.
  REQUIRE(t.pools[0].peak_allocated_bytes);
  CHECK(*t.pools[0].peak_allocated_bytes == 3 * MiB);
  const dk::replay_result r = dk::replay_memory_trace(t);
  CHECK(r.fits);
  CHECK(only_pool(r).peak_allocated_bytes == 3 * MiB);
}

TEST_CASE("recording refuses a second trace and a file it cannot write", "[memory][trace][errors]") {
  trace_file file("twice");
  dk::stop_memory_trace();  // nothing open: nothing happens
  CHECK_THROWS_WITH(dk::start_memory_trace("/nonexistent-directory/x.dkt"),
                    Catch::Contains("cannot write") && Catch::Contains("/nonexistent-directory/x.dkt"));
  dk::start_memory_trace(file.path);
  CHECK_THROWS_WITH(dk::start_memory_trace(file.path + ".2"), Catch::Contains("being recorded already"));
  dk::stop_memory_trace();
  CHECK(dk::read_memory_trace(file.path).complete);
}

TEST_CASE("a trace cut anywhere or corrupted is refused with its offset, never a crash", "[memory][trace][errors]") {
  trace_file file("cut");
  dk::start_memory_trace(file.path);
  {
    dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, test_config(8 * MiB)};
    void* a = pool.allocate(100 * KiB);
    void* b = pool.allocate(3 * KiB);
    pool.deallocate(a, 100 * KiB);
    pool.deallocate(b, 3 * KiB);
  }
  dk::stop_memory_trace();
  const std::vector<unsigned char> whole = file.bytes();
  REQUIRE(dk::parse_memory_trace(whole).complete);

  // Every shorter prefix: refused (the end record is gone), or read with allow_partial.
  for (std::size_t n = 0; n < whole.size(); ++n) {
    const std::span<const unsigned char> cut(whole.data(), n);
    CAPTURE(n);
    CHECK_THROWS_AS(dk::parse_memory_trace(cut), dk::trace_format_error);
  }
  // The last record cut short says so, at its offset.
  try {
    (void)dk::parse_memory_trace(std::span<const unsigned char>(whole.data(), whole.size() - 3));
    FAIL("a cut trace was read");
  } catch (const dk::trace_format_error& e) {
    CHECK(std::string(e.what()).find("cut short") != std::string::npos);
    CHECK(e.offset() == whole.size() - 12);  // the end record: a 4-byte prefix and 8 bytes
  }
  // Every single byte flipped: read or refused, never undefined (the sanitizers watch). A flip in
  // the header is always refused; one in a file name or a stream handle may well read.
  std::size_t refused = 0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    CAPTURE(i);
    std::vector<unsigned char> bad = whole;
    bad[i] ^= 0x5a;
    try {
      const dk::memory_trace t = dk::parse_memory_trace(bad);
      (void)dk::replay_memory_trace(t);
    } catch (const dk::trace_format_error&) {
      ++refused;
    } catch (const dk::config_error&) {
      ++refused;  // a pool configuration no pool accepts
    }
    if (i < 16) CHECK(refused == i + 1);
  }
  CHECK(refused >= 16);

  std::vector<unsigned char> other_version = whole;
  other_version[8] = 9;
  CHECK_THROWS_WITH(dk::parse_memory_trace(other_version), Catch::Contains("version 9"));
  const std::vector<unsigned char> not_a_trace = {'{', '"', 'o', 'p', '"', '}', '\n'};
  CHECK_THROWS_WITH(dk::parse_memory_trace(not_a_trace), Catch::Contains("not a devicekit memory trace"));
}

TEST_CASE("a trace that frees what it never allocated is refused", "[memory][trace][errors]") {
  trace_file file("foreign_free");
  dk::start_memory_trace(file.path);
  {
    dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, exact_config(8 * MiB)};
    void* a = pool.allocate(1 * MiB);
    pool.deallocate(a, 1 * MiB);
  }
  dk::stop_memory_trace();
  std::vector<unsigned char> bytes = file.bytes();
  // Find the free record (op 4) and point it elsewhere.
  std::size_t at = 16;
  while (at < bytes.size() && bytes[at] != 4) at += static_cast<std::size_t>(bytes[at + 2] | (bytes[at + 3] << 8));
  REQUIRE(at < bytes.size());
  bytes[at + 4 + 24] ^= 0x10;  // trace_block_body::addr, after the order (24 bytes)
  CHECK_THROWS_WITH(dk::parse_memory_trace(bytes), Catch::Contains("never allocated"));
}

TEST_CASE("replay options it cannot apply are config errors naming them", "[memory][trace][errors]") {
  trace_file file("options");
  dk::start_memory_trace(file.path);
  {
    dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, exact_config(8 * MiB)};
    pool.deallocate(pool.allocate(1 * MiB), 1 * MiB);
  }
  dk::stop_memory_trace();
  const dk::memory_trace t = dk::read_memory_trace(file.path);
  dk::replay_options o;
  o.pool_settings = {{"min_chunk", "1MiB"}};
  CHECK_THROWS_WITH(dk::replay_memory_trace(t, o),
                    Catch::Contains("no such pool setting") && Catch::Contains("min_chunk_size"));
  o.pool_settings = {{"growth_factor", "fast"}};
  CHECK_THROWS_WITH(dk::replay_memory_trace(t, o), Catch::Contains("not a number"));
  o.pool_settings.clear();
  o.fraction = 1.5;
  CHECK_THROWS_AS(dk::replay_memory_trace(t, o), dk::config_error);
}
