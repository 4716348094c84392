// place/: place, place_view, to_host, device mismatch, copy into placed trees,
// resources, NVTX ranges, the manager's members, default_device_scope and
// memory kinds -- all on the CPU. Shard and replicate are in test_shard.cpp,
// prefetch in test_prefetch.cpp; the cases every backend runs in
// tests/common/place_cases.hpp.
#include <catch2/catch.hpp>

#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/manager.hpp>
#include <devicekit/place/copy.hpp>
#include <devicekit/place/prefetch.hpp>
#include <devicekit/place/shard.hpp>
#include <devicekit/tree/hana.hpp>

#include "place_test_support.hpp"

// The cases every backend runs, on cpu:0.
#define DEVICEKIT_CASES_BACKEND "cpu"
#define DEVICEKIT_CASES_DEVICE() devicekit::device::cpu()
#include "../common/place_cases.hpp"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace dk = devicekit;

// The batches here are shaped arrays, which need an mdspan (CCCL, from the CUDA
// toolkit or on its own, or a standard library with <mdspan>). Without one
// these cases are compiled out and CTest reports cpu.shaped_leaves_unavailable
// as skipped (tests/CMakeLists.txt), which relies on its configure-time answer
// being the one the compiler gives here.
#if defined(DEVICEKIT_TEST_EXPECT_MDSPAN)
static_assert(DEVICEKIT_HAS_MDSPAN == DEVICEKIT_TEST_EXPECT_MDSPAN,
              "tests/CMakeLists.txt's mdspan check disagrees with "
              "devicekit/tree/mdspan.hpp");
#endif
#if DEVICEKIT_HAS_MDSPAN
using namespace place_test;

namespace {

std::vector<std::string>& range_log() {
  static std::vector<std::string> log;
  return log;
}
std::mutex range_mutex;
void record_range(std::string_view name) {
  std::lock_guard lock(range_mutex);
  range_log().emplace_back(name);
}

}  // namespace

TEST_CASE("place on the cpu copies every leaf kind into one block of the pool", "[place]") {
  std::vector<float> v{1.5f, 2.5f, 3.5f};
  std::array<std::uint16_t, 4> a{1, 2, 3, 65535};
  std::vector<double> backing{9.0, 8.0};
  std::span<const double> sp(backing);
  std::vector<int> raw(6);
  std::iota(raw.begin(), raw.end(), 10);
  dk::md::mdspan<int, dk::md::extents<std::size_t, 2, 3>> view(raw.data());
  const auto tree = std::make_tuple(v, a, sp, view, std::int64_t{-7}, make_batch(2));

  counting_resource res;
  const dk::stream cpu_stream;
  {
    auto placed = dk::place(tree, dk::device::cpu(), cpu_stream, res);
    CHECK(res.allocations == 1);  // one block for the whole tree
    CHECK(res.last_alignment == dk::placement_alignment);

    const auto& pv = std::get<0>(placed);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(pv)>, dk::device_array<float>>);
    CHECK(pv.device() == dk::device::cpu());
    CHECK(pv.data() != v.data());
    CHECK(std::vector<float>(pv.data(), pv.data() + pv.size()) == v);
    CHECK(reinterpret_cast<std::uintptr_t>(pv.data()) % dk::placement_alignment == 0);
    const auto& pa = std::get<1>(placed);
    CHECK(pa.data()[3] == 65535);
    CHECK(std::get<2>(placed).data()[1] == 8.0);
    const auto& pview = std::get<3>(placed);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(pview)>,
                                  dk::shaped_array<int, dk::md::extents<std::size_t, 2, 3>>>);
    CHECK(pview(1, 2) == 15);
    CHECK(std::get<4>(placed) == -7);  // scalars by value
    const auto& pb = std::get<5>(placed);
    CHECK(pb.get<"images">()(1, 1, 2) == 1000.f + 11.f);
    CHECK(pb.get<"labels">().data()[1] == 101);
    CHECK(pb.get<"lr">() == 0.5);
    // Every array leaf shares the one owner.
    CHECK(pv.owner() == pb.get<"labels">().owner());
    CHECK(pv.owner() == pview.owner());
    CHECK(dk::same_structure(tree, placed));

    // The source can change: the placed copy does not.
    v[0] = -1.f;
    CHECK(pv.data()[0] == 1.5f);
    CHECK(res.deallocations == 0);
  }
  CHECK(res.deallocations == 1);  // the block went back when the last leaf did
  CHECK(res.live_bytes == 0);
}

