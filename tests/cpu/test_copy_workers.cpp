// transfer/detail/copy_workers.hpp: the host threads that share the packing and unpacking of
// staged transfers, and for_each_part_shared, which splits a staged chunk's copies over them. All
// on the host; the staged transfers that use them run on simulated GPUs in
// tests/sim/test_sim_transfer.cpp.
#include <catch2/catch.hpp>

#include <devicekit/core/error.hpp>
#include <devicekit/transfer/detail/copy.hpp>
#include <devicekit/transfer/detail/staging_ring.hpp>

#include "../common/copy_threads.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

namespace dk = devicekit;

namespace {

using devicekit::testing::scoped_copy_threads;

/// Ranges of random sizes (some below a page, some of several MiB) with random gaps, sorted and
/// not overlapping, as placement lays out a tree's leaves in its block.
std::vector<dk::detail::staged_range> random_ranges(std::mt19937_64& gen, std::size_t count) {
  std::uniform_int_distribution<std::size_t> size(1, std::size_t{3} << 20);
  std::uniform_int_distribution<std::size_t> small(1, 5000);
  std::uniform_int_distribution<std::size_t> gap(0, 300);
  std::vector<dk::detail::staged_range> r;
  std::size_t at = 0;
  for (std::size_t i = 0; i < count; ++i) {
    at += gap(gen);
    const std::size_t n = i % 3 == 0 ? small(gen) : size(gen);
    r.push_back({at, n});
    at += n;
  }
  return r;
}

}  // namespace

TEST_CASE("copy threads run every part of a job exactly once", "[transfer][copy_workers]") {
  auto& workers = dk::detail::copy_workers::instance();
  for (const std::size_t threads : {1u, 2u, 3u, 6u}) {
    scoped_copy_threads use(threads);
    CHECK(dk::host_copy_threads() == threads);
    for (const std::size_t parts : {0u, 1u, 2u, 5u, 17u, 64u}) {
      std::vector<std::atomic<int>> ran(parts);
      std::vector<std::atomic<int>> on_caller(parts);
      const auto caller = std::this_thread::get_id();
      auto task = [&](std::size_t i) {
        ran[i].fetch_add(1);
        if (std::this_thread::get_id() == caller) on_caller[i].fetch_add(1);
      };
      const auto shared_before = workers.shared_jobs();
      workers.run(parts, task);
      for (std::size_t i = 0; i < parts; ++i) CHECK(ran[i].load() == 1);
      // One thread, or one part: the caller runs it all, and nothing counts as shared.
      if (threads == 1 || parts <= 1) {
        CHECK(workers.shared_jobs() == shared_before);
        for (std::size_t i = 0; i < parts; ++i) CHECK(on_caller[i].load() == 1);
      } else {
        CHECK(workers.shared_jobs() == shared_before + 1);
      }
    }
  }
}

TEST_CASE("copy threads serve callers on several threads at once", "[transfer][copy_workers]") {
  scoped_copy_threads use(3);
  auto& workers = dk::detail::copy_workers::instance();
  constexpr std::size_t jobs = 200;
  constexpr std::size_t parts = 9;
  std::vector<std::atomic<int>> ran(4 * jobs * parts);
  std::vector<std::thread> callers;
  for (std::size_t c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (std::size_t j = 0; j < jobs; ++j) {
        auto task = [&](std::size_t i) { ran[(c * jobs + j) * parts + i].fetch_add(1); };
        workers.run(parts, task);  // alone when another caller has the workers: never waits behind it
      }
    });
  }
  for (auto& t : callers) t.join();
  std::size_t wrong = 0;
  for (const auto& r : ran) wrong += r.load() != 1 ? 1 : 0;
  CHECK(wrong == 0);
}

TEST_CASE("the number of copy threads: its bounds, its default and DEVICEKIT_COPY_THREADS",
          "[transfer][copy_workers]") {
  dk::testing::scoped_env no_env("DEVICEKIT_COPY_THREADS", nullptr);
  dk::set_host_copy_threads(0);
  const std::size_t by_default = dk::host_copy_threads();
  // Half the CPUs this process may run on, from 1 to 8.
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(by_default == std::clamp<std::size_t>(static_cast<std::size_t>(CPU_COUNT(&set)) / 2, 1, 8));
  try {
    dk::set_host_copy_threads(65);
    FAIL("65 copy threads were accepted");
  } catch (const dk::config_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("at most 64"));
  }
  CHECK(dk::host_copy_threads() == by_default);  // a refused setting changes nothing
  {
    dk::testing::scoped_env env("DEVICEKIT_COPY_THREADS", "5");
    dk::set_host_copy_threads(0);
    CHECK(dk::host_copy_threads() == 5);
  }
  for (const char* bad : {"0", "65", "four", "2x", "-1"}) {
    dk::testing::scoped_env env("DEVICEKIT_COPY_THREADS", bad);
    try {
      dk::set_host_copy_threads(0);
      FAIL(std::string("DEVICEKIT_COPY_THREADS=") + bad + " was accepted");
    } catch (const dk::config_error& e) {
      CHECK_THAT(e.what(), Catch::Contains(std::string("DEVICEKIT_COPY_THREADS='") + bad + "'"));
      CHECK_THAT(e.what(), Catch::Contains("from 1 to 64"));
    }
  }
  dk::set_host_copy_threads(0);
  CHECK(dk::host_copy_threads() == by_default);
}

