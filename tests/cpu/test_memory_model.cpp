// The randomized model check of the pool: long random sequences of allocate / deallocate (synchronous
// and on simulated streams) / trim / defragment / clear / event completion / bad frees, against a
// reference model that knows every live allocation. After every step: no two live allocations
// overlap, every alignment is honoured, the bytes written into each allocation survive until it is
// freed, and the stats equal the model's; reserved bytes equal what the upstream handed out; every
// few thousand steps the pool's own invariants are walked (check_consistency).
//
// Steps: DEVICEKIT_MODEL_CHECK_OPS if set; otherwise 1,200,000 under AddressSanitizer (the
// sanitizer suite), 200,000 in an optimised build, 50,000 in other builds (ThreadSanitizer).
// DEVICEKIT_MODEL_CHECK_SEED picks the random sequence (the failing seed is printed).
#include "memory_test_support.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t default_ops = 1'200'000;
#elif defined(NDEBUG)
constexpr std::size_t default_ops = 200'000;
#else
constexpr std::size_t default_ops = 50'000;
#endif

std::size_t env_number(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

struct live_entry {
  std::size_t bytes;
  std::size_t alignment;
  std::uint64_t tag;
};

struct model_check {
  dk_test::event_upstream up;
  dk::memory_pool<dk_test::event_upstream> pool;
  std::mt19937_64 rng;
  std::map<std::uintptr_t, live_entry> live;
  std::vector<std::uintptr_t> recently_freed;
  std::size_t allocated = 0;
  std::size_t peak = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t ooms = 0;
  std::uint64_t next_tag = 1;
  std::size_t target;

  model_check(dk::pool_config cfg, std::uint64_t seed, std::size_t target_live)
      : pool(up, std::move(cfg)), rng(seed), target(target_live) {}

  std::size_t pick(std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng); }

  dk::native_stream_handle some_stream() { return dk_test::fake_stream(pick(1, 3)); }

  static void write_tag(std::uintptr_t a, std::size_t bytes, std::uint64_t tag) {
    auto* p = reinterpret_cast<unsigned char*>(a);
    if (bytes >= 16) {
      std::memcpy(p, &tag, 8);
      std::memcpy(p + bytes - 8, &tag, 8);
    } else {
      p[bytes - 1] = static_cast<unsigned char>(tag >> 8);
      p[0] = static_cast<unsigned char>(tag);  // last: for 1 byte, the first byte is the tag
    }
  }
  static bool tag_intact(std::uintptr_t a, std::size_t bytes, std::uint64_t tag) {
    const auto* p = reinterpret_cast<const unsigned char*>(a);
    if (bytes >= 16) {
      std::uint64_t x = 0;
      std::uint64_t y = 0;
      std::memcpy(&x, p, 8);
      std::memcpy(&y, p + bytes - 8, 8);
      return x == tag && y == tag;
    }
    return p[0] == static_cast<unsigned char>(tag) &&
           (bytes == 1 || p[bytes - 1] == static_cast<unsigned char>(tag >> 8));
  }

  std::size_t random_size() {
    const std::size_t r = pick(0, 99);
    if (r == 0) return 0;
    if (r < 50) return pick(1, 16 * 1024);
    if (r < 85) return pick(16 * 1024 + 1, 256 * 1024);
    return pick(256 * 1024 + 1, 4 * 1024 * 1024);
  }

  void allocate() {
    const std::size_t bytes = random_size();
    const std::size_t alignment = pick(0, 4) == 0 ? std::size_t{1} << pick(0, 16) : 256;
    const bool ordered = pick(0, 1) == 1;
    void* p = nullptr;
    try {
      p = ordered ? pool.allocate_async(bytes, alignment, some_stream()) : pool.allocate(bytes, alignment);
    } catch (const dk::out_of_memory& e) {
      ++ooms;
      REQUIRE(e.requested_bytes() == bytes);
      REQUIRE(e.stats().allocated_bytes == allocated);
      return;
    }
    if (bytes == 0) {
      REQUIRE(p == nullptr);
      return;
    }
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    REQUIRE(p != nullptr);
    REQUIRE(a % std::max<std::size_t>(alignment, 256) == 0);
    auto next = live.lower_bound(a);
    if (next != live.end()) REQUIRE(a + bytes <= next->first);
    if (next != live.begin()) {
      const auto prev = std::prev(next);
      REQUIRE(prev->first + prev->second.bytes <= a);
    }
    const std::uint64_t tag = next_tag++ * 0x9E3779B97F4A7C15ull;
    write_tag(a, bytes, tag);
    live.emplace(a, live_entry{bytes, alignment, tag});
    allocated += bytes;
    peak = std::max(peak, allocated);
    ++allocations;
  }

  std::map<std::uintptr_t, live_entry>::iterator random_live() {
    auto it = live.lower_bound(static_cast<std::uintptr_t>(rng()));
    return it == live.end() ? live.begin() : it;
  }

  void deallocate() {
    if (live.empty()) return;
    const auto it = random_live();
    const auto [a, e] = *it;
    REQUIRE(tag_intact(a, e.bytes, e.tag));
    if (pick(0, 1) == 0) {
      pool.deallocate(reinterpret_cast<void*>(a), e.bytes, e.alignment);
    } else {
      pool.deallocate_async(reinterpret_cast<void*>(a), e.bytes, e.alignment, some_stream());
    }
    live.erase(it);
    allocated -= e.bytes;
    ++frees;
    recently_freed.push_back(a);
    if (recently_freed.size() > 64) recently_freed.erase(recently_freed.begin());
  }

  void bad_free() {
    const dk::pool_stats before = pool.stats();
    switch (pick(0, 2)) {
      case 0: {  // double free of an address that is not live now
        if (recently_freed.empty()) return;
        const std::uintptr_t a = recently_freed[pick(0, recently_freed.size() - 1)];
        if (live.count(a) != 0) return;
        REQUIRE_THROWS_AS(pool.deallocate(reinterpret_cast<void*>(a), 256), dk::invalid_free);
        break;
      }
      case 1: {  // wrong size
        if (live.empty()) return;
        const auto it = random_live();
        REQUIRE_THROWS_AS(pool.deallocate(reinterpret_cast<void*>(it->first), it->second.bytes + 1), dk::invalid_free);
        break;
      }
      default:
        REQUIRE_THROWS_AS(pool.allocate(64, 3 * 256), dk::invalid_request);
        break;
    }
    REQUIRE(pool.stats() == before);
  }

  void check_stats() {
    const auto s = pool.stats();
    REQUIRE(s.allocated_bytes == allocated);
    REQUIRE(s.peak_allocated_bytes == peak);
    REQUIRE(s.active_blocks == live.size());
    REQUIRE(s.allocation_count == allocations);
    REQUIRE(s.free_count == frees);
    REQUIRE(s.oom_count == ooms);
    REQUIRE(s.reserved_bytes == up.outstanding());
    REQUIRE(s.in_use_bytes >= s.allocated_bytes);
    REQUIRE(s.reserved_bytes >= s.in_use_bytes);
    REQUIRE(s.reserved_bytes <= s.max_size);
    REQUIRE(s.free_bytes == s.reserved_bytes - s.in_use_bytes);
    REQUIRE(s.largest_free_block <= s.free_bytes);
    REQUIRE(s.fragmentation >= 0.0);
    REQUIRE(s.fragmentation <= 1.0);
  }

  void step(std::size_t i) {
    const std::size_t r = pick(0, 999);
    const bool below = allocated < target;
    if (r < (below ? 560u : 380u)) {
      allocate();
    } else if (r < 950) {
      deallocate();
    } else if (r < 975) {
      if (pick(0, 1) == 0) {
        up.complete_events();
      } else {
        up.complete_events(some_stream());
      }
    } else if (r < 985) {
      pool.trim();
    } else if (r < 990) {
      (void)pool.defragment(pick(0, 1) == 1);
    } else if (r < 991) {
      pool.clear();
    } else if (r < 995) {
      bad_free();
    } else {
      check_stats();
    }
    if (i % 4096 == 0) {
      check_stats();
      pool.check_consistency();
    }
  }

  void finish() {
    while (!live.empty()) deallocate();
    check_stats();
    pool.check_consistency();
    pool.clear();
    REQUIRE(up.outstanding() == 0);
    REQUIRE(pool.stats().reserved_bytes == 0);
    REQUIRE(pool.stats().pending_stream_frees == 0);
  }
};

