// memory/: strategies and budgets, the caching pool (size classes, best fit, growth, the OOM
// ladder, trim/clear/defragment, streams), bad inputs, tracking, the profiler, buffers and
// allocators, and the manager's per-device pools in the report.
#include "memory_test_support.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>

#include <devicekit/manager.hpp>
#include <devicekit/memory/allocator.hpp>
#include <devicekit/memory/buffer.hpp>
#include <devicekit/memory/detail/graph_blocks.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/profiler.hpp>
#include <devicekit/report/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

namespace dk = devicekit;
using dk_test::counting_upstream;
using dk_test::event_upstream;
using dk_test::exact_config;
using dk_test::fake_stream;
using dk_test::test_config;

namespace {
constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * 1024;

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

using devicekit::testing::scoped_env;
using devicekit::testing::simulated_gpus;

dk::capabilities host_with(std::uint64_t total) {
  dk::capabilities caps;
  caps.device_type = dk::device_kind::cpu;
  caps.device_count = 1;
  caps.total_memory_bytes = total;
  return caps;
}

}  // namespace

// --- strategies and budgets --------------------------------------------------------------------------

TEST_CASE("stock strategies, compile-time and run-time fractions", "[memory][strategy]") {
  STATIC_REQUIRE(dk::conservative::fraction() == 0.60);
  STATIC_REQUIRE(dk::balanced::fraction() == 0.75);
  STATIC_REQUIRE(dk::aggressive::fraction() == 0.90);
  STATIC_REQUIRE(dk::custom_fraction<2, 5>::fraction() == 0.4);
  STATIC_REQUIRE(dk::memory_strategy<dk::runtime_fraction>);
  STATIC_REQUIRE(dk::memory_strategy<dk::runtime_fraction_range>);
  STATIC_REQUIRE(dk::memory_strategy<dk::fraction_range<3, 4, 9, 10>>);
  STATIC_REQUIRE(dk::memory_strategy<dk::dynamic_strategy>);
  STATIC_REQUIRE(dk::memory_strategy<dk::tracked<dk::balanced>>);
  STATIC_REQUIRE(std::is_empty_v<dk::with_headroom<dk::balanced, 1024>>);
  CHECK(dk::runtime_fraction(0.5).fraction() == 0.5);
  CHECK(dk::runtime_fraction(1.0).fraction() == 1.0);
}