// The shared split must hand out exactly the bytes for_each_part does, at the same places: a
// staging buffer packed both ways is the same, for chunk windows that cut ranges anywhere.
TEST_CASE("a staged chunk packed by several threads matches one thread's packing", "[transfer][copy_workers]") {
  std::mt19937_64 gen(7);
  const auto ranges = random_ranges(gen, 24);
  const std::size_t total = ranges.back().at + ranges.back().bytes;
  std::vector<std::byte> source(total);
  for (std::size_t i = 0; i < total; ++i) source[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  for (const std::size_t threads : {1u, 2u, 4u, 7u}) {
    scoped_copy_threads use(threads);
    for (const std::size_t chunk : {std::size_t{8} << 20, std::size_t{3} << 20, (std::size_t{1} << 20) + 4097}) {
      std::size_t cursor_one = 0;
      std::size_t cursor_shared = 0;
      for (std::size_t lo = 0; lo < total; lo += chunk) {
        const std::size_t hi = std::min(total, lo + chunk);
        std::vector<std::byte> one(hi - lo, std::byte{0xEE});
        std::vector<std::byte> shared(hi - lo, std::byte{0xEE});
        dk::detail::for_each_part(ranges, cursor_one, lo, hi,
                                  [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
                                    std::memcpy(one.data() + to, source.data() + ranges[k].at + from, n);
                                  });
        std::atomic<std::size_t> bytes{0};
        dk::detail::for_each_part_shared(ranges, cursor_shared, lo, hi,
                                         [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
                                           std::memcpy(shared.data() + to, source.data() + ranges[k].at + from, n);
                                           bytes.fetch_add(n);
                                         });
        INFO("threads " << threads << ", chunk " << chunk << ", at " << lo);
        CHECK(one == shared);
        std::size_t covered = 0;  // what the ranges hold inside [lo, hi): each byte once
        for (const auto& r : ranges) {
          const std::size_t a = std::max(lo, r.at);
          const std::size_t z = std::min(hi, r.at + r.bytes);
          covered += a < z ? z - a : 0;
        }
        CHECK(bytes.load() == covered);
      }
    }
  }
}

TEST_CASE("host-to-host copies of a MiB or more are shared over the copy threads", "[transfer][copy_workers]") {
  auto& workers = dk::detail::copy_workers::instance();
  std::mt19937_64 gen(11);
  const auto layout = random_ranges(gen, 16);  // item sizes and gaps, sources and destinations alike
  const std::size_t extent = layout.back().at + layout.back().bytes;
  std::vector<std::byte> source(extent);
  for (std::size_t i = 0; i < extent; ++i) source[i] = static_cast<std::byte>((i * 29 + 3) & 0xff);
  for (const std::size_t threads : {1u, 4u}) {
    scoped_copy_threads use(threads);
    std::vector<std::byte> dest(extent + 64, std::byte{0xEE});
    std::vector<dk::detail::copy_item> items;
    for (const auto& r : layout) {
      // Destinations 64 bytes further on than their sources: unaligned relative to them.
      items.push_back({source.data() + r.at, dk::device::cpu(), nullptr, dest.data() + 64 + r.at, r.bytes});
    }
    const auto shared_before = workers.shared_jobs();
    dk::detail::copy_host_items(items);
    INFO("threads " << threads);
    CHECK(workers.shared_jobs() == shared_before + (threads > 1 ? 1 : 0));
    std::size_t wrong = 0;
    std::size_t next = 0;  // bytes between items (the gaps) stay untouched
    for (const auto& r : layout) {
      for (std::size_t i = next; i < r.at; ++i) wrong += dest[64 + i] != std::byte{0xEE} ? 1 : 0;
      wrong += std::memcmp(dest.data() + 64 + r.at, source.data() + r.at, r.bytes) != 0 ? 1 : 0;
      next = r.at + r.bytes;
    }
    CHECK(wrong == 0);
    for (std::size_t i = 0; i < 64; ++i) CHECK(dest[i] == std::byte{0xEE});
  }
  // Under a MiB in all: the caller copies alone.
  scoped_copy_threads use(4);
  std::vector<std::byte> small_src((std::size_t{1} << 20) - 1, std::byte{5});
  std::vector<std::byte> small_dst(small_src.size());
  const dk::detail::copy_item item{small_src.data(), dk::device::cpu(), nullptr, small_dst.data(), small_src.size()};
  const auto shared_before = workers.shared_jobs();
  dk::detail::copy_host_items(std::span<const dk::detail::copy_item>(&item, 1));
  CHECK(workers.shared_jobs() == shared_before);
  CHECK(small_dst == small_src);
}