void run(dk::pool_config cfg, std::size_t ops, std::size_t target_live) {
  const std::uint64_t seed = env_number("DEVICEKIT_MODEL_CHECK_SEED", 20240611);
  INFO("seed " << seed << " (set DEVICEKIT_MODEL_CHECK_SEED to replay), " << ops << " steps");
  model_check m(std::move(cfg), seed, target_live);
  for (std::size_t i = 0; i < ops; ++i) m.step(i);
  m.finish();
  CHECK(m.allocations > ops / 4);
  CHECK(m.frees == m.allocations);
}

}  // namespace

TEST_CASE("model check: random operations against a reference model", "[memory][pool][model]") {
  const std::size_t ops = env_number("DEVICEKIT_MODEL_CHECK_OPS", default_ops);
  auto cfg = dk_test::test_config(64u << 20);
  run(cfg, ops, 32u << 20);
}

TEST_CASE("model check: no size classes, doubling growth, a tight budget", "[memory][pool][model]") {
  const std::size_t ops = env_number("DEVICEKIT_MODEL_CHECK_OPS", default_ops) / 4;
  auto cfg = dk_test::test_config(24u << 20);
  cfg.small_size_limit = 0;
  cfg.growth_factor = 2.0;
  cfg.max_chunk_size = 8u << 20;
  cfg.initial_size = 4u << 20;
  run(cfg, ops, 20u << 20);
}