TEST_CASE("a run-time fraction of 0, 1.5, NaN, -1 or infinity is a config_error", "[memory][strategy][bad-input]") {
  for (const double f : {0.0, 1.5, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    INFO(f);
    CHECK_THROWS_AS(dk::runtime_fraction(f), dk::config_error);
    CHECK_THROWS_WITH(dk::runtime_fraction(f), Catch::Contains("must lie in (0, 1]"));
    CHECK_THROWS_AS(dk::compute_budget(80ull << 30, f, 0), dk::config_error);
  }
}

TEST_CASE("a budget is the fraction of total memory less the context headroom", "[memory][strategy]") {
  const auto b = dk::compute_budget(80ull << 30, 0.75, 512ull << 20);
  CHECK(b.total_bytes == (80ull << 30));
  CHECK(b.headroom_bytes == (512ull << 20));
  CHECK(b.fraction == 0.75);
  CHECK(b.budget_bytes == (60ull << 30) - (512ull << 20));
  CHECK(b.start_bytes == 0);
  // Headroom larger than the fraction: nothing left, never negative.
  CHECK(dk::compute_budget(1ull << 20, 0.5, 1ull << 20).budget_bytes == 0);
  // Default headroom: 512 MiB on a GPU, an eighth of a small one, none on the host; on a GPU it
  // is the one rule for a context's cost, which the simulator charges too.
  CHECK(dk::default_headroom_bytes(dk::device_kind::cuda, 80ull << 30) == (512ull << 20));
  CHECK(dk::default_headroom_bytes(dk::device_kind::cuda, 2ull << 30) == (256ull << 20));
  CHECK(dk::default_headroom_bytes(dk::device_kind::cuda, 256ull << 20) == (32ull << 20));
  CHECK(dk::default_headroom_bytes(dk::device_kind::cpu, 64ull << 30) == 0);
  for (const std::uint64_t total : {256ull << 20, 1ull << 30, 4ull << 30, 141ull << 30}) {
    CHECK(dk::default_headroom_bytes(dk::device_kind::cuda, total) == dk::cuda_context_headroom_bytes(total));
    // Whatever the size, the balanced budget leaves room for the context.
    CHECK(dk::budget_for(dk::balanced{}, dk::device_kind::cuda, total).budget_bytes +
              dk::cuda_context_headroom_bytes(total) <=
          total);
  }
  CHECK(dk::budget_for(dk::aggressive{}, dk::device_kind::cuda, 80ull << 30).headroom_bytes == (512ull << 20));
  CHECK(dk::budget_for(dk::with_headroom<dk::balanced, (1ull << 30)>{}, dk::device_kind::cuda, 80ull << 30)
            .budget_bytes == (59ull << 30));
  CHECK(dk::budget_for(dk::balanced{}, dk::device_kind::cpu, 64ull << 30).budget_bytes == (48ull << 30));
}

TEST_CASE("a budget capped to what a device has available says so", "[memory][strategy]") {
  const dk::memory_budget share = dk::compute_budget(1ull << 30, 0.75, 128ull << 20, 0.5);
  REQUIRE(share.budget_bytes == (640ull << 20));
  REQUIRE(share.start_bytes == (384ull << 20));
  CHECK_FALSE(share.available_bytes.has_value());  // nothing measured
  CHECK_FALSE(share.capped_to_available);

  const dk::memory_budget capped = dk::cap_to_available(share, 300ull << 20);
  CHECK(capped.budget_bytes == (300ull << 20));
  CHECK(capped.start_bytes == (300ull << 20));  // the start never exceeds the budget
  CHECK(capped.available_bytes == std::optional<std::uint64_t>(300ull << 20));
  CHECK(capped.capped_to_available);
  CHECK(capped.total_bytes == share.total_bytes);
  CHECK(capped.fraction == share.fraction);
  CHECK_THAT(dk::detail::budget_text(capped), Catch::Contains("capped to the 300.00 MiB the device had available"));

  const dk::memory_budget roomy = dk::cap_to_available(share, 2ull << 30);
  CHECK(roomy.budget_bytes == share.budget_bytes);
  CHECK(roomy.start_bytes == share.start_bytes);
  CHECK(roomy.available_bytes == std::optional<std::uint64_t>(2ull << 30));
  CHECK_FALSE(roomy.capped_to_available);
  CHECK_THAT(dk::detail::budget_text(roomy), !Catch::Contains("capped"));

  CHECK(dk::cap_to_available(share, 0).budget_bytes == 0);  // a full device: no budget at all

  // The collective reserve comes out of what is left after the cap.
  CHECK(dk::reserve_for_collectives(capped, 100ull << 20, "cuda:0").budget_bytes == (200ull << 20));
}

TEST_CASE("the start/cap form preallocates the start and grows to the cap", "[memory][strategy]") {
  using range = dk::fraction_range<3, 4, 9, 10>;
  STATIC_REQUIRE(range::start_fraction() == 0.75);
  STATIC_REQUIRE(range::fraction() == 0.9);
  const auto b = dk::budget_for(range{}, dk::device_kind::cpu, 100ull << 20);
  CHECK(b.start_fraction == 0.75);
  CHECK(b.start_bytes == 75ull << 20);
  CHECK(b.budget_bytes == 90ull << 20);

  const auto r = dk::runtime_fraction_range::parse("0.75-0.90");
  CHECK(r.start_fraction() == 0.75);
  CHECK(r.fraction() == 0.90);
  CHECK(dk::runtime_fraction_range::parse("0.8").start_fraction() == 0.0);
  CHECK(dk::runtime_fraction_range::parse("0.8").fraction() == 0.8);
  CHECK_THROWS_WITH(dk::runtime_fraction_range::parse("0.9-0.75"), Catch::Contains("start") && Catch::Contains("cap"));
  CHECK_THROWS_WITH(dk::runtime_fraction_range::parse("lots"), Catch::Contains("0.75-0.90"));
  CHECK_THROWS_AS(dk::runtime_fraction_range::parse("0.5-1.5"), dk::config_error);
  CHECK_THROWS_AS(dk::runtime_fraction_range::parse("0.5-"), dk::config_error);
  const auto info = dk::describe_strategy(r);
  CHECK(info.start_fraction == 0.75);
  CHECK(dk::budget_for(info, dk::device_kind::cuda, 80ull << 30).start_bytes == (60ull << 30) - (512ull << 20));
}

TEST_CASE("model-size and generative presets return a strategy", "[memory][strategy]") {
  CHECK(dk::strategy_for_model_size(500'000).name == "conservative");
  CHECK(dk::strategy_for_model_size(50'000'000).name == "balanced");
  CHECK(dk::strategy_for_model_size(150'000'000).fraction == 0.90);
  const auto ampere = dk::generative_model_preset(true, true);
  CHECK(ampere.strategy.name == "balanced");
  CHECK(ampere.mixed_precision);
  CHECK(ampere.compute_dtype == "bf16");
  CHECK(dk::generative_model_preset(true, false).compute_dtype == "fp16");
  const auto cpu = dk::generative_model_preset(host_with(1ull << 30));
  CHECK_FALSE(cpu.mixed_precision);
  CHECK(cpu.compute_dtype == "fp32");
  // A strategy chosen at run time drives a manager like a stock one.
  dk::device_manager<dk::fixed_detector, dk::dynamic_strategy> dm{
      dk::settings::without_environment(), dk::fixed_detector{host_with(64 * MiB)},
      dk::dynamic_strategy{dk::strategy_for_model_size(150'000'000)}};
  CHECK(dm.memory_fraction() == 0.90);
}

// --- the pool -------------------------------------------------------------------------------------

TEST_CASE("a pool allocates aligned memory and counts what it hands out", "[memory][pool]") {
  counting_upstream up;
  dk::memory_pool<counting_upstream> pool(up, test_config());
  CHECK(pool.get_device() == dk::device::cpu());
  void* a = pool.allocate(1000);
  void* b = pool.allocate(100 * KiB, 4096);
  void* c = pool.allocate(3 * MiB);
  CHECK(addr(a) % 256 == 0);
  CHECK(addr(b) % 4096 == 0);
  CHECK(addr(c) % 256 == 0);
  std::memset(a, 1, 1000);
  std::memset(b, 2, 100 * KiB);
  std::memset(c, 3, 3 * MiB);
  auto s = pool.stats();
  CHECK(s.allocated_bytes == 1000 + 100 * KiB + 3 * MiB);
  CHECK(s.in_use_bytes == 1024 + 100 * KiB + 3 * MiB);  // 1000 rounds to the 1 KiB class
  CHECK(s.active_blocks == 3);
  CHECK(s.allocation_count == 3);
  CHECK(s.reserved_bytes == up.outstanding());
  CHECK(s.reserved_bytes >= s.in_use_bytes);
  CHECK(s.max_size == 256 * MiB);
  pool.deallocate(a, 1000);
  pool.deallocate(b, 100 * KiB, 4096);
  pool.deallocate(c, 3 * MiB);
  s = pool.stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.in_use_bytes == 0);
  CHECK(s.active_blocks == 0);
  CHECK(s.free_count == 3);
  CHECK(s.peak_allocated_bytes == 1000 + 100 * KiB + 3 * MiB);
  CHECK(s.peak_active_blocks == 3);
  CHECK(s.reserved_bytes > 0);  // cached, not returned
  pool.check_consistency();
  CHECK(pool.trim() == s.reserved_bytes);
  CHECK(up.outstanding() == 0);
  CHECK(pool.stats().reserved_bytes == 0);
}

TEST_CASE("small requests share slabs by size class", "[memory][pool]") {
  counting_upstream up;
  dk::memory_pool<counting_upstream> pool(up, test_config());
  std::vector<void*> small;
  for (int i = 0; i < 100; ++i) small.push_back(pool.allocate(200));
  CHECK(up.state().allocations == 1);  // one chunk holds the slab
  CHECK(pool.stats().in_use_bytes == 100 * 256);
  for (std::size_t i = 1; i < small.size(); ++i) CHECK(addr(small[i]) - addr(small[i - 1]) == 256);
  // A freed slot is the next one handed out.
  pool.deallocate(small[50], 200);
  CHECK(pool.allocate(256) == small[50]);
  for (auto* p : small) pool.deallocate(p, 200 + (p == small[50] ? 56 : 0));
  pool.check_consistency();
  CHECK(pool.stats().in_use_bytes == 0);
}

TEST_CASE("large requests take the best fit, split, and coalesce when freed", "[memory][pool]") {
  counting_upstream up;
  auto cfg = test_config();
  cfg.min_chunk_size = 4 * MiB;
  cfg.small_size_limit = 0;
  dk::memory_pool<counting_upstream> pool(up, cfg);
  void* a = pool.allocate(1 * MiB);
  void* b = pool.allocate(512 * KiB);
  void* c = pool.allocate(2 * MiB);
  REQUIRE(up.state().allocations == 1);
  CHECK(addr(b) == addr(a) + 1 * MiB);  // split from one chunk, in address order
  CHECK(addr(c) == addr(b) + 512 * KiB);
  auto s = pool.stats();
  CHECK(s.largest_free_block == 512 * KiB);
  CHECK(s.fragmentation == 0.0);
  pool.deallocate(a, 1 * MiB);
  pool.deallocate(c, 2 * MiB);  // merges with the 512 KiB tail
  s = pool.stats();
  CHECK(s.free_bytes == 3 * MiB + 512 * KiB);
  CHECK(s.largest_free_block == 2 * MiB + 512 * KiB);
  CHECK(s.fragmentation == Approx(1.0 - 2.5 / 3.5));
  pool.check_consistency();
  // 768 KiB fits both free blocks; the best fit is a's 1 MiB block.
  void* d = pool.allocate(768 * KiB);
  CHECK(d == a);
  // The rest of c's block is one piece again.
  void* e = pool.allocate(2 * MiB + 512 * KiB);
  CHECK(e == c);
  pool.deallocate(d, 768 * KiB);
  pool.deallocate(e, 2 * MiB + 512 * KiB);
  pool.deallocate(b, 512 * KiB);
  s = pool.stats();
  CHECK(s.largest_free_block == 4 * MiB);  // everything merged back into the chunk
  CHECK(s.fragmentation == 0.0);
  pool.check_consistency();
}

TEST_CASE("the pool grows by chunks sized by min_chunk_size and growth_factor", "[memory][pool]") {
  SECTION("growth factor 1: what the request needs, in whole min_chunk_size units") {
    counting_upstream up;
    dk::memory_pool<counting_upstream> pool(up, exact_config());
    void* a = pool.allocate(100 * KiB);
    void* b = pool.allocate(3 * MiB);
    CHECK(up.state().chunk_sizes == std::vector<std::size_t>{2 * MiB, 4 * MiB});
    pool.deallocate(a, 100 * KiB);
    pool.deallocate(b, 3 * MiB);
  }
  SECTION("growth factor 2 doubles the pool, capped by max_chunk_size and the budget") {
    counting_upstream up;
    auto cfg = test_config(20 * MiB);
    cfg.growth_factor = 2.0;
    cfg.max_chunk_size = 8 * MiB;
    cfg.small_size_limit = 0;
    dk::memory_pool<counting_upstream> pool(up, cfg);
    std::vector<void*> v;
    for (int i = 0; i < 18; ++i) v.push_back(pool.allocate(1 * MiB));
    CHECK(up.state().chunk_sizes == std::vector<std::size_t>{2 * MiB, 2 * MiB, 4 * MiB, 8 * MiB, 4 * MiB});
    CHECK(pool.stats().reserved_bytes == 20 * MiB);
    for (auto* p : v) pool.deallocate(p, 1 * MiB);
  }
  SECTION("bad configurations are config_errors") {
    auto cfg = test_config();
    cfg.growth_factor = 0.5;
    CHECK_THROWS_AS(dk::memory_pool<counting_upstream>(counting_upstream{}, cfg), dk::config_error);
    cfg = test_config();
    cfg.defrag_threshold = 1.5;
    CHECK_THROWS_AS(dk::memory_pool<counting_upstream>(counting_upstream{}, cfg), dk::config_error);
    cfg = test_config();
    cfg.small_size_limit = 4 * MiB;
    CHECK_THROWS_WITH(dk::memory_pool<counting_upstream>(counting_upstream{}, cfg),
                      Catch::Contains("small_size_limit"));
  }
  SECTION("a preallocation larger than max_size is a config_error naming both, not a smaller start") {
    counting_upstream up;
    auto cfg = test_config(32 * MiB);
    cfg.initial_size = 64 * MiB;
    CHECK_THROWS_WITH(dk::memory_pool<counting_upstream>(up, cfg), Catch::Contains("initial_size 64.00 MiB") &&
                                                                       Catch::Contains("max_size 32.00 MiB") &&
                                                                       Catch::Contains("lower initial_size"));
    CHECK(up.state().allocations == 0);  // refused before anything was taken
    CHECK_THROWS_AS(dk::make_device_pool(dk::device::cpu(), cfg), dk::config_error);
    cfg.initial_size = 32 * MiB;  // all of it may be preallocated
    dk::memory_pool<counting_upstream> whole(up, cfg);
    CHECK(whole.stats().reserved_bytes == 32 * MiB);
  }
}

TEST_CASE("a pool's default budget is the balanced budget of its device", "[memory][pool]") {
  dk::pool_config cfg;
  cfg.tracking = dk::tracking_mode::off;
  dk::memory_pool<dk::host_resource> pool(cfg);
  const auto host = dk::query_host().total_memory_bytes;
  CHECK(pool.budget().total_bytes == host);
  CHECK(pool.budget().fraction == 0.75);
  CHECK(pool.stats().max_size == static_cast<std::size_t>(std::floor(0.75 * static_cast<double>(host))));
}

TEST_CASE("initial_size is preallocated, kept by trim and released by clear", "[memory][pool]") {
  counting_upstream up;
  auto cfg = test_config();
  cfg.initial_size = 4 * MiB;
  cfg.small_size_limit = 0;
  dk::memory_pool<counting_upstream> pool(up, cfg);
  CHECK(up.outstanding() == 4 * MiB);
  void* a = pool.allocate(3 * MiB);
  CHECK(up.state().allocations == 1);  // served from the preallocation
  void* b = pool.allocate(6 * MiB);
  CHECK(up.state().allocations == 2);
  pool.deallocate(a, 3 * MiB);
  pool.deallocate(b, 6 * MiB);
  CHECK(pool.trim() == 6 * MiB);
  CHECK(up.outstanding() == 4 * MiB);
  pool.clear();
  CHECK(up.outstanding() == 0);
  CHECK(pool.stats().chunk_count == 0);
}

TEST_CASE("defragment releases empty chunks when fragmentation passes the threshold", "[memory][pool]") {
  counting_upstream up;
  auto cfg = exact_config();
  cfg.defrag_threshold = 0.5;
  dk::memory_pool<counting_upstream> pool(up, cfg);
  void* a = pool.allocate(1 * MiB);
  void* b = pool.allocate(1 * MiB);  // chunk 1 is full
  void* c = pool.allocate(2 * MiB);  // chunk 2 is full
  pool.deallocate(c, 2 * MiB);
  pool.deallocate(a, 1 * MiB);
  auto r = pool.defragment();  // free 3 MiB, largest 2 MiB: 0.33 < 0.5
  CHECK(r.fragmentation_before == Approx(1.0 / 3.0));
  CHECK(r.released_bytes == 0);
  r = pool.defragment(true);
  CHECK(r.released_bytes == 2 * MiB);
  CHECK(r.chunks_released == 1);
  CHECK(r.fragmentation_after == 0.0);
  CHECK(up.outstanding() == 2 * MiB);
  void* live = pool.allocate(1 * MiB);  // b stays where it was: live pointers never move
  CHECK(live == a);
  std::memset(b, 7, 1 * MiB);
  pool.deallocate(live, 1 * MiB);
  pool.deallocate(b, 1 * MiB);
  pool.check_consistency();
}

// --- out of memory ------------------------------------------------------------------------------------

TEST_CASE("a request over the budget is out_of_memory with the figures and advice", "[memory][pool][oom][bad-input]") {
  counting_upstream up;
  dk::memory_pool<counting_upstream> pool(up, test_config(8 * MiB));
  void* keep = pool.allocate(1 * MiB);
  const auto before = pool.stats();
  try {
    (void)pool.allocate(9 * MiB);
    FAIL("no out_of_memory");
  } catch (const dk::out_of_memory& e) {
    const std::string m = e.what();
    CHECK(e.requested_bytes() == 9 * MiB);
    CHECK(e.get_device() == dk::device::cpu());
    CHECK(e.stats().allocated_bytes == 1 * MiB);
    for (const char* part : {"out of memory on cpu:0", "cannot allocate 9.00 MiB (9437184 bytes)", "budget 8.00 MiB",
                             "allocated 1.00 MiB", "reserved 2.00 MiB", "largest free block 1.00 MiB",
                             "fragmentation 0.00", "aggressive", "custom_fraction", "runtime_fraction"}) {
      INFO(part << "\n" << m);
      CHECK(m.find(part) != std::string::npos);
    }
  }
  auto after = pool.stats();
  CHECK(after.oom_count == 1);
  after.oom_count = 0;
  CHECK(after == before);
  pool.check_consistency();
  pool.deallocate(keep, 1 * MiB);
}

TEST_CASE("a size that overflows the pool's arithmetic is invalid_request and changes nothing",
          "[memory][pool][bad-input]") {
  constexpr std::size_t top = std::numeric_limits<std::size_t>::max();
  dk::pool_config unlimited;
  unlimited.max_size = top;  // no budget to catch the size first
  dk::memory_pool<dk::host_resource> budgeted;
  dk::memory_pool<dk::host_resource> open(unlimited);
  for (dk::device_memory* pool : {static_cast<dk::device_memory*>(&budgeted), static_cast<dk::device_memory*>(&open)}) {
    void* keep = pool->allocate(3000);
    const auto before = pool->stats();
    const std::size_t largest = dk::detail::largest_request(256, pool->config().min_chunk_size);
    struct request {
      std::size_t bytes;
      std::size_t alignment;
    };
    for (const request r :
         {request{top, 256}, request{top - 100, 256}, request{top - 255, 256}, request{largest + 1, 256},
          request{std::size_t{1} << 63, std::size_t{1} << 63}, request{top - 100, 4096}}) {
      INFO(r.bytes << " bytes aligned to " << r.alignment);
      try {
        (void)pool->allocate(r.bytes, r.alignment);
        FAIL("allocated");
      } catch (const dk::invalid_request& e) {
        const std::string m = e.what();
        CHECK_THAT(m, Catch::Contains(std::to_string(r.bytes) + " bytes") && Catch::Contains("overflows") &&
                          Catch::Contains("Nothing was allocated"));
      }
      CHECK_THROWS_AS(pool->allocate_async(r.bytes, r.alignment, dk::stream{}), dk::invalid_request);
      CHECK(pool->stats() == before);  // not even an out_of_memory counted
      pool->check_consistency();
    }
    // The largest size that fits is a real request, refused for want of memory, not as malformed.
    CHECK_THROWS_AS(pool->allocate(largest), dk::out_of_memory);
    CHECK(pool->live_allocations().size() == 1);
    void* more = pool->allocate(5000);  // and the pool serves on
    pool->deallocate(more, 5000);
    pool->deallocate(keep, 3000);
    pool->check_consistency();
  }
}

TEST_CASE("out of memory: cached blocks are released and the request retried before failing", "[memory][pool][oom]") {
  counting_upstream up;
  dk::memory_pool<counting_upstream> pool(up, exact_config(8 * MiB));
  void* a = pool.allocate(6 * MiB);
  pool.deallocate(a, 6 * MiB);       // 6 MiB cached in one chunk
  void* b = pool.allocate(7 * MiB);  // fits only after the cached chunk goes back
  auto s = pool.stats();
  CHECK(s.alloc_retries == 1);
  CHECK(s.upstream_frees == 1);
  CHECK(s.oom_count == 0);
  CHECK(s.reserved_bytes == 8 * MiB);
  // Now it cannot be met: 7 MiB live in an 8 MiB budget.
  CHECK_THROWS_WITH(pool.allocate(2 * MiB), Catch::Contains("would pass the budget") && Catch::Contains("trim()"));
  pool.deallocate(b, 7 * MiB);
  pool.check_consistency();
}

TEST_CASE("out of memory when fragmented advises defragment", "[memory][pool][oom]") {
  counting_upstream up;
  dk::memory_pool<counting_upstream> pool(up, exact_config(8 * MiB));
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) v.push_back(pool.allocate(1 * MiB));
  for (std::size_t i = 1; i < v.size(); i += 2) pool.deallocate(v[i], 1 * MiB);
  const auto s = pool.stats();
  CHECK(s.free_bytes == 4 * MiB);
  CHECK(s.largest_free_block == 1 * MiB);
  CHECK(s.fragmentation == 0.75);
  CHECK_THROWS_WITH(pool.allocate(2 * MiB), Catch::Contains("fragmentation 0.75") && Catch::Contains("defragment()"));
  for (std::size_t i = 0; i < v.size(); i += 2) pool.deallocate(v[i], 1 * MiB);
}

TEST_CASE("an upstream that refuses: a smaller chunk is tried, then out_of_memory names the upstream",
          "[memory][pool][oom]") {
  counting_upstream up;
  dk::memory_pool<counting_upstream> pool(up, exact_config(64 * MiB));
  up.state().fail_next = 1;
  void* a = pool.allocate(1 * MiB);  // the 2 MiB chunk is refused; exactly 1 MiB is granted
  CHECK(up.state().chunk_sizes == std::vector<std::size_t>{1 * MiB});
  up.state().limit = 3 * MiB;  // the device is smaller than the budget
  void* b = pool.allocate(2 * MiB);
  CHECK_THROWS_WITH(pool.allocate(1 * MiB), Catch::Contains("the upstream refused more memory"));
  pool.deallocate(a, 1 * MiB);
  pool.deallocate(b, 2 * MiB);
  pool.check_consistency();
}

TEST_CASE("out_of_memory advises a larger strategy only where one could help", "[memory][pool][oom]") {
  using shortage = dk::out_of_memory::shortage;
  // The message, after checking what the error says ran short.
  auto message = [](dk::device_memory& pool, std::size_t bytes, shortage expected) -> std::string {
    try {
      (void)pool.allocate(bytes);
    } catch (const dk::out_of_memory& e) {
      CHECK(e.short_of() == expected);
      return e.what();
    }
    FAIL("no out_of_memory");
    return {};
  };
  SECTION("the budget ran out: a larger one would help") {
    counting_upstream up;
    dk::memory_pool<counting_upstream> pool(up, exact_config(8 * MiB));
    void* p = pool.allocate(7 * MiB);
    CHECK_THAT(message(pool, 2 * MiB, shortage::budget),
               Catch::Contains("larger strategy") && Catch::Contains("max_size"));
    pool.deallocate(p, 7 * MiB);
  }
  SECTION("the upstream refused below the budget: the device itself is short") {
    counting_upstream up;
    dk::memory_pool<counting_upstream> pool(up, exact_config(64 * MiB));
    up.state().limit = 4 * MiB;  // the device has less than the budget promises
    void* p = pool.allocate(3 * MiB);
    const std::string m = message(pool, 2 * MiB, shortage::upstream);
    CHECK_THAT(m, Catch::Contains("the upstream refused more memory") &&
                      Catch::Contains("the device itself is short") && Catch::Contains("release_cached()"));
    CHECK_THAT(m, !Catch::Contains("use a larger strategy"));
    pool.deallocate(p, 3 * MiB);
  }
  SECTION("the budget is all the device had available: a larger strategy gets no more") {
    counting_upstream up;
    auto cfg = exact_config(8 * MiB);
    cfg.budget = dk::cap_to_available(dk::compute_budget(64 * MiB, 0.75, 0), 8 * MiB);
    REQUIRE(cfg.budget->capped_to_available);
    dk::memory_pool<counting_upstream> pool(up, cfg);
    void* p = pool.allocate(7 * MiB);
    const std::string m = message(pool, 2 * MiB, shortage::available);
    CHECK_THAT(m, Catch::Contains("would pass the budget") && Catch::Contains("had available") &&
                      Catch::Contains("would not help"));
    CHECK_THAT(m, !Catch::Contains("use a larger strategy"));
    pool.deallocate(p, 7 * MiB);
  }
}

TEST_CASE("a pool whose preallocation the upstream refuses is out_of_memory saying to start smaller",
          "[memory][pool][oom]") {
  counting_upstream up;
  auto cfg = test_config(64 * MiB);
  cfg.initial_size = 16 * MiB;
  up.state().fail_next = 1;
  try {
    dk::memory_pool<counting_upstream> pool(up, cfg);
    FAIL("made a pool without its preallocation");
  } catch (const dk::out_of_memory& e) {
    const std::string m = e.what();
    CHECK(e.requested_bytes() == 16 * MiB);
    CHECK(e.get_device() == dk::device::cpu());
    CHECK(e.short_of() == dk::out_of_memory::shortage::preallocation);
    for (const char* part : {"out of memory on cpu:0", "cannot allocate 16.00 MiB", "preallocat", "initial_size",
                             "budget 64.00 MiB", "std::bad_alloc", "smaller start", "start fraction"}) {
      INFO(part << "\n" << m);
      CHECK(m.find(part) != std::string::npos);
    }
    CHECK_THAT(m, !Catch::Contains("larger strategy") && !Catch::Contains("already tried"));
  }
  CHECK(up.outstanding() == 0);
  dk::memory_pool<counting_upstream> again(up, cfg);  // the upstream has it now: the same pool is made
  CHECK(again.stats().reserved_bytes == 16 * MiB);
}

// A start fraction of a host that has far less than the detector says (1 PiB, past any address
// space): the first memory() of the manager is out_of_memory, not std::bad_alloc. Under the
// sanitizers an allocation that large is a fatal error of their allocator, not a refusal.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("a manager's start fraction the host cannot give is out_of_memory with the start to lower",
          "[memory][manager][oom]") {
  dk::device_manager<dk::fixed_detector, dk::fraction_range<3, 4, 9, 10>> dm{
      dk::settings::without_environment(), dk::fixed_detector{host_with(std::uint64_t{1} << 50)}};
  for (int attempt = 0; attempt < 2; ++attempt) {  // nothing was made: asking again gives the same answer
    try {
      (void)dm.memory();
      FAIL("preallocated 0.75 PiB");
    } catch (const dk::out_of_memory& e) {
      CHECK(e.requested_bytes() == dm.budget(dk::device::cpu()).start_bytes);
      CHECK(e.short_of() == dk::out_of_memory::shortage::preallocation);
      CHECK_THAT(e.what(), Catch::Contains("preallocat") && Catch::Contains("fraction_range") &&
                               Catch::Contains("(0.90 of ") && !Catch::Contains("larger strategy"));
    }
  }
  CHECK(dm.memory_stats().empty());
}
#endif