TEST_CASE(
    "to_host brings a placed tree back to host containers and the "
    "original struct type",
    "[place]") {
  const batch b = make_batch(3, 2);
  const auto placed = dk::place(b, dk::device::cpu());
  const auto back = dk::to_host(placed);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(back)>, batch>);
  CHECK(back.labels == b.labels);
  CHECK(back.lr == b.lr);
  CHECK(back.images.data() != b.images.data());
  CHECK(std::equal(b.images.data(), b.images.data() + b.images.size(), back.images.data()));

  const auto t =
      std::make_tuple(std::vector<std::uint8_t>{1, 2, 3}, std::vector<std::vector<float>>{{1.f}, {2.f, 3.f}});
  const auto t_back = dk::to_host(dk::place(t, dk::device::cpu()));
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(t_back)>, std::remove_cvref_t<decltype(t)>>);
  CHECK(t_back == t);
}

TEST_CASE("half, bfloat16 and fp8 leaves place, come back and shard bit for bit", "[place][float_types]") {
  std::vector<dk::float16_t> h;
  std::vector<dk::bfloat16_t> bf;
  std::vector<dk::float8_e4m3_t> f8;
  for (int i = 0; i < 6; ++i) {
    h.push_back(dk::narrow_to<dk::float16_t>(0.1f * float(i) - 0.2f));
    bf.push_back(dk::narrow_to<dk::bfloat16_t>(1000.f * float(i)));
    f8.push_back(dk::narrow_to<dk::float8_e4m3_t>(float(i) / 3));
  }
  const auto t = std::make_tuple(h, bf, f8);
  const auto back = dk::to_host(dk::place(t, dk::device::cpu()));
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(back)>, std::remove_cvref_t<decltype(t)>>);
  const auto same_bits = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  CHECK(same_bits(std::get<0>(back), h));
  CHECK(same_bits(std::get<1>(back), bf));
  CHECK(same_bits(std::get<2>(back), f8));
  CHECK(dk::widen(std::get<1>(back)[5]) == 4992.f);  // 5000 in bfloat16 (8 significant bits)

  const auto shards = dk::shard(t, std::vector<dk::device>(2, dk::device::cpu()));
  REQUIRE(shards.size() == 2);
  const auto first = dk::to_host(shards[0]);
  CHECK(std::get<0>(first).size() == 3);
  CHECK(std::memcmp(std::get<0>(first).data(), h.data(), 3 * sizeof(dk::float16_t)) == 0);
}

TEST_CASE("empty trees and zero-length leaves place and come back", "[place]") {
  counting_resource res;
  const dk::stream s;
  const std::tuple<> nothing;
  (void)dk::place(nothing, dk::device::cpu(), s, res);
  CHECK(res.allocations == 0);

  const auto zeros = std::make_tuple(std::vector<float>{}, std::vector<int>{}, 3);
  const auto placed = dk::place(zeros, dk::device::cpu(), s, res);
  CHECK(res.allocations == 0);  // nothing to hold
  CHECK(std::get<0>(placed).empty());
  CHECK(std::get<2>(placed) == 3);
  CHECK(dk::to_host(placed) == zeros);

  const auto mixed = std::make_tuple(std::vector<float>{}, std::vector<int>{4, 5});
  const auto pm = dk::place(mixed, dk::device::cpu(), s, res);
  CHECK(res.allocations == 1);
  CHECK(std::get<1>(pm).data()[1] == 5);
  CHECK(dk::to_host(pm) == mixed);
}