TEST_CASE("the on_out_of_memory callback runs without the lock and may free memory", "[memory][pool][oom]") {
  counting_upstream up;
  auto cfg = exact_config(8 * MiB);
  void* cache = nullptr;
  int calls = 0;
  dk::memory_pool<counting_upstream>* self = nullptr;
  cfg.on_out_of_memory = [&](std::size_t bytes, const dk::pool_stats& s) {
    ++calls;
    CHECK(bytes == 4 * MiB);
    CHECK(s.allocated_bytes == 6 * MiB);
    self->deallocate(cache, 6 * MiB);  // would deadlock if the pool held its lock
    return true;
  };
  dk::memory_pool<counting_upstream> pool(up, cfg);
  self = &pool;
  cache = pool.allocate(6 * MiB);
  void* p = pool.allocate(4 * MiB);
  CHECK(calls == 1);
  CHECK(p == cache);
  pool.deallocate(p, 4 * MiB);
}

// --- bad inputs -------------------------------------------------------------------------------------

TEST_CASE("bad inputs are refused with their own error and leave the pool intact", "[memory][pool][bad-input]") {
  counting_upstream up;
  dk::memory_pool<counting_upstream> pool(up, test_config(64 * MiB));
  void* big = pool.allocate(1 * MiB);
  void* small = pool.allocate(300);
  void* gone = pool.allocate(5000);
  pool.deallocate(gone, 5000);
  void* gone_big = pool.allocate(512 * KiB);
  pool.deallocate(gone_big, 512 * KiB);
  const auto before = pool.stats();
  auto intact = [&] {
    CHECK(pool.stats() == before);
    pool.check_consistency();
  };

  SECTION("0 bytes: nullptr, nothing counted; freeing nullptr does nothing") {
    CHECK(pool.allocate(0) == nullptr);
    pool.deallocate(nullptr, 0);
    pool.deallocate(nullptr, 16);
    intact();
  }
  SECTION("an alignment that is not a power of two") {
    for (const std::size_t a : {std::size_t{0}, std::size_t{3}, std::size_t{48}, std::size_t{1000}}) {
      INFO(a);
      CHECK_THROWS_AS(pool.allocate(100, a), dk::invalid_request);
      CHECK_THROWS_WITH(pool.allocate(100, a), Catch::Contains("not a power of two"));
    }
    intact();
  }
  SECTION("a request over the budget") {
    CHECK_THROWS_AS(pool.allocate(65 * MiB), dk::out_of_memory);
    auto s = pool.stats();
    CHECK(s.oom_count == 1);
    s.oom_count = 0;
    CHECK(s == before);
    pool.check_consistency();
  }
  SECTION("double free") {
    try {
      pool.deallocate(gone, 5000);
      FAIL("no invalid_free");
    } catch (const dk::invalid_free& e) {
      CHECK(e.what_kind() == dk::invalid_free::kind::double_free);
      CHECK_THAT(e.what(), Catch::Contains("double free"));
    }
    try {
      pool.deallocate(gone_big, 512 * KiB);
      FAIL("no invalid_free");
    } catch (const dk::invalid_free& e) {
      CHECK(e.what_kind() == dk::invalid_free::kind::double_free);
    }
    // A pointer into the middle of a live allocation is refused the same way.
    CHECK_THROWS_AS(pool.deallocate(static_cast<char*>(big) + 256, 1), dk::invalid_free);
    intact();
  }
  SECTION("foreign pointer") {
    int local = 0;
    auto heap = std::make_unique<double[]>(64);
    for (void* p : {static_cast<void*>(&local), static_cast<void*>(heap.get())}) {
      try {
        pool.deallocate(p, sizeof(int));
        FAIL("no invalid_free");
      } catch (const dk::invalid_free& e) {
        CHECK(e.what_kind() == dk::invalid_free::kind::foreign_pointer);
        CHECK_THAT(e.what(), Catch::Contains("not allocated by this pool"));
      }
    }
    intact();
  }
  SECTION("wrong size") {
    try {
      pool.deallocate(big, 1 * MiB - 1);
      FAIL("no invalid_free");
    } catch (const dk::invalid_free& e) {
      CHECK(e.what_kind() == dk::invalid_free::kind::wrong_size);
      CHECK_THAT(e.what(), Catch::Contains("allocated with 1048576 bytes"));
    }
    CHECK_THROWS_AS(pool.deallocate(small, 256), dk::invalid_free);  // the class size is not the size
    intact();
  }
  pool.deallocate(big, 1 * MiB);
  pool.deallocate(small, 300);
  pool.check_consistency();
}