TEST_CASE("place_view is the zero-copy host form: views of the tree's own memory", "[place]") {
  batch b = make_batch(2);
  auto v = dk::place_view(b);
  CHECK(v.get<"labels">().data() == b.labels.data());
  CHECK_FALSE(v.get<"labels">().owns());
  v.get<"images">()(0, 0, 0) = 42.f;
  CHECK(b.images(0, 0, 0) == 42.f);

  std::tuple<dk::device_array<float>> on_gpu{dk::device_array<float>::view(nullptr, 0, dk::device::cuda(0))};
  CHECK_THROWS_AS(dk::place_view(on_gpu), dk::device_mismatch);
}

TEST_CASE("operations mixing devices fail with a device_mismatch naming both", "[place][mismatch]") {
  // Views of (fake) device memory: the check comes before any copy, so it runs
  // without a GPU.
  float dummy[4] = {};
  const std::tuple<dk::device_array<float>, dk::device_array<float>> split{
      dk::device_array<float>::view(dummy, 4, dk::device::cuda(0)),
      dk::device_array<float>::view(dummy, 4, dk::device::cuda(1))};
  CHECK_THROWS_AS((void)dk::place(split, dk::device::cpu()), dk::device_mismatch);
  CHECK_THROWS_WITH((void)dk::place(split, dk::device::cpu()),
                    Catch::Matchers::Contains("'[0]' is on cuda:0") && Catch::Matchers::Contains("'[1]' is on cuda:1"));
  CHECK_THROWS_WITH((void)dk::to_host(split),
                    Catch::Matchers::Contains("cuda:0") && Catch::Matchers::Contains("cuda:1"));
  CHECK_THROWS_WITH((void)dk::device_of(split), Catch::Matchers::Contains("'[1]' is on cuda:1"));
  // Both leaves named, the first array leaf found past a scalar.
  const std::tuple<int, dk::device_array<float>, dk::device_array<float>> after_scalar{
      7, dk::device_array<float>::view(dummy, 4, dk::device::cuda(0)),
      dk::device_array<float>::view(dummy, 4, dk::device::cuda(1))};
  CHECK_THROWS_WITH((void)dk::device_of(after_scalar),
                    Catch::Matchers::Contains("'[1]' is on cuda:0") && Catch::Matchers::Contains("'[2]' is on cuda:1"));

  const auto a = std::make_tuple(dk::device_array<float>::view(dummy, 4, dk::device::cuda(0)));
  const auto b = std::make_tuple(dk::device_array<float>::view(dummy, 4, dk::device::cuda(2)), 3);
  CHECK(dk::device_of(a) == dk::device::cuda(0));
  CHECK_THROWS_WITH((void)dk::same_device(a, b), Catch::Matchers::Contains("tree 1 is on cuda:0") &&
                                                     Catch::Matchers::Contains("tree 2 is on cuda:2"));
  CHECK(dk::same_device(a, std::make_tuple(1, 2.0)) == dk::device::cuda(0));
  // A tree passed twice is asked once; the positions in the message stay the arguments'.
  CHECK(dk::same_device(a, a) == dk::device::cuda(0));
  CHECK_THROWS_WITH((void)dk::same_device(a, a, b), Catch::Matchers::Contains("tree 1 is on cuda:0") &&
                                                        Catch::Matchers::Contains("tree 3 is on cuda:2"));

  // A stream of one device used for another (without a GPU, cuda:0 is a device the process does
  // not have, which is said first); nothing is allocated either way.
  const dk::stream cpu_stream;
  counting_resource res;
  CHECK_THROWS_WITH((void)dk::place(std::vector<float>{1.f}, dk::device::cuda(0), cpu_stream, res),
                    dk::detail::device_exists(dk::device::cuda(0))
                        ? Catch::Matchers::Contains("the stream is on cpu:0 but the target device is cuda:0")
                        : Catch::Matchers::Contains("place: cuda:0 does not exist"));
  CHECK(res.allocations == 0);
}

TEST_CASE(
    "copy writes a tree into a placed tree of the same shape, allocating "
    "nothing",
    "[place][copy_into]") {
  counting_resource res;
  const dk::stream cpu_stream;
  auto placed =
      dk::place(std::make_tuple(make_batch(3, 1), std::vector<double>{1.0, 2.0}), dk::device::cpu(), cpu_stream, res);
  REQUIRE(res.allocations == 1);
  const float* images_before = std::get<0>(placed).get<"images">().data();

  const auto next = std::make_tuple(make_batch(3, 2), std::vector<double>{7.0, 8.0});
  dk::copy(next, placed, cpu_stream);
  CHECK(res.allocations == 1);  // written in place
  CHECK(std::get<0>(placed).get<"images">().data() == images_before);
  CHECK(dk::to_host(std::get<0>(placed)).labels == std::get<0>(next).labels);
  CHECK(std::get<0>(placed).get<"images">()(2, 1, 2) == std::get<0>(next).images(2, 1, 2));
  CHECK(std::get<0>(placed).get<"lr">() == 1.0);  // the scalar too (make_batch gives 0.5 * its second argument)
  CHECK(std::get<1>(placed).data()[1] == 8.0);

  // A placed tree as the source; the stream-less form.
  auto other =
      dk::place(std::make_tuple(make_batch(3, 3), std::vector<double>{5.0, 6.0}), dk::device::cpu(), cpu_stream, res);
  dk::copy(other, placed);
  CHECK(res.allocations == 2);  // only `other`
  CHECK(std::get<0>(placed).get<"labels">().data()[0] == 300);
  CHECK(std::get<1>(placed).data()[0] == 5.0);
}

TEST_CASE("copy refuses trees that do not match the destination, naming what differs", "[place][copy_into][mismatch]") {
  const dk::stream cpu_stream;
  auto placed =
      dk::place(std::make_tuple(make_batch(3), std::vector<std::vector<int>>{{1, 2}, {3}}), dk::device::cpu());
  const auto before = dk::to_host(placed);

  // Another structure: a vector node of another length.
  const auto longer = std::make_tuple(make_batch(3), std::vector<std::vector<int>>{{1, 2}, {3}, {4}});
  CHECK_THROWS_AS(dk::copy(longer, placed, cpu_stream), dk::tree_structure_error);
  CHECK_THROWS_WITH(dk::copy(longer, placed, cpu_stream), Catch::Matchers::Contains("differ in structure"));
  // Other leaf lengths, named by path; nothing is written.
  const auto resized = std::make_tuple(make_batch(4), std::vector<std::vector<int>>{{1, 2}, {3, 4}});
  CHECK_THROWS_AS(dk::copy(resized, placed, cpu_stream), dk::config_error);
  CHECK_THROWS_WITH(dk::copy(resized, placed, cpu_stream),
                    Catch::Matchers::Contains("leaf '[0].images' is 4 x 2 x 3 in the source but 3 x 2 x 3") ||
                        Catch::Matchers::Contains("leaf '[0].images' has 24 element(s) in the source but 18"));
  CHECK_THROWS_WITH(dk::copy(resized, placed, cpu_stream),
                    Catch::Matchers::Contains("leaf '[0].labels' has 4 element(s) in the source but 3") &&
                        Catch::Matchers::Contains("leaf '[1][1]' has 2 element(s) in the source but 1"));
  CHECK(dk::to_host(std::get<1>(placed)) == std::get<1>(before));
  CHECK(std::get<0>(placed).get<"lr">() == std::get<0>(before).lr);

  // A destination on a GPU with a stream of another device (views of fake
  // device memory: the check comes before any copy, so it runs without a GPU).
  float dummy[4] = {};
  auto on_gpu = std::make_tuple(dk::device_array<float>::view(dummy, 4, dk::device::cuda(1)));
  try {
    dk::copy(std::make_tuple(std::vector<float>(4, 1.f)), on_gpu, cpu_stream);
    FAIL("copy accepted a stream of cpu:0 for a tree on cuda:1");
  } catch (const dk::device_mismatch& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("the stream is on cpu:0 but the target device is cuda:1"));
    CHECK(e.expected() == dk::device::cuda(1));
    CHECK(e.actual() == dk::device::cpu());
  }
  CHECK(dummy[0] == 0.f);
  // A destination whose leaves are on two devices.
  auto split = std::make_tuple(dk::device_array<float>::view(dummy, 2, dk::device::cuda(0)),
                               dk::device_array<float>::view(dummy + 2, 2, dk::device::cuda(1)));
  CHECK_THROWS_AS(dk::copy(std::make_tuple(std::vector<float>(2), std::vector<float>(2)), split, cpu_stream),
                  dk::device_mismatch);
}