TEST_CASE("release_cached hands every cached block back now; trim, defragment and clear keep what they say",
          "[memory][pool][trim]") {
  event_upstream up;
  dk::pool_config c = test_config(64 * MiB);
  c.initial_size = 4 * MiB;
  c.defrag_threshold = 0.9;
  dk::memory_pool<event_upstream> pool(up, c);
  const auto s = fake_stream(1);
  void* live = pool.allocate(1 * MiB);                   // in the preallocated chunk, kept
  void* big = pool.allocate(6 * MiB);                    // a chunk of its own
  void* small = pool.allocate(100);                      // a size-class slot
  void* pending = pool.allocate_async(8 * MiB, 256, s);  // another chunk
  pool.deallocate(big, 6 * MiB);
  pool.deallocate(small, 100);
  pool.deallocate_async(pending, 8 * MiB, 256, s);  // pending until s's event completes
  REQUIRE(pool.stats().reserved_bytes == 18 * MiB);
  REQUIRE(pool.stats().pending_stream_frees == 1);

  // Below its threshold defragment() hands nothing back; trim() takes no pending free.
  const dk::defragment_result d = pool.defragment();
  CHECK(d.released_bytes == 0);
  CHECK(d.fragmentation_after <= 0.9);
  CHECK(pool.stats().reserved_bytes == 18 * MiB);
  CHECK(up.state().waits == 0);

  // release_cached waits for s's free and returns every chunk without a live block.
  CHECK(pool.release_cached() == 14 * MiB);
  CHECK(pool.stats().reserved_bytes == 4 * MiB);  // the chunk with the live block stays
  CHECK(up.outstanding() == 4 * MiB);
  CHECK(pool.stats().pending_stream_frees == 0);
  CHECK(up.state().waits >= 1);
  CHECK(pool.stats().allocated_bytes == 1 * MiB);
  std::memset(live, 7, 1 * MiB);  // still the caller's
  pool.check_consistency();

  // trim() keeps the preallocated chunk, release_cached() does not; clear() is release_cached().
  pool.deallocate(live, 1 * MiB);
  CHECK(pool.trim() == 0);
  CHECK(pool.stats().reserved_bytes == 4 * MiB);
  CHECK(pool.release_cached() == 4 * MiB);
  CHECK(pool.stats().reserved_bytes == 0);
  CHECK(up.outstanding() == 0);
  CHECK(pool.release_cached() == 0);
  void* again = pool.allocate(2 * MiB);  // the pool grows again as needed
  pool.deallocate(again, 2 * MiB);
  pool.clear();
  CHECK(pool.stats().reserved_bytes == 0);
  pool.check_consistency();
}

// --- streams ----------------------------------------------------------------------------------------

TEST_CASE("stream-ordered frees are reused at once on their stream and elsewhere only after an event",
          "[memory][pool][stream]") {
  event_upstream up;
  dk::memory_pool<event_upstream> pool(up, exact_config(4 * MiB));
  const auto s1 = fake_stream(1);
  const auto s2 = fake_stream(2);
  const auto s3 = fake_stream(3);

  void* p = pool.allocate_async(2 * MiB, 256, s1);
  pool.deallocate_async(p, 2 * MiB, 256, s1);
  CHECK(pool.stats().pending_stream_frees == 1);
  // Each stream-ordered free records its stream's event at once (never later: the stream may be
  // destroyed by then).
  CHECK(up.state().records == 1);
  // Same stream: reused without waiting for the event.
  void* again = pool.allocate_async(2 * MiB, 256, s1);
  CHECK(again == p);
  CHECK(up.state().waits == 0);
  pool.deallocate_async(again, 2 * MiB, 256, s1);
  CHECK(up.state().records == 2);

  // Another stream: the event on s1 has not completed, so the pool grows instead.
  void* q = pool.allocate_async(2 * MiB, 256, s2);
  CHECK(q != p);
  CHECK(up.state().records == 2);  // polling queries events; it records none
  CHECK(up.state().waits == 0);
  pool.deallocate_async(q, 2 * MiB, 256, s2);

  // s1's work finishes: its block is ready for a third stream, without waiting.
  up.complete_events(s1);
  void* r = pool.allocate_async(2 * MiB, 256, s3);
  CHECK(r == p);
  CHECK(up.state().waits == 0);
  pool.check_consistency();

  // At the budget, a synchronous request waits for s2's event rather than failing.
  void* t = pool.allocate(2 * MiB);
  CHECK(t == q);
  CHECK(up.state().waits == 1);
  pool.deallocate(t, 2 * MiB);
  pool.deallocate_async(r, 2 * MiB, 256, s3);
  pool.check_consistency();
}