TEST_CASE("placement opens NVTX ranges for place, shard, replicate and prefetch", "[place][nvtx]") {
  {
    std::lock_guard lock(range_mutex);
    range_log().clear();
  }
  dk::detail::range_observer = &record_range;
  const auto b = make_batch(4);
  const std::vector<dk::device> two(2, dk::device::cpu());
  (void)dk::place(b, dk::device::cpu());
  (void)dk::shard(b, two);
  (void)dk::replicate(b, two);
  {
    std::vector<batch> src{b};
    for (auto& x : dk::prefetch(src, dk::device::cpu())) (void)x;
  }
  dk::detail::range_observer = nullptr;
  std::lock_guard lock(range_mutex);
  const std::set<std::string> seen(range_log().begin(), range_log().end());
  CHECK(seen.count("devicekit.place") == 1);
  CHECK(seen.count("devicekit.shard") == 1);
  CHECK(seen.count("devicekit.replicate") == 1);
  CHECK(seen.count("devicekit.prefetch") == 1);
}

TEST_CASE("the default host pool reuses freed blocks", "[place][resource]") {
  // The process's host pool (memory/registry.hpp) is a devicekit memory_pool:
  // exactly sized blocks (no power-of-two size classes above its small-size
  // slabs), reused after a free.
  dk::device_memory& pool = dk::default_placement_resource(dk::device::cpu());
  CHECK(&pool == &dk::default_memory(dk::device::cpu()));
  CHECK(&pool == &dk::default_memory(dk::device::cpu(), dk::memory_kind::host));
  CHECK(pool.get_device() == dk::device::cpu());
  const auto before = pool.stats();
  void* p = pool.allocate(50000, 256);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
  CHECK(pool.stats().in_use_bytes - before.in_use_bytes == (50000 + 255) / 256 * 256);  // exact, not 64 KiB
  pool.deallocate(p, 50000, 256);
  CHECK(pool.stats().allocated_bytes == before.allocated_bytes);
  void* q = pool.allocate(50000, 256);  // the freed block again
  CHECK(q == p);
  pool.deallocate(q, 50000, 256);
  // Host blocks of a page or more that placement takes are page-aligned, so a
  // leaf lands at its source's page offset (page_offset_padding).
  const std::vector<float> big(4096, 1.f);
  const auto placed = dk::place(big, dk::device::cpu());
  const auto page_offset = [](const void* a) { return reinterpret_cast<std::uintptr_t>(a) % 4096; };
  CHECK(page_offset(placed.data()) == page_offset(big.data()) / 256 * 256);
}

TEST_CASE("copy runs merge leaves that lie in one allocation in the same order", "[place][copy]") {
  std::vector<std::byte> src(4096);
  std::vector<std::byte> dst(4096);
  int owner = 0;
  const std::vector<dk::detail::copy_item> items{
      {src.data(), dk::device::cuda(0), &owner, dst.data(), 100},
      {src.data() + 256, dk::device::cuda(0), &owner, dst.data() + 256, 100},
      {src.data() + 512, dk::device::cuda(0), &owner, dst.data() + 1024, 100},   // moved: new run
      {src.data() + 2048, dk::device::cuda(0), nullptr, dst.data() + 2048, 10},  // unknown owner: alone
  };
  const auto runs = dk::detail::coalesce(items);
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].bytes == 356);
  CHECK(runs[1].dst == dst.data() + 1024);
  CHECK(runs[2].bytes == 10);
}

// --- the manager
// ----------------------------------------------------------------------------------

TEST_CASE("the manager places, replicates, shards and prefetches on its devices", "[place][manager]") {
  dk::device_manager<dk::cpu_detector> dm{dk::settings::without_environment()};
  const batch b = make_batch(4);
  const auto placed = dm.place(b);
  CHECK(dk::device_of(placed) == dk::device::cpu());
  CHECK(dk::to_host(placed).labels == b.labels);
  CHECK(dm.replicate(b).size() == dm.devices().size());
  const auto shards = dm.shard(b);
  CHECK(shards.size() == dm.devices().size());
  CHECK(shards.valid.front() == 4 / dm.devices().size());
  std::vector<batch> src{b, make_batch(4, 2)};
  int n = 0;
  for (auto& x : dm.prefetch(src)) n += static_cast<int>(x.get<"labels">().size());
  CHECK(n == 8);
  // A device the process does not have; one it has (where it has a GPU) that this manager lacks.
  CHECK_THROWS_WITH((void)dm.place(b, dk::device::cuda(4096)), Catch::Matchers::Contains("cuda:4096 does not exist"));
  if (dk::detail::device_exists(dk::device::cuda(0))) {
    CHECK_THROWS_AS((void)dm.place(b, dk::device::cuda(0)), dk::device_mismatch);
  }
}

TEST_CASE("the manager's placement allocates from its pool, one block per tree", "[place][manager][memory]") {
  dk::device_manager<dk::cpu_detector> dm{dk::settings::without_environment()};
  auto& mem = dm.memory(dk::device::cpu());
  const auto before = mem.stats();
  {
    const auto placed = dm.place(make_batch(8));
    const auto during = mem.stats();
    CHECK(during.allocation_count == before.allocation_count + 1);
    CHECK(during.allocated_bytes >= dk::total_bytes(placed) - sizeof(double));
    CHECK(during.active_blocks == before.active_blocks + 1);
  }
  CHECK(mem.stats().active_blocks == before.active_blocks);  // back to the pool with the tree
  CHECK(mem.stats().free_count == before.free_count + 1);
  {
    const auto shards = dm.shard(make_batch(8));
    CHECK(mem.stats().active_blocks == before.active_blocks + shards.size());
  }
  CHECK(mem.stats().active_blocks == before.active_blocks);
}

// --- default_device_scope
// -------------------------------------------------------------------------

TEST_CASE(
    "default_device_scope sets where placement without a device goes, "
    "and nests",
    "[place][default_device]") {
  dk::device_manager<dk::cpu_detector> dm{dk::settings::without_environment()};
  const batch b = make_batch(2);
  REQUIRE(dm.default_device() == dk::device::cpu());
  CHECK_FALSE(dk::scoped_default_device().has_value());
  CHECK(dk::device_of(dm.place(b)) == dk::device::cpu(0));
  {
    dk::default_device_scope outer(dk::device::cpu(1));
    CHECK(outer.get() == dk::device::cpu(1));
    CHECK(dk::scoped_default_device() == dk::device::cpu(1));
    CHECK(dk::device_of(dm.place(b)) == dk::device::cpu(1));
    CHECK(dk::device_of(dk::place(b)) == dk::device::cpu(1));  // the global manager's place(tree) too
    {
      dk::default_device_scope inner(dk::device::cpu(2));
      CHECK(dk::device_of(dm.place(b)) == dk::device::cpu(2));
      CHECK(outer.get() == dk::device::cpu(1));
      std::vector<batch> src{b};
      for (auto& x : dm.prefetch(src)) CHECK(dk::device_of(x) == dk::device::cpu(2));
    }
    CHECK(dk::device_of(dm.place(b)) == dk::device::cpu(1));  // the outer scope again
    // An explicit device wins over the scope.
    CHECK(dk::device_of(dm.place(b, dk::device::cpu(3))) == dk::device::cpu(3));
  }
  CHECK_FALSE(dk::scoped_default_device().has_value());
  CHECK(dk::device_of(dm.place(b)) == dk::device::cpu(0));
}