// Whether a stream is being captured is asked of the upstream that gives its events: these
// streams are not CUDA streams, and on a machine with a driver the runtime crashed on them.
TEST_CASE("a pool asks its upstream whether the upstream's streams are being captured",
          "[memory][pool][stream][graph]") {
  event_upstream up;
  dk::memory_pool<event_upstream> pool(up, exact_config(4 * MiB));
  const auto s1 = fake_stream(1);
  void* eager = pool.allocate_async(1 * MiB, 256, s1);
  CHECK(up.state().capture_queries == 1);

  up.begin_capture(s1, 7);
  // An eager block freed inside the capture is refused, and stays live.
  CHECK_THROWS_AS(pool.deallocate_async(eager, 1 * MiB, 256, s1), dk::capture_error);
  CHECK(pool.stats().active_blocks == 1);
  // Graph memory needs stream-ordered allocation, which this upstream lacks.
  CHECK_THROWS_AS(pool.allocate_async(1 * MiB, 256, s1), dk::capture_error);
  CHECK(pool.stats().graph_blocks == 0);
  up.end_capture(s1);

  pool.deallocate_async(eager, 1 * MiB, 256, s1);
  CHECK(pool.stats().active_blocks == 0);
  CHECK(up.state().capture_queries == 4);
  pool.check_consistency();
}

TEST_CASE("stream-ordered small slots follow the same rules", "[memory][pool][stream]") {
  event_upstream up;
  dk::memory_pool<event_upstream> pool(up, test_config());
  const auto s1 = fake_stream(1);
  const auto s2 = fake_stream(2);
  void* a = pool.allocate_async(100, 256, s1);
  pool.deallocate_async(a, 100, 256, s1);
  CHECK(pool.allocate_async(100, 256, s1) == a);
  pool.deallocate_async(a, 100, 256, s1);
  void* b = pool.allocate_async(100, 256, s2);
  CHECK(b != a);
  CHECK(pool.stats().pending_stream_frees == 1);
  CHECK(up.state().records == 2);  // one per stream-ordered free
  // trim takes in completed frees without blocking: while s1's event is pending nothing moves...
  pool.trim();
  CHECK(pool.stats().pending_stream_frees == 1);
  CHECK(up.state().records == 2);
  up.complete_events();
  pool.trim();  // ...then it sees the event complete
  CHECK(pool.stats().pending_stream_frees == 0);
  CHECK(up.state().waits == 0);
  pool.deallocate_async(b, 100, 256, s2);
  pool.check_consistency();
}

TEST_CASE("a pool waits for pending stream frees before it releases memory", "[memory][pool][stream]") {
  event_upstream up;
  {
    dk::memory_pool<event_upstream> pool(up, test_config());
    void* p = pool.allocate_async(1 * MiB, 256, fake_stream(1));
    pool.deallocate_async(p, 1 * MiB, 256, fake_stream(1));
    pool.clear();  // waits
    CHECK(up.state().waits == 1);
    CHECK(up.outstanding() == 0);
    void* q = pool.allocate_async(1 * MiB, 256, fake_stream(2));
    pool.deallocate_async(q, 1 * MiB, 256, fake_stream(2));
  }
  CHECK(up.state().waits == 2);  // the destructor waited too
  CHECK(up.outstanding() == 0);
  CHECK(up.state().events.empty());  // every event destroyed
}

// A pool records the event that covers a stream-ordered free at the free itself: recorded lazily,
// when another stream or the destructor needs the blocks, it would call cudaEventRecord on streams
// the program has already destroyed (on a GPU, a crash).
TEST_CASE("a pool never touches a stream after the free that used it", "[memory][pool][stream]") {
  event_upstream up;
  {
    // Room for three 2 MiB chunks: p's, the small slab's, and q's.
    dk::memory_pool<event_upstream> pool(up, test_config(6 * MiB));
    const auto s1 = fake_stream(1);
    const auto s2 = fake_stream(2);
    void* p = pool.allocate_async(2 * MiB, 256, s1);
    void* small = pool.allocate_async(100, 256, s1);
    pool.deallocate_async(p, 2 * MiB, 256, s1);
    pool.deallocate_async(small, 100, 256, s1);
    up.destroy_stream(s1);  // as cudaStreamDestroy: queued work still completes
    // Another stream needs memory: the pool polls s1's frees through the event alone.
    void* q = pool.allocate_async(2 * MiB, 256, s2);
    CHECK(q != p);
    pool.trim();
    CHECK(pool.stats().pending_stream_frees == 2);
    // At the budget a synchronous request waits on the event, not on the dead stream.
    void* t = pool.allocate(2 * MiB);
    CHECK(t == p);
    CHECK(up.state().waits == 1);
    pool.deallocate(t, 2 * MiB);
    pool.deallocate_async(q, 2 * MiB, 256, s2);
    up.destroy_stream(s2);
    pool.check_consistency();
  }  // the destructor waits for s2's frees: again through the event alone
  CHECK(up.state().records_on_destroyed_streams == 0);
  CHECK(up.state().waits == 2);
  CHECK(up.outstanding() == 0);
}

TEST_CASE("release_stream makes a stream's pending frees ready and forgets the stream", "[memory][pool][stream]") {
  event_upstream up;
  dk::memory_pool<event_upstream> pool(up, exact_config(4 * MiB));
  const auto s1 = fake_stream(1);
  const auto s2 = fake_stream(2);
  void* p = pool.allocate_async(2 * MiB, 256, s1);
  pool.deallocate_async(p, 2 * MiB, 256, s1);
  CHECK(pool.stats().pending_stream_frees == 1);
  pool.release_stream(s1);
  CHECK(up.state().waits == 1);  // it waited for s1's work
  CHECK(pool.stats().pending_stream_frees == 0);
  CHECK(up.state().events.empty());  // s1's event is gone with its slot
  // The block is ready for any stream now, without a further wait.
  void* q = pool.allocate_async(2 * MiB, 256, s2);
  CHECK(q == p);
  CHECK(up.state().waits == 1);
  // A stream the pool has not seen (or has already forgotten) is ignored.
  pool.release_stream(fake_stream(7));
  pool.release_stream(s1);
  CHECK(up.state().waits == 1);
  // A new stream with s1's handle starts afresh: its frees are its own.
  void* r = pool.allocate_async(2 * MiB, 256, s1);
  pool.deallocate_async(r, 2 * MiB, 256, s1);
  CHECK(pool.allocate_async(2 * MiB, 256, s1) == r);
  pool.deallocate_async(r, 2 * MiB, 256, s1);
  pool.deallocate_async(q, 2 * MiB, 256, s2);
  pool.check_consistency();
}

TEST_CASE("a host pool takes cpu streams as synchronous", "[memory][pool][stream]") {
  dk::memory_pool<dk::host_resource> pool(test_config());
  dk::stream s;  // the inline cpu stream
  void* p = pool.allocate(4096, s);
  pool.deallocate(p, 4096, s);
  CHECK(pool.stats().pending_stream_frees == 0);
  CHECK(pool.allocate(4096) == p);
  pool.deallocate(p, 4096);
}

// --- tracking -----------------------------------------------------------------------------------------

TEST_CASE("tracking records where each live allocation came from and reports leaks", "[memory][tracking]") {
  std::string report;
  int line = 0;
  {
    auto cfg = test_config();
    cfg.tracking = dk::tracking_mode::on;
    cfg.on_leak = [&](const std::string& r) { report = r; };
    dk::memory_pool<dk::host_resource> pool(cfg);
    CHECK(pool.tracking());
    line = __LINE__ + 1;
    void* p = pool.allocate(4000);
    const auto live = pool.live_allocations();
    REQUIRE(live.size() == 1);
    CHECK(live[0].ptr == p);
    CHECK(live[0].bytes == 4000);
    CHECK(live[0].where.line() == static_cast<unsigned>(line));
    CHECK_THAT(live[0].where.file_name(), Catch::EndsWith("test_memory.cpp"));
    CHECK_THROWS_WITH(pool.deallocate(p, 4001), Catch::Contains("test_memory.cpp:" + std::to_string(line)));
    CHECK_THAT(pool.leak_report(), Catch::Contains("1 live allocation"));
  }
  CHECK_THAT(report, Catch::Contains("destroyed with 1 live allocation") && Catch::Contains("4000 bytes") &&
                         Catch::Contains("test_memory.cpp:" + std::to_string(line)));
}

TEST_CASE("without tracking there is no leak report and no source location", "[memory][tracking]") {
  scoped_env env("DEVICEKIT_MEMORY_DEBUG", nullptr);
  bool called = false;
  auto cfg = test_config();
  cfg.tracking = dk::tracking_mode::environment;
  cfg.on_leak = [&](const std::string&) { called = true; };
  void* p = nullptr;
  {
    dk::memory_pool<dk::host_resource> pool(cfg);
    CHECK_FALSE(pool.tracking());
    p = pool.allocate(64);
    CHECK(pool.live_allocations().at(0).where.line() == 0);
  }
  CHECK_FALSE(called);
  (void)p;
}

TEST_CASE("DEVICEKIT_MEMORY_DEBUG=1 turns tracking on; a bad value is a config_error",
          "[memory][tracking][bad-input]") {
  {
    scoped_env env("DEVICEKIT_MEMORY_DEBUG", "1");
    dk::memory_pool<dk::host_resource> pool(dk::pool_config{});
    CHECK(pool.tracking());
  }
  {
    scoped_env env("DEVICEKIT_MEMORY_DEBUG", "sometimes");
    CHECK_THROWS_WITH(dk::memory_pool<dk::host_resource>(dk::pool_config{}),
                      Catch::Contains("DEVICEKIT_MEMORY_DEBUG='sometimes'") && Catch::Contains("allowed values"));
  }
}

// --- profiler ---------------------------------------------------------------------------------------

TEST_CASE("memory_profiler: nested scopes, peaks, counts and a Perfetto-readable trace", "[memory][profiler]") {
  dk::memory_pool<dk::host_resource> pool(test_config());
  void* base = pool.allocate(1000);
  const auto trace_path = std::filesystem::temp_directory_path() / "devicekit_test_memory_trace.json";
  {
    dk::memory_profiler outer(pool, "outer", {.record_timeline = true});
    void* a = pool.allocate(4096);
    {
      dk::memory_profiler inner(pool, "inner");
      void* b = pool.allocate(10000);
      void* c = pool.allocate(20000);
      pool.deallocate(b, 10000);
      pool.deallocate(c, 20000);
      CHECK(inner.allocation_count() == 2);
      CHECK(inner.free_count() == 2);
      CHECK(inner.bytes_allocated() == 30000);
      CHECK(inner.peak_bytes() == 1000 + 4096 + 30000);
      CHECK(inner.peak_increase_bytes() == 30000);
      CHECK(inner.timeline().empty());
    }
    pool.deallocate(a, 4096);
    outer.stop();
    void* after = pool.allocate(1 * MiB);  // not seen: the profiler stopped
    pool.deallocate(after, 1 * MiB);
    CHECK(outer.allocation_count() == 3);
    CHECK(outer.peak_increase_bytes() == 4096 + 30000);
    const auto timeline = outer.timeline();
    REQUIRE(timeline.size() == 1 + 6 + 1);  // start, six events, stop
    CHECK(timeline[3].allocated == 1000 + 4096 + 30000);
    for (std::size_t i = 1; i < timeline.size(); ++i) CHECK(timeline[i].t_us >= timeline[i - 1].t_us);
    outer.write_chrome_trace(trace_path.string());
  }
  std::ifstream f(trace_path);
  const auto j = nlohmann::json::parse(f);
  std::size_t counters = 0;
  std::size_t peak = 0;
  std::vector<std::string> scopes;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "C") {
      ++counters;
      peak = std::max(peak, e.at("args").at("allocated").get<std::size_t>());
      CHECK(e.at("args").contains("reserved"));
    } else if (e.at("ph") == "B" || e.at("ph") == "E") {
      scopes.push_back(e.at("ph").get<std::string>() + e.at("name").get<std::string>());
    }
  }
  CHECK(counters == 8);
  CHECK(peak == 1000 + 4096 + 30000);
  CHECK(scopes == std::vector<std::string>{"Bouter", "Binner", "Einner", "Eouter"});
  std::filesystem::remove(trace_path);
  CHECK_THROWS_AS(dk::memory_profiler(pool).write_chrome_trace("/nonexistent-dir/x.json"), dk::config_error);
  pool.deallocate(base, 1000);
}

namespace {
/// The scope slices of a Chrome trace, as "B<name>" / "E<name>", checked to nest properly.
std::vector<std::string> trace_scopes(const dk::memory_profiler& prof) {
  std::ostringstream os;
  prof.write_chrome_trace(os);
  const auto j = nlohmann::json::parse(os.str());
  std::vector<std::string> scopes;
  std::vector<std::string> open;
  for (const auto& e : j.at("traceEvents")) {
    const auto ph = e.at("ph").get<std::string>();
    if (ph != "B" && ph != "E") continue;
    const auto name = e.at("name").get<std::string>();
    scopes.push_back(ph + name);
    if (ph == "B") {
      open.push_back(name);
    } else {
      REQUIRE_FALSE(open.empty());
      CHECK(open.back() == name);  // an end closes the innermost open slice
      open.pop_back();
    }
  }
  return scopes;
}
}  // namespace

TEST_CASE("memory_profiler stops and restarts like a stopwatch, adding to its figures", "[memory][profiler]") {
  dk::memory_pool<dk::host_resource> pool(test_config());
  void* base = pool.allocate(1000);
  dk::memory_profiler prof(pool, "step", {.record_timeline = true});
  CHECK(prof.running());
  prof.start();  // already running: nothing happens (no second registration)
  void* a = pool.allocate(4096);
  CHECK(prof.allocation_count() == 1);

  prof.stop();
  CHECK_FALSE(prof.running());
  prof.stop();               // already stopped: nothing happens
  pool.deallocate(a, 4096);  // not seen while stopped
  void* unseen = pool.allocate(1 * MiB);
  pool.deallocate(unseen, 1 * MiB);
  // The figures stay readable, and unchanged, while stopped.
  CHECK(prof.allocation_count() == 1);
  CHECK(prof.free_count() == 0);
  CHECK(prof.peak_bytes() == 1000 + 4096);
  CHECK(prof.timeline().size() == 3);  // start, one allocation, stop

  prof.start();
  CHECK(prof.running());
  prof.start();
  void* c = pool.allocate(2000);
  // Counts add up over the periods; the first period's peak (higher than anything since) stays.
  CHECK(prof.allocation_count() == 2);
  CHECK(prof.bytes_allocated() == 4096 + 2000);
  CHECK(prof.peak_bytes() == 1000 + 4096);
  CHECK(prof.peak_increase_bytes() == 4096);  // above what was allocated at the first start
  void* d = pool.allocate(10000);
  CHECK(prof.peak_bytes() == 1000 + 2000 + 10000);
  CHECK(prof.peak_increase_bytes() == 2000 + 10000);
  CHECK(prof.peak_reserved_bytes() >= prof.peak_bytes());

  {
    // A scope opened inside the profiler and still open when it stops ends there in its trace.
    dk::memory_profiler inner(pool, "inner", {.record_timeline = true});
    pool.deallocate(c, 2000);
    prof.stop();
    pool.deallocate(d, 10000);  // seen by inner only
    CHECK(inner.free_count() == 2);
    prof.start();
    CHECK(trace_scopes(inner) == std::vector<std::string>{"Binner", "Bstep"});  // both still open
  }
  CHECK(prof.free_count() == 1);
  prof.stop();
  const auto timeline = prof.timeline();
  // Period 1: start, a, stop. Period 2: start, c, d, free c, stop. Period 3: start, stop.
  REQUIRE(timeline.size() == 3 + 5 + 2);
  for (std::size_t i = 1; i < timeline.size(); ++i) CHECK(timeline[i].t_us >= timeline[i - 1].t_us);
  CHECK(timeline[3].allocated == 1000);  // the second period starts where the pool was then
  CHECK(trace_scopes(prof) ==
        std::vector<std::string>{"Bstep", "Estep", "Bstep", "Binner", "Einner", "Estep", "Bstep", "Estep"});
  pool.deallocate(base, 1000);
}

// --- buffers and allocators -------------------------------------------------------------------------

TEST_CASE("device_buffer owns its elements and is move-only", "[memory][buffer]") {
  STATIC_REQUIRE_FALSE(std::is_copy_constructible_v<dk::device_buffer<float>>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<dk::device_buffer<float>>);
  dk::memory_pool<dk::host_resource> pool(test_config());
  {
    dk::device_buffer<float> a(1000, pool);
    CHECK(a.size() == 1000);
    CHECK(a.size_bytes() == 4000);
    CHECK(a.get_device() == dk::device::cpu());
    CHECK(addr(a.data()) % 256 == 0);
    auto span = a.host_span();
    for (std::size_t i = 0; i < span.size(); ++i) span[i] = static_cast<float>(i);
    CHECK(pool.stats().allocated_bytes == 4000);
    dk::device_buffer<float> b = std::move(a);
    CHECK(a.data() == nullptr);
    CHECK(a.empty());
    CHECK(b.data()[999] == 999.0f);
    dk::device_buffer<float> c(10, pool);
    c = std::move(b);
    CHECK(pool.stats().allocated_bytes == 4000);  // c's old 40 bytes were freed
    CHECK(c.size() == 1000);
    dk::device_buffer<double> d(16, pool, dk::stream{});
    CHECK(d.stream_ordered());
  }
  CHECK(pool.stats().allocated_bytes == 0);
  CHECK(pool.stats().active_blocks == 0);
  CHECK_THROWS_AS(dk::device_buffer<double>(std::numeric_limits<std::size_t>::max() / 4, pool), dk::invalid_request);
  pool.check_consistency();
}

TEST_CASE("pool_allocator puts a std::vector on the host pool", "[memory][allocator]") {
  dk::memory_pool<dk::host_resource> pool(test_config());
  using alloc = dk::pool_allocator<int>;
  {
    std::vector<int, alloc> v{alloc(pool)};
    for (int i = 0; i < 100000; ++i) v.push_back(i);
    CHECK(v[99999] == 99999);
    CHECK(pool.stats().allocation_count > 10);  // the vector grew through the pool
    CHECK(pool.stats().allocated_bytes == v.capacity() * sizeof(int));
    std::vector<int, alloc> w(v.get_allocator());
    CHECK(w.get_allocator() == v.get_allocator());
    const dk::pool_allocator<double> rebound(v.get_allocator());
    CHECK(rebound == v.get_allocator());
  }
  CHECK(pool.stats().allocated_bytes == 0);
}

// --- the manager's pools --------------------------------------------------------------------------

TEST_CASE("the manager makes one pool per device on first use, sized by its strategy", "[memory][manager]") {
  STATIC_REQUIRE_FALSE(std::is_copy_constructible_v<dk::device_manager<>>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<dk::device_manager<>>);
  STATIC_REQUIRE(
      sizeof(dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::tracked<dk::balanced>>) ==
      sizeof(dk::detail::manager_state));
  dk::device_manager<dk::fixed_detector> dm{dk::settings::without_environment(),
                                            dk::fixed_detector{host_with(64 * MiB)}};
  CHECK(dm.memory_stats().empty());  // nothing made yet
  dk::device_memory& m = dm.memory(dk::device::cpu());
  CHECK(&m == &dm.memory());
  CHECK(m.get_device() == dk::device::cpu());
  CHECK(m.budget().total_bytes == 64 * MiB);
  CHECK(m.budget().budget_bytes == 48 * MiB);
  CHECK(m.stats().max_size == 48 * MiB);
  CHECK_THROWS_WITH(dm.memory(dk::device::cuda(3)), Catch::Contains("not one of this manager's devices"));
  CHECK_THROWS_AS(dm.memory(dk::device::cpu(1)), dk::config_error);
  void* p = m.allocate(1 * MiB);
  CHECK(dm.memory_stats().at(0).second.allocated_bytes == 1 * MiB);
  CHECK_THROWS_AS(m.allocate(49 * MiB), dk::out_of_memory);
  m.deallocate(p, 1 * MiB);
  // Moving the manager moves its pools.
  auto moved = std::move(dm);
  CHECK(&moved.memory(dk::device::cpu()) == &m);
}