TEST_CASE("default_device_scope restores on exceptions and is per thread", "[place][default_device]") {
  try {
    dk::default_device_scope s(dk::device::cpu(4));
    throw std::runtime_error("step failed");
  } catch (const std::runtime_error&) {}
  CHECK_FALSE(dk::scoped_default_device().has_value());

  dk::default_device_scope mine(dk::device::cpu(1));
  std::optional<dk::device> seen_by_other = dk::device::cuda(9);
  std::optional<dk::device> other_scoped;
  std::thread t([&] {
    seen_by_other = dk::scoped_default_device();
    dk::default_device_scope theirs(dk::device::cpu(5));
    other_scoped = dk::scoped_default_device();
  });
  t.join();
  CHECK_FALSE(seen_by_other.has_value());  // another thread does not see this thread's scope
  CHECK(other_scoped == dk::device::cpu(5));
  CHECK(dk::scoped_default_device() == dk::device::cpu(1));  // nor this one the other's

  // A scoped device the manager does not have: device_mismatch naming the scope (a GPU of this
  // process, where it has one); a device the process does not have: that config_error, naming the
  // scope too.
  dk::device_manager<dk::cpu_detector> dm{dk::settings::without_environment()};
  if (dk::detail::device_exists(dk::device::cuda(0))) {
    dk::default_device_scope gpu(dk::device::cuda(0));
    try {
      (void)dm.place(make_batch(1));
      FAIL("placed on a device the manager does not have");
    } catch (const dk::device_mismatch& e) {
      CHECK_THAT(e.what(), Catch::Matchers::Contains("the default_device_scope asks for cuda:0") &&
                               Catch::Matchers::Contains("not one of this manager's devices"));
      CHECK(e.actual() == dk::device::cuda(0));
    }
  }
  dk::default_device_scope missing(dk::device::cuda(4096));
  CHECK_THROWS_AS((void)dm.place(make_batch(1)), dk::config_error);
  CHECK_THROWS_WITH((void)dm.place(make_batch(1)), Catch::Matchers::Contains("place: cuda:4096 does not exist") &&
                                                       Catch::Matchers::Contains("default_device_scope asks for it"));
}
#endif  // DEVICEKIT_HAS_MDSPAN

// --- memory kinds
// -------------------------------------------------------------------------------

TEST_CASE("placing in host memory for a device keeps the device and reads back", "[place][memory_kind]") {
  const std::vector<float> v = [] {
    std::vector<float> out(3000);
    std::iota(out.begin(), out.end(), 0.f);
    return out;
  }();
  auto tree = std::make_tuple(v, std::vector<int>{1, 2, 3}, 2.5);
  const auto before = dk::default_memory(dk::device::cpu()).stats().allocated_bytes;
  {
    const auto placed = dk::place(tree, dk::device::cpu(), dk::memory_kind::host);
    CHECK(dk::device_of(placed) == dk::device::cpu());
    CHECK(dk::default_memory(dk::device::cpu()).stats().allocated_bytes > before);
    CHECK(dk::to_host(placed) == tree);
    // The device kind is place(tree, dev).
    const auto same = dk::place(tree, dk::device::cpu(), dk::memory_kind::device);
    CHECK(dk::to_host(same) == tree);
    // Copies into and out of it work as for any placed tree.
    auto target = dk::place(std::make_tuple(std::vector<float>(3000, 0.f), std::vector<int>{0, 0, 0}, 0.0),
                            dk::device::cpu(), dk::memory_kind::host);
    dk::copy(placed, target);
    CHECK(dk::to_host(target) == tree);
  }
  CHECK(dk::default_memory(dk::device::cpu()).stats().allocated_bytes == before);
}

TEST_CASE(
    "a kind the build or the machine cannot give is refused with what to "
    "do instead",
    "[place][memory_kind]") {
  const std::vector<float> v(16, 1.f);
#if !DEVICEKIT_HAS_CUDA
  CHECK_THROWS_WITH(dk::place(v, dk::device::cpu(), dk::memory_kind::pinned_host),
                    Catch::Contains("memory_kind::host"));
  CHECK_THROWS_WITH(dk::place(v, dk::device::cuda(0), dk::memory_kind::pinned_host), Catch::Contains("needs CUDA"));
#else
  int count = 0;
  const bool usable_gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  if (!usable_gpu) {
    CHECK_THROWS_AS(dk::place(v, dk::device::cpu(), dk::memory_kind::pinned_host), dk::config_error);
    CHECK_THROWS_WITH(dk::place(v, dk::device::cpu(), dk::memory_kind::pinned_host),
                      Catch::Contains("memory_kind::host"));
  }
#endif
}