namespace {
struct small_slabs_strategy {
  static constexpr std::string_view name() noexcept { return "small-slabs"; }
  static constexpr double fraction() noexcept { return 0.5; }
  void configure_pool(dk::pool_config& c, const dk::memory_budget&) const { c.small_size_limit = 0; }
};
}  // namespace

TEST_CASE("strategies shape the manager's pools: start/cap, configure_pool, tracked", "[memory][manager]") {
  dk::device_manager<dk::fixed_detector, dk::fraction_range<1, 4, 1, 2>> ranged{
      dk::settings::without_environment(), dk::fixed_detector{host_with(64 * MiB)}};
  const auto s = ranged.memory(dk::device::cpu()).stats();
  CHECK(s.reserved_bytes == 16 * MiB);  // the start, preallocated
  CHECK(s.max_size == 32 * MiB);        // the cap
  dk::device_manager<dk::fixed_detector, small_slabs_strategy> custom{dk::settings::without_environment(),
                                                                      dk::fixed_detector{host_with(64 * MiB)}};
  CHECK(custom.memory(dk::device::cpu()).config().small_size_limit == 0);
  dk::device_manager<dk::fixed_detector, dk::tracked<dk::conservative>> tracked{
      dk::settings::without_environment(), dk::fixed_detector{host_with(64 * MiB)}};
  CHECK(tracked.memory(dk::device::cpu()).tracking());
  CHECK(tracked.memory_fraction() == 0.60);
}

namespace {
/// A strategy that asks for a fixed start, whatever the device: more than a small device's budget.
struct fixed_start_strategy {
  static constexpr std::string_view name() noexcept { return "fixed-start"; }
  static constexpr double fraction() noexcept { return 0.5; }
  void configure_pool(dk::pool_config& c, const dk::memory_budget&) const { c.initial_size = 64 * MiB; }
};
}  // namespace

TEST_CASE("a strategy's start larger than a device's budget preallocates the budget", "[memory][manager]") {
  dk::device_manager<dk::fixed_detector, fixed_start_strategy> small{dk::settings::without_environment(),
                                                                     dk::fixed_detector{host_with(64 * MiB)}};
  const dk::pool_config c = small.pool_config_for(dk::device::cpu());
  CHECK(c.max_size == 32 * MiB);
  CHECK(c.initial_size == 32 * MiB);  // the budget of this device, not an error
  CHECK(small.memory().stats().reserved_bytes == 32 * MiB);
  dk::device_manager<dk::fixed_detector, fixed_start_strategy> large{dk::settings::without_environment(),
                                                                     dk::fixed_detector{host_with(1024 * MiB)}};
  CHECK(large.pool_config_for(dk::device::cpu()).initial_size == 64 * MiB);
}

TEST_CASE("the report shows each device's budget basis and pool stats", "[memory][manager][report]") {
  dk::device_manager<dk::fixed_detector> dm{dk::settings::without_environment(),
                                            dk::fixed_detector{host_with(64 * MiB)}};
  auto j = dk::to_json(dm.report());
  const auto& mem = j.at("devices").at(0).at("memory");
  CHECK(mem.at("total_bytes") == 64 * MiB);
  CHECK(mem.at("headroom_bytes") == 0);
  CHECK(mem.at("fraction") == 0.75);
  CHECK(mem.at("budget_bytes") == 48 * MiB);
  CHECK(mem.at("pool").is_null());
  void* p = dm.memory(dk::device::cpu()).allocate(1 * MiB);
  j = dk::to_json(dm.report());
  const auto& pool = j.at("devices").at(0).at("memory").at("pool");
  CHECK(pool.at("allocated_bytes") == 1 * MiB);
  CHECK(pool.at("reserved_bytes") == 2 * MiB);
  CHECK(pool.at("max_size") == 48 * MiB);
  for (const char* key : {"peak_allocated_bytes", "in_use_bytes", "peak_reserved_bytes", "largest_free_block",
                          "fragmentation", "active_blocks", "allocation_count", "free_count", "oom_count"}) {
    INFO(key);
    CHECK(pool.contains(key));
  }
  std::ostringstream text;
  dk::print_device_info(dm, text);
  CHECK_THAT(text.str(),
             Catch::Contains("Memory: budget 48.0 MiB = 0.75 x 64.0 MiB - 0.0 MiB headroom; pool: 1.0 MiB allocated"));
  dm.memory(dk::device::cpu()).deallocate(p, 1 * MiB);

  // GPUs (simulated): the budget basis is there before any pool exists.
  dk::device_manager<dk::fixed_detector, dk::aggressive> gpus{dk::settings::without_environment(),
                                                              dk::fixed_detector{simulated_gpus(2)}};
  const auto g = dk::to_json(gpus.report());
  const auto& gm = g.at("devices").at(1).at("memory");
  CHECK(gm.at("total_bytes") == (80ull << 30));
  CHECK(gm.at("headroom_bytes") == (512ull << 20));
  CHECK(gm.at("fraction") == 0.90);
  CHECK(std::llabs(gm.at("budget_bytes").get<long long>() - static_cast<long long>((72ull << 30) - (512ull << 20))) <=
        1);
  CHECK(gm.at("pool").is_null());
  CHECK(g.at("host_memory").is_null());
}

TEST_CASE("a collective reserve shrinks each GPU's budget and must fit the device", "[memory][strategy][manager]") {
  using gpu_manager = dk::device_manager<dk::fixed_detector, dk::balanced>;
  const gpu_manager plain{dk::settings::without_environment(), dk::fixed_detector{dk::testing::simulated_gpus(2)}};
  const gpu_manager reserved{dk::settings::without_environment().set_collective_memory_size(1ull << 30),
                             dk::fixed_detector{dk::testing::simulated_gpus(2)}};
  const auto before = plain.budget(dk::device::cuda(1));
  const auto after = reserved.budget(dk::device::cuda(1));
  CHECK(before.collective_reserve_bytes == 0u);
  CHECK(after.collective_reserve_bytes == (1ull << 30));
  CHECK(after.budget_bytes == before.budget_bytes - (1ull << 30));
  CHECK(reserved.pool_config_for(dk::device::cuda(1)).max_size == after.budget_bytes);
  // The host's budget has no collectives to serve.
  CHECK(reserved.budget(dk::device::cpu()).budget_bytes == plain.budget(dk::device::cpu()).budget_bytes);

  CHECK_THROWS_WITH(
      (gpu_manager{dk::settings::without_environment().set_collective_memory_size(81ull << 30),
                   dk::fixed_detector{dk::testing::simulated_gpus(1)}}),
      Catch::Contains("collective_memory_size") && Catch::Contains("exceeds") && Catch::Contains("cuda:0"));
  // A reserve larger than the budget (but not the device) leaves nothing to allocate: a budget of 0.
  CHECK(dk::reserve_for_collectives(before, 79ull << 30, "cuda:1").budget_bytes == 0u);
}

TEST_CASE("allocator kinds other than pool make uncached GPU pools; the host keeps its pool", "[memory][manager]") {
  using gpu_manager = dk::device_manager<dk::fixed_detector, dk::balanced>;
  const gpu_manager async{dk::settings::without_environment().set_allocator(dk::allocator_kind::async),
                          dk::fixed_detector{dk::testing::simulated_gpus(1)}};
  CHECK(async.allocator() == dk::allocator_kind::async);
  CHECK(async.pool_config_for(dk::device::cuda(0)).release_on_free);
  CHECK_FALSE(async.pool_config_for(dk::device::cpu()).release_on_free);
  const gpu_manager pool{dk::settings::without_environment(), dk::fixed_detector{dk::testing::simulated_gpus(1)}};
  CHECK(pool.allocator() == dk::allocator_kind::pool);
  CHECK_FALSE(pool.pool_config_for(dk::device::cuda(0)).release_on_free);
}

TEST_CASE("a pool that releases on free gives every allocation back upstream", "[memory][pool]") {
  dk::pool_config c;
  c.max_size = 64 * MiB;
  c.release_on_free = true;
  c.tracking = dk::tracking_mode::off;
  dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, c};
  void* a = pool.allocate(1000);
  void* b = pool.allocate(3 * MiB);
  auto s = pool.stats();
  CHECK(s.upstream_allocations == 2u);        // one each: no size-class slab, no growth step
  CHECK(s.reserved_bytes == 1024 + 3 * MiB);  // each rounded to 256 bytes only
  CHECK(s.largest_allocation_bytes == 3 * MiB);
  pool.deallocate(a, 1000);
  CHECK(pool.stats().reserved_bytes == 3 * MiB);
  pool.deallocate(b, 3 * MiB);
  s = pool.stats();
  CHECK(s.reserved_bytes == 0u);
  CHECK(s.upstream_frees == 2u);
  CHECK(s.largest_allocation_bytes == 3 * MiB);  // a high-water mark: stays after the free
  pool.check_consistency();
}

TEST_CASE("a manager's memory_stats and live_buffers of cpu:0 include what dk::place put there",
          "[memory][manager][stats]") {
  dk::device_manager<dk::fixed_detector, dk::balanced> dm{dk::settings::without_environment(),
                                                          dk::fixed_detector{host_with(64 * MiB)}};
  const dk::device cpu = dk::device::cpu();
  const auto before = dm.memory_stats(cpu);
  const auto host_before = dm.memory_stats(cpu, dk::memory_kind::host);
  const std::size_t live_before = dm.live_buffers(cpu).size();
  constexpr std::size_t count = std::size_t{1} << 16;
  {
    const auto placed = dk::place(std::vector<float>(count, 1.f), cpu);  // the process's host pool, not dm's
    const auto during = dm.memory_stats(cpu);
    CHECK(during.bytes_in_use >= before.bytes_in_use + count * sizeof(float));
    CHECK(during.num_allocs > before.num_allocs);
    CHECK(during.bytes_reserved >= count * sizeof(float));
    CHECK(during.bytes_limit == dm.budget(cpu).budget_bytes);
    CHECK(dm.memory_stats(cpu, dk::memory_kind::host).bytes_in_use >= host_before.bytes_in_use + count * sizeof(float));
    const auto live = dm.live_buffers(cpu);
    CHECK(live.size() == live_before + 1);
    CHECK(std::any_of(live.begin(), live.end(), [&](const auto& r) { return r.bytes >= count * sizeof(float); }));
    // dm's own pool is counted alongside it.
    void* own = dm.memory(cpu).allocate(4096);
    CHECK(dm.memory_stats(cpu).bytes_in_use == during.bytes_in_use + 4096);
    CHECK(dm.live_buffers(cpu).size() == live_before + 2);
    dm.memory(cpu).deallocate(own, 4096);
  }
  CHECK(dm.memory_stats(cpu).bytes_in_use == before.bytes_in_use);
  CHECK(dm.live_buffers(cpu).size() == live_before);
}

TEST_CASE("make_device_pool makes the pool a manager would, from your own configuration", "[memory][pool][manager]") {
  const dk::device cpu = dk::device::cpu();
  dk::pool_config config;
  config.max_size = 8 * MiB;
  config.small_size_limit = 0;  // no size classes: every block is its request, rounded
  config.tracking = dk::tracking_mode::on;
  std::unique_ptr<dk::device_memory> pool = dk::make_device_pool(cpu, config);
  REQUIRE(dynamic_cast<dk::memory_pool<dk::host_resource>*>(pool.get()) != nullptr);
  CHECK(pool->get_device() == cpu);
  CHECK(pool->config().max_size == 8 * MiB);
  CHECK(pool->stats().max_size == 8 * MiB);
  CHECK(pool->tracking());
  void* p = pool->allocate(1000);
  CHECK(pool->stats().in_use_bytes == 1024);  // 1000 rounded to the granule: no size class
  REQUIRE(pool->live_allocations().size() == 1);
  CHECK(pool->live_allocations().front().where.line() != 0);  // tracked
  CHECK_THROWS_AS(pool->allocate(9 * MiB), dk::out_of_memory);
  pool->deallocate(p, 1000);

  // A manager's pool is exactly this from its configuration (pool_config_for: the strategy's).
  dk::device_manager<dk::fixed_detector, dk::conservative> dm{dk::settings::without_environment(),
                                                              dk::fixed_detector{host_with(64 * MiB)}};
  const std::unique_ptr<dk::device_memory> same = dk::make_device_pool(cpu, dm.pool_config_for(cpu), dm.allocator());
  CHECK(same->stats().max_size == dm.memory(cpu).stats().max_size);
  CHECK(same->budget().budget_bytes == dm.memory(cpu).budget().budget_bytes);
  CHECK(same->budget().fraction == 0.60);

  // Without a budget or max_size: the balanced strategy's budget of the host.
  const std::unique_ptr<dk::device_memory> plain = dk::make_device_pool(cpu);
  CHECK(plain->budget().fraction == 0.75);
  CHECK(plain->stats().max_size == plain->budget().budget_bytes);

  config.growth_factor = 0.5;  // a bad configuration is refused when the pool is made
  CHECK_THROWS_WITH(dk::make_device_pool(cpu, config), Catch::Contains("growth_factor"));
}

TEST_CASE("memory_stats(dev) has jaxlib's keys and follows allocations; live_buffers lists them",
          "[memory][manager][stats]") {
  dk::device_manager<dk::fixed_detector, dk::balanced> dm{dk::settings::without_environment(),
                                                          dk::fixed_detector{host_with(64 * MiB)}};
  const dk::device cpu = dk::device::cpu();
  // The process's host pool (what dk::place(tree, cpu) uses) counts too: what it holds from
  // earlier cases in this process is the base.
  const auto base = dm.memory_stats(cpu);  // no pool of dm's made yet, none made by asking
  const std::size_t live_base = dm.live_buffers(cpu).size();
  CHECK(base.bytes_limit == dm.budget(cpu).budget_bytes);
  CHECK(dm.memory_stats().empty());

  auto& pool = dm.memory(cpu);
  void* small = pool.allocate(1000);
  void* large = pool.allocate(5 * MiB);
  auto s = dm.memory_stats(cpu);
  CHECK(s.bytes_in_use == base.bytes_in_use + 1000 + 5 * MiB);
  CHECK(s.peak_bytes_in_use == base.peak_bytes_in_use + 1000 + 5 * MiB);
  CHECK(s.num_allocs == base.num_allocs + 2);
  CHECK(s.largest_alloc_size == std::max<std::uint64_t>(base.largest_alloc_size, 5 * MiB));
  CHECK(s.bytes_limit == dm.budget(cpu).budget_bytes);
  CHECK(s.bytes_reserved == base.bytes_reserved + pool.stats().reserved_bytes);
  CHECK(s.bytes_reserved >= s.bytes_in_use);
  CHECK(s.largest_free_block_bytes ==
        std::max<std::uint64_t>(base.largest_free_block_bytes, pool.stats().largest_free_block));

  const auto live = dm.live_buffers(cpu);
  REQUIRE(live.size() == live_base + 2);
  std::vector<void*> ptrs;
  for (const auto& r : live) ptrs.push_back(r.ptr);
  CHECK(std::find(ptrs.begin(), ptrs.end(), small) != ptrs.end());
  CHECK(std::find(ptrs.begin(), ptrs.end(), large) != ptrs.end());

  pool.deallocate(large, 5 * MiB);
  s = dm.memory_stats(cpu);
  CHECK(s.bytes_in_use == base.bytes_in_use + 1000);
  CHECK(s.peak_bytes_in_use == base.peak_bytes_in_use + 1000 + 5 * MiB);
  CHECK(dm.live_buffers(cpu).size() == live_base + 1);

  const auto map = s.as_map();
  std::vector<std::string> keys;
  for (const auto& [k, v] : map) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"bytes_in_use", "bytes_limit", "bytes_reserved", "largest_alloc_size",
                                         "largest_free_block_bytes", "num_allocs", "peak_bytes_in_use"});
  CHECK(map.at("bytes_in_use") == static_cast<std::int64_t>(base.bytes_in_use + 1000));
  CHECK(map.at("num_allocs") == static_cast<std::int64_t>(base.num_allocs + 2));
  CHECK_THAT(s.to_json(), Catch::StartsWith("{\"bytes_in_use\": " + std::to_string(base.bytes_in_use + 1000) +
                                            ", \"bytes_limit\": ") &&
                              Catch::EndsWith("}"));
  pool.deallocate(small, 1000);

  CHECK_THROWS_WITH(dm.memory_stats(dk::device::cuda(3)), Catch::Contains("not one of this manager's devices"));
  CHECK_THROWS_AS(dm.live_buffers(dk::device::cuda(3)), dk::config_error);
}

TEST_CASE("the generative preset follows the hardware and configures a manager", "[memory][strategy][manager]") {
  auto gpus_with = [](int major, int minor) {
    auto caps = dk::testing::simulated_gpus(2);
    caps.cc = dk::compute_capability{major, minor};
    caps.precision = dk::precision_for(*caps.cc);
    for (auto& p : caps.devices) p.cc = *caps.cc;
    return caps;
  };
  CHECK(dk::generative_model_preset(gpus_with(9, 0)).compute_dtype == "bf16");
  CHECK(dk::generative_model_preset(gpus_with(8, 0)).compute_dtype == "bf16");
  CHECK(dk::generative_model_preset(gpus_with(7, 0)).compute_dtype == "fp16");
  const auto maxwell = dk::generative_model_preset(gpus_with(5, 2));
  CHECK(maxwell.compute_dtype == "fp32");
  CHECK_FALSE(maxwell.mixed_precision);

  // From a manager: its devices decide, its settings travel with the preset.
  using gpu_manager = dk::device_manager<dk::fixed_detector, dk::dynamic_strategy>;
  const gpu_manager volta{dk::settings::without_environment().set_collective_memory_size(1ull << 30),
                          dk::fixed_detector{gpus_with(7, 0)}};
  const auto preset = dk::generative_model_preset(volta);
  CHECK(preset.compute_dtype == "fp16");
  CHECK(preset.mixed_precision);
  CHECK(preset.config.get_collective_memory_size() == (1ull << 30));

  // The preset is a ready manager configuration.
  auto cfg = preset.manager();
  cfg.strategy = dk::describe_strategy(dk::aggressive{});
  const gpu_manager made{cfg, dk::fixed_detector{gpus_with(7, 0)}};
  CHECK(made.memory_fraction() == 0.90);
  CHECK(made.budget(dk::device::cuda(0)).collective_reserve_bytes == (1ull << 30));
  const gpu_manager from_preset{preset.manager(), dk::fixed_detector{gpus_with(7, 0)}};
  CHECK(from_preset.memory_fraction() == 0.75);
  CHECK(from_preset.report().strategy.name == "balanced");
}

TEST_CASE("graph blocks: a capture holds its peak, reuse inside it is free, release leaves orphans",
          "[memory][graph]") {
  dk::detail::graph_blocks gb;
  int storage[4] = {};
  const void* a = &storage[0];
  const void* b = &storage[1];
  const void* c = &storage[2];
  CHECK(gb.growth_for(1, 512) == 512);
  gb.add(a, 512, 1);
  gb.add(b, 256, 1);
  CHECK(gb.reserved() == 768);
  gb.remove(a);  // freed inside the capture: the graph may reuse it
  CHECK(gb.live(1) == 256);
  CHECK(gb.peak(1) == 768);
  CHECK(gb.growth_for(1, 512) == 0);  // fits in what the capture already holds
  CHECK(gb.growth_for(1, 1024) == 512);
  gb.add(c, 512, 1);
  CHECK(gb.reserved() == 768);
  gb.add(a, 256, 2);  // another capture counts on its own
  CHECK(gb.reserved() == 1024);
  gb.release(1);  // its graph is gone; b and c were never freed
  CHECK(gb.reserved() == 256);
  CHECK(gb.count() == 3);
  REQUIRE(gb.find(b) != nullptr);
  CHECK(gb.find(b)->orphaned);
  gb.remove(b);
  gb.remove(c);
  CHECK(gb.live(2) == 256);
  gb.remove(a);
  gb.release(2);
  CHECK(gb.empty());
  CHECK(gb.reserved() == 0);
}
