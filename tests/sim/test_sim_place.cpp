// Placement on simulated GPUs: the placement cases every backend runs (tests/common), on the last
// simulated GPU, and what only the simulator observes: memory given back without waiting for the
// device, copies into placed trees that allocate nothing, the default device scope and the
// pinned-host memory kind.
#include <catch2/catch.hpp>

#include <devicekit/compute/zeros_like.hpp>

#include "sim_devicekit_support.hpp"

// The cases every backend runs, on the last simulated GPU (cuda:0 with one device).
#define DEVICEKIT_CASES_BACKEND "sim"
#define DEVICEKIT_CASES_DEVICE() dk::device::cuda(devicekit::cuda_sim::device_count() - 1)
#include "../common/place_cases.hpp"

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

// Dropping a placed tree gives its memory to a devicekit pool, which does not wait for the device:
// cudaFree waits for all work on the device (the simulator's does too), so it would stall behind
// any stream of the device, a prefetch's copies included.
TEST_CASE("dropping a placed tree does not wait for the device's other streams", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream busy(gpu);
  gate g;
  REQUIRE(cudaLaunchHostFunc(busy.native_handle(), gate::hold, &g) == cudaSuccess);
  {
    timed_call drop([&] {
      auto placed = dk::place(ramp(1 << 16, 1.f), gpu);
      CHECK(dk::to_host(placed) == ramp(1 << 16, 1.f));
    });  // the placed tree is dropped at the end of the call
    CHECK(drop.finished_within(std::chrono::seconds(3)));
    g.open = true;
  }
  busy.synchronize();
  // The default resource is a devicekit pool: its stats see placements.
  dk::device_memory* pool = &dk::default_placement_resource(gpu);
  REQUIRE(pool == &dk::default_memory(gpu));
  const auto before = pool->stats().allocated_bytes;
  {
    auto placed = dk::place(ramp(1024, 0.f), gpu);
    CHECK(pool->stats().allocated_bytes >= before + 1024 * sizeof(float));
  }
  CHECK(pool->stats().allocated_bytes == before);
}

// A tree dropped before the copy that fills it has run gives its memory back after that copy: a
// pool's stream-less free means "no work in flight", so without the wait the next tree would get
// the same memory and the late copy would overwrite it.
TEST_CASE("a tree dropped before its copy ran gives its memory back after the copy", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(0);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), small_pool()};
  const dk::stream held(gpu);
  gate g;
  REQUIRE(cudaLaunchHostFunc(held.native_handle(), gate::hold, &g) == cudaSuccess);
  std::thread opener([&g] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    g.open = true;
  });
  const std::vector<float> first(1 << 16, 1.f);
  const std::vector<float> second(1 << 16, 2.f);
  {
    auto early = dk::place(first, gpu, held, pool);  // its copy waits behind the gate
  }                                                  // dropped: waits for that copy (about 200 ms), then frees
  auto next = dk::place(second, gpu, pool);          // the same memory, reused
  opener.join();
  held.synchronize();
  CHECK(dk::to_host(next) == second);
}

// A placement on a caller's stream records an event after its copy, which its block waits for
// when the tree is dropped. When that record fails, place waits for the copy itself and returns
// the tree: dropping it at once would give the block back while the copy may still write it.
TEST_CASE("a placement whose copy event cannot be recorded waits for its copy and returns the tree",
          "[sim][place][faults]") {
  const dk::device gpu = dk::device::cuda(0);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0), small_pool()};
  const dk::stream s(gpu);
  const std::vector<float> first(1 << 12, 1.f);
  const std::vector<float> second(1 << 12, 2.f);
  {
    auto warm = dk::place(first, gpu, s, pool);
    s.synchronize();
  }
  // The block's record is a placement's last cudaEventRecord (after its copy and its staging).
  const std::size_t before = sim::api_calls("cudaEventRecord");
  {
    auto counted = dk::place(first, gpu, s, pool);
    s.synchronize();
  }
  const auto records = static_cast<int>(sim::api_calls("cudaEventRecord") - before);
  REQUIRE(records >= 1);

  gate g;
  REQUIRE(cudaLaunchHostFunc(s.native_handle(), gate::hold, &g) == cudaSuccess);
  struct joined_thread {  // joined however the case ends, a place that throws included
    std::thread t;
    ~joined_thread() {
      if (t.joinable()) t.join();
    }
  } opener{std::thread([&g] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    g.open = true;
  })};
  const std::size_t violations_before = sim::violations().size();
  sim::fail_call("cudaEventRecord", records, cudaErrorMemoryAllocation);
  {
    auto placed = dk::place(first, gpu, s, pool);
    CHECK(g.open.load());  // it returned only once the copy behind the gate had run
    CHECK(dk::to_host(placed) == first);
  }                                          // dropped: its block goes back at once, the copy done
  auto next = dk::place(second, gpu, pool);  // the same memory, reused
  opener.t.join();
  CHECK(dk::to_host(next) == second);
  CHECK(sim::violations().size() == violations_before);
}

// The event a tree placed on a caller's stream records after its copy (so that the tree may be
// dropped before the copy has run) comes from a list kept per device and goes back there when the
// tree goes, whichever thread drops it: in steady state no event is created or destroyed, and an
// event of one GPU is never recorded on another's stream (the runtime refuses that).
TEST_CASE("a placed tree's event is reused across placements and GPUs whichever thread drops the tree",
          "[sim][place]") {
  const int n = sim::device_count();
  std::vector<dk::stream> streams;
  for (int d = 0; d < n; ++d) streams.emplace_back(dk::device::cuda(d));
  const std::vector<float> values(256, 3.f);
  const std::size_t violations_before = sim::violations().size();
  auto round = [&] {
    std::vector<dk::placed_t<std::vector<float>>> trees;
    for (int d = 0; d < n; ++d) trees.push_back(dk::place(values, dk::device::cuda(d), streams[d]));
    std::thread([t = std::move(trees)]() mutable { t.clear(); }).join();  // before or after the copies ran
  };
  round();  // warm-up: the events, staging and blocks are made
  round();
  const std::size_t created = sim::api_calls("cudaEventCreateWithFlags");
  const std::size_t destroyed = sim::api_calls("cudaEventDestroy");
  for (int i = 0; i < 20; ++i) round();
  CHECK(sim::api_calls("cudaEventCreateWithFlags") == created);
  CHECK(sim::api_calls("cudaEventDestroy") == destroyed);
  for (int d = 0; d < n; ++d) {
    const auto placed = dk::place(values, dk::device::cuda(d), streams[d]);
    CHECK(dk::to_host(placed, streams[d]) == values);
  }
  CHECK(sim::violations().size() == violations_before);
}

// place(..., stream) above the staging chunk size takes fresh staging, up to
// detail::max_staging_in_flight, and returns at once: waiting on the host for the stream to drain
// an older buffer would hold the caller until the stream's earlier work (a kernel) ended.
TEST_CASE("placing a large tree on a busy stream returns without waiting for the stream", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream busy(gpu);
  const auto tree = big_tree(6, std::size_t{2} << 20);  // 48 MiB: six chunks
  gate g;
  REQUIRE(cudaLaunchHostFunc(busy.native_handle(), gate::hold, &g) == cudaSuccess);
  std::optional<dk::placed_t<decltype(tree)>> placed;
  {
    timed_call call([&] { placed.emplace(dk::place(tree, gpu, busy)); });
    CHECK(call.finished_within(std::chrono::seconds(3)));
    g.open = true;
  }
  busy.synchronize();
  REQUIRE(placed.has_value());
  CHECK(dk::to_host(*placed) == tree);
}

// copy(src, placed, stream): a training loop refills the buffers it placed once. The copy must
// allocate nothing on the device (pool and simulator counters unchanged), return without waiting
// for a busy stream (the pageable source is staged first), and land once the stream runs.
TEST_CASE("copy into a placed tree allocates nothing and does not wait for the stream", "[sim][place][copy_into]") {
  const std::size_t violations_before = sim::violations().size();  // other cases provoke some on purpose
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(gpu.ordinal()), small_pool()};
  const dk::stream s(gpu);
  auto placed = dk::place(std::make_tuple(ramp(4096, 0.f), ramp(100, 5.f), 1.5), gpu, s, pool);
  s.synchronize();
  const auto stats_before = pool.stats();
  const std::size_t bytes_before = sim::device_bytes_in_use(gpu.ordinal());

  const auto next = std::make_tuple(ramp(4096, 1000.f), ramp(100, -50.f), 2.5);
  gate g;
  REQUIRE(cudaLaunchHostFunc(s.native_handle(), gate::hold, &g) == cudaSuccess);
  {
    timed_call call([&] { dk::copy(next, placed, s); });
    CHECK(call.finished_within(std::chrono::seconds(3)));
    g.open = true;
  }
  s.synchronize();
  CHECK(dk::to_host(std::get<0>(placed)) == std::get<0>(next));
  CHECK(dk::to_host(std::get<1>(placed)) == std::get<1>(next));
  CHECK(std::get<2>(placed) == 2.5);
  const auto stats_after = pool.stats();
  CHECK(stats_after.allocation_count == stats_before.allocation_count);
  CHECK(stats_after.reserved_bytes == stats_before.reserved_bytes);
  CHECK(sim::device_bytes_in_use(gpu.ordinal()) == bytes_before);

  // A placed tree as the source: from the first GPU (a peer or staged copy with two or more),
  // finished on return in the stream-less form.
  const auto source = dk::place(std::make_tuple(ramp(4096, 7.f), ramp(100, 8.f), 3.5), dk::device::cuda(0));
  dk::copy(source, placed);
  CHECK(dk::to_host(std::get<0>(placed)) == ramp(4096, 7.f));
  CHECK(dk::to_host(std::get<1>(placed)) == ramp(100, 8.f));
  CHECK(pool.stats().allocation_count == stats_before.allocation_count);
  CHECK(sim::violations().size() == violations_before);
}

TEST_CASE("copy with a stream of another GPU names both devices", "[sim][multi][place][copy_into][mismatch]") {
  const dk::device last = dk::device::cuda(sim::device_count() - 1);
  auto placed = dk::place(ramp(16, 0.f), dk::device::cuda(0));
  const dk::stream other(last);
  const auto e = mismatch_of([&] { dk::copy(ramp(16, 1.f), placed, other); });
  REQUIRE(e.has_value());
  CHECK(e->expected() == dk::device::cuda(0));
  CHECK(e->actual() == last);
  CHECK(dk::to_host(placed) == ramp(16, 0.f));
}

TEST_CASE("default_device_scope sends placement without a device to the scoped GPU", "[sim][place][default_device]") {
  const dk::device last = dk::device::cuda(sim::device_count() - 1);
  dk::device_manager<dk::cuda_detector> dm{dk::settings{}};
  REQUIRE(dm.default_device() == dk::device::cuda(0));
  {
    dk::default_device_scope scope(last);
    const auto placed = dm.place(ramp(64, 3.f));
    CHECK(dk::device_of(placed) == last);
    CHECK(dk::to_host(placed) == ramp(64, 3.f));
    CHECK(dk::device_of(dk::place(ramp(8, 0.f))) == last);
    // prefetch with a consumer stream follows the scope too: its stream is one of the scoped GPU.
    const dk::stream consumer(last);
    const std::vector<std::vector<float>> batches{ramp(32, 1.f), ramp(32, 2.f)};
    int seen = 0;
    for (const auto& batch : dm.prefetch(batches, 2, dk::stream_ref(consumer))) {
      CHECK(dk::device_of(batch) == last);
      CHECK(dk::to_host(batch, consumer) == batches[static_cast<std::size_t>(seen++)]);
    }
    CHECK(seen == 2);
  }
  CHECK(dk::device_of(dm.place(ramp(8, 0.f))) == dk::device::cuda(0));
}

TEST_CASE("placing with memory_kind::pinned_host keeps the device and puts the bytes in pinned memory",
          "[sim][place][memory_kind]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const auto tree = std::make_tuple(ramp(5000, 2.f), std::vector<int>{4, 5, 6}, 1.5);
  dk::device_memory& pinned = dk::default_memory(gpu, dk::memory_kind::pinned_host);
  CHECK(&pinned != &dk::default_memory(gpu));
  CHECK(&pinned != &dk::staging_memory());
  const auto before = pinned.stats().allocated_bytes;
  {
    const auto placed = dk::place(tree, gpu, dk::memory_kind::pinned_host);
    CHECK(dk::device_of(placed) == gpu);  // the leaves belong to the device, as in JAX
    CHECK(pinned.stats().allocated_bytes > before);
    cudaPointerAttributes attr{};
    REQUIRE(cudaPointerGetAttributes(&attr, std::get<0>(placed).data()) == cudaSuccess);
    CHECK(attr.type == cudaMemoryTypeHost);
    CHECK(dk::to_host(placed) == tree);
    // Onto the device's memory and back into pinned memory from there.
    const auto on_device = dk::place(placed, gpu);
    REQUIRE(cudaPointerGetAttributes(&attr, std::get<0>(on_device).data()) == cudaSuccess);
    CHECK(attr.type == cudaMemoryTypeDevice);
    CHECK(dk::to_host(on_device) == tree);
    const auto pinned_again = dk::place(on_device, gpu, dk::memory_kind::pinned_host);
    CHECK(dk::to_host(pinned_again) == tree);
    // A manager's own pinned pool, and its figures under the kind.
    dk::device_manager<> dm;
    const auto mine = dm.place(tree, gpu, dk::memory_kind::pinned_host);
    CHECK(dm.memory_stats(gpu, dk::memory_kind::pinned_host).bytes_in_use >= 5000 * sizeof(float));
    CHECK(dm.memory_stats(dk::device::cpu()).bytes_in_use >= 2 * 5000 * sizeof(float));  // pinned memory is host memory
    CHECK(dk::to_host(mine) == tree);
  }
  CHECK(pinned.stats().allocated_bytes == before);
}

// copy(src, dst, s) into a tree in pinned host memory reads the device after the work queued on
// `s` before it: the race detector reports a copy on another stream that is not ordered after
// the zeroing, and the values would be stale.
TEST_CASE("copy into a tree in pinned host memory comes after the stream's earlier work", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream s(gpu);
  const auto source = dk::place(big_tree(12, 3000), gpu);
  auto out = dk::place(big_tree(12, 3000), gpu, dk::memory_kind::pinned_host);
  for (int round = 0; round < 3; ++round) {
    const auto zeros = dk::zeros_like(source, gpu, s);  // a memset queued on s
    dk::copy(zeros, out, s);
    CHECK(dk::to_host(out) == std::vector<std::vector<float>>(12, std::vector<float>(3000, 0.f)));
    dk::copy(source, out, s);
    CHECK(dk::to_host(out) == big_tree(12, 3000));
  }
}

// A tree from host memory reaches the device in one host-to-device copy of its packed bytes ("one
// block, one staged transfer"); above the single-stage limit, one copy per staging chunk.
TEST_CASE("a host tree is placed in one staged copy, one per chunk above the staging limit", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(0);
  const auto small = std::make_tuple(devicekit::testing::ramp(1000, 1.0f), std::vector<int>(300, 7),
                                     devicekit::testing::ramp(5, 2.0f));
  auto before = sim::copies();
  const auto placed = dk::place(small, gpu);
  auto after = sim::copies();
  CHECK(after.host_to_device == before.host_to_device + 1);
  CHECK(dk::to_host(placed) == small);

  // Three leaves of 10 MiB: 30 MiB, over the 16 MiB limit, so 8 MiB chunks: 4 copies.
  const std::size_t n = (std::size_t{10} << 20) / sizeof(float);
  const auto large = std::make_tuple(devicekit::testing::ramp(n, 1.0f), devicekit::testing::ramp(n, 2.0f),
                                     devicekit::testing::ramp(n, 3.0f));
  REQUIRE(dk::total_bytes(large) > dk::detail::single_stage_limit);
  before = sim::copies();
  const auto placed_large = dk::place(large, gpu);
  after = sim::copies();
  const std::size_t chunks =
      (dk::total_bytes(large) + dk::detail::staging_chunk_bytes - 1) / dk::detail::staging_chunk_bytes;
  CHECK(after.host_to_device == before.host_to_device + chunks);
  CHECK(chunks == 4);
  CHECK(dk::to_host(placed_large) == large);
}

// The copy engine takes a host tree's items as they come when none is empty and none is pinned
// and large enough to be copied where it lies; otherwise it sorts them first. Each shape gives
// the same copies and the same data.
TEST_CASE("host leaves reach the GPU in one staged copy, with empty leaves or a large pinned leaf among them",
          "[sim][place]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream s(gpu);
  using devicekit::testing::ramp;
  auto h2d_copies = [&](const auto& tree) {
    const auto before = sim::copies();
    const auto placed = dk::place(tree, gpu, s);
    const auto after = sim::copies();
    CHECK(dk::to_host(placed, s) == tree);
    return after.host_to_device - before.host_to_device;
  };
  // No empty leaf: the items as they come.
  CHECK(h2d_copies(std::vector<std::vector<float>>{ramp(1000, 1.f), ramp(3, 2.f), ramp(4096, 3.f)}) == 1);
  // Empty leaves first, between and last: left out of the staged span.
  CHECK(h2d_copies(std::vector<std::vector<float>>{{}, ramp(1000, 1.f), {}, ramp(4096, 3.f), {}}) == 1);
  // A pinned leaf of pinned_source_min_bytes goes on its own, straight from where it lies; the
  // small pageable leaves are staged in one copy.
  const std::size_t n = dk::detail::pinned_source_min_bytes / sizeof(float);
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(float)) == cudaSuccess);
  for (std::size_t i = 0; i < n; ++i) pinned[i] = static_cast<float>(i % 1000);
  const std::vector<float> small_a = ramp(500, 4.f);
  const std::vector<float> small_b = ramp(700, 5.f);
  const auto mixed = std::make_tuple(std::span<const float>(small_a), std::span<const float>(pinned, n),
                                     std::span<const float>(small_b));
  const auto before = sim::copies();
  const auto placed = dk::place(mixed, gpu, s);
  const auto after = sim::copies();
  CHECK(after.host_to_device - before.host_to_device == 2);
  const auto back = dk::to_host(placed, s);
  CHECK(std::get<0>(back) == small_a);
  CHECK(std::get<1>(back) == std::vector<float>(pinned, pinned + n));
  CHECK(std::get<2>(back) == small_b);
  REQUIRE(cudaFreeHost(pinned) == cudaSuccess);
}

namespace {
/// Sets how many pieces a mid-size transfer is staged in, and restores the default.
struct pipeline_pieces {
  explicit pipeline_pieces(unsigned n) : old(dk::detail::staging_pipeline_chunks().exchange(n)) {}
  ~pipeline_pieces() { dk::detail::staging_pipeline_chunks() = old; }
  unsigned old;
};

/// Leaves of the given sizes (in floats) back to back in one page-aligned buffer, each a ramp: the
/// destination block then mirrors the source's page offsets, so placement adds no padding
/// (place/detail/block.hpp) and the transfer spans exactly the leaves' bytes.
struct paged_leaves {
  explicit paged_leaves(const std::vector<std::size_t>& sizes) {
    std::size_t total = 0;
    for (std::size_t n : sizes) total += n;
    buffer.reset(static_cast<float*>(std::aligned_alloc(4096, (total * sizeof(float) + 4095) / 4096 * 4096)));
    std::size_t at = 0;
    for (std::size_t n : sizes) {
      for (std::size_t i = 0; i < n; ++i) buffer.get()[at + i] = static_cast<float>(at + i) * 0.5f;
      tree.emplace_back(buffer.get() + at, n);
      expected.emplace_back(buffer.get() + at, buffer.get() + at + n);
      at += n;
    }
  }
  struct free_buffer {
    void operator()(float* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<float, free_buffer> buffer;
  std::vector<std::span<const float>> tree;
  std::vector<std::vector<float>> expected;
};
}  // namespace

// Above pipelined_stage_min_bytes and up to the single-stage limit a transfer is staged in pieces,
// both ways, so that the copy engine moves one piece while the host packs (or unpacks) the next;
// at the minimum and below it goes in one copy. Each schedule of the simulator checks that no
// piece's staging is reused before its copy has read or written it.
TEST_CASE("a host tree of a few MiB is staged in pieces both ways, up to 4 MiB in one copy", "[sim][place]") {
  const dk::device gpu = dk::device::cuda(sim::device_count() - 1);
  const dk::stream s(gpu);
  REQUIRE(dk::detail::staging_pipeline_chunks().load() == 4);
  auto copies_of = [&](const std::vector<std::size_t>& sizes) {
    const paged_leaves leaves(sizes);
    const auto before = sim::copies();
    const auto placed = dk::place(leaves.tree, gpu, s);
    const auto mid = sim::copies();
    CHECK(dk::to_host(placed, s) == leaves.expected);
    const auto after = sim::copies();
    return std::vector<std::size_t>{mid.host_to_device - before.host_to_device,
                                    after.device_to_host - mid.device_to_host};
  };
  // Exactly 4 MiB (1,024 leaves of 4 KiB): one copy each way.
  std::vector<std::size_t> four_mib(1024, 1024);
  CHECK(copies_of(four_mib) == std::vector<std::size_t>{1, 1});
  // 8 MiB in four pieces of 2 MiB.
  const std::vector<std::size_t> eight_mib(2048, 1024);
  CHECK(copies_of(eight_mib) == std::vector<std::size_t>{4, 4});
  // One float more than 4 MiB: pieces of 1,088 KiB (a quarter, rounded up to 64 KiB), four of them.
  four_mib.push_back(1);
  CHECK(copies_of(four_mib) == std::vector<std::size_t>{4, 4});
  // 16 MiB, the single-stage limit, in pieces of 4 MiB; three leaves, none ending on a piece edge
  // (each a whole number of the pool's 256-byte granules, so that they lie back to back).
  const std::size_t all = (std::size_t{16} << 20) / sizeof(float);
  const std::size_t third = all / 3 / 64 * 64;
  CHECK(copies_of({third, third, all - 2 * third}) == std::vector<std::size_t>{4, 4});
  {
    const pipeline_pieces one(1);  // pipelining off: one buffer, one copy
    CHECK(copies_of(eight_mib) == std::vector<std::size_t>{1, 1});
  }
  {
    const pipeline_pieces many(1000);  // counted as max_staging_pipeline_chunks: pieces of 128 KiB
    CHECK(copies_of(eight_mib) == std::vector<std::size_t>{64, 64});
  }
}

namespace {
/// The message of the config_error `f` throws, or a note saying what happened instead.
template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const dk::config_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a config_error: ") + e.what();
  }
  return "no exception";
}
}  // namespace

// A device the process does not have (cuda:n with n simulated GPUs) is one config_error at every
// door that takes a device (core/detail/device_exists.hpp), where a raw cuda_error, a device_mismatch or
// the manager's own text came before; a GPU the process has but a manager does not keeps
// device_mismatch. Once the count is known the check makes no CUDA call.
TEST_CASE("a device the process does not have is one config_error at every door", "[sim][place][missing_device]") {
  const int n = sim::device_count();
  const dk::device missing = dk::device::cuda(n);
  const dk::device gpu = dk::device::cuda(n - 1);
  const std::string says =
      "cuda:" + std::to_string(n) + " does not exist: this process sees " + std::to_string(n) + " CUDA device";
  const auto check = [&](const std::string& what, const std::string& operation) {
    INFO(what);
    CHECK_THAT(what, Catch::StartsWith(operation + ": " + says));
  };
  const auto values = ramp(64, 1.f);
  const std::vector<std::vector<float>> batches(3, values);
  const dk::stream s(gpu);
  check(config_error_of([&] { (void)dk::place(values, missing); }), "place");
  check(config_error_of([&] { (void)dk::place(values, missing, s); }), "place");  // not a stream mismatch
  check(config_error_of([&] { (void)dk::place(values, missing, s, dk::default_memory(gpu)); }), "place");
  check(config_error_of([&] { (void)dk::place(values, missing, dk::memory_kind::pinned_host); }), "place");
  check(config_error_of([&] { (void)dk::replicate(values, {gpu, missing}); }), "replicate");
  check(config_error_of([&] { (void)dk::shard(values, {gpu, missing}); }), "shard");
  check(config_error_of([&] { (void)dk::prefetch(batches, missing, 2); }), "prefetch");
  check(config_error_of([&] { (void)dk::prefetch(batches, missing, 2, s); }), "prefetch");
  check(config_error_of([&] { (void)dk::zeros_like(values, missing); }), "zeros_like");
  check(config_error_of([&] { const dk::stream other(missing); }), "stream");
  check(config_error_of([&] { dk::synchronize(missing); }), "synchronize");
  check(config_error_of([&] { (void)dk::is_idle(missing); }), "is_idle");

  // A stream_ref made for such a device: the same error, not a mismatch with the tree's device.
  auto placed = dk::place(values, gpu, s);
  const dk::ready_event ev = dk::record_ready(placed, s);
  const dk::stream_ref lying(missing, s.native_handle());
  check(config_error_of([&] { (void)dk::to_host(placed, lying); }), "to_host");
  check(config_error_of([&] { dk::copy(values, placed, lying); }), "copy");
  check(config_error_of([&] { (void)dk::record_ready(placed, lying); }), "record_ready");
  check(config_error_of([&] { dk::wait_ready(lying, ev); }), "wait_ready");
  s.synchronize();
  CHECK(dk::to_host(placed) == values);

  // A manager: the same error, with its devices named.
  dk::device_manager<dk::cuda_detector> dm{dk::settings::without_environment()};
  for (const auto& what : {config_error_of([&] { (void)dm.place(values, missing); }),
                           config_error_of([&] { (void)dm.memory_stats(missing); })}) {
    CHECK_THAT(what, Catch::Contains(": " + says) &&
                         Catch::Contains("; it is not one of this manager's devices either (cuda:0"));
  }

  // The check costs no CUDA call once the process's count is known.
  const auto counts = sim::api_calls("cudaGetDeviceCount");
  auto again = dk::place(values, gpu, s);
  const dk::stream more(gpu);
  dk::synchronize(gpu);
  CHECK(sim::api_calls("cudaGetDeviceCount") == counts);
}

TEST_CASE("a GPU the process has but a manager does not is still a device_mismatch",
          "[sim][multi][place][missing_device][mismatch]") {
  auto caps = dk::cuda_detector{}.detect(dk::settings::without_environment());
  REQUIRE(caps.devices.size() >= 2);
  caps.devices.resize(1);  // the manager has cuda:0 only; the process has more
  caps.device_count = caps.gpu_count = 1;
  dk::device_manager<dk::fixed_detector> first_only{dk::settings::without_environment(), dk::fixed_detector{caps}};
  const auto values = ramp(64, 1.f);
  const auto e = mismatch_of([&] { (void)first_only.place(values, dk::device::cuda(1)); });
  REQUIRE(e.has_value());
  CHECK(e->actual() == dk::device::cuda(1));
  CHECK_THAT(e->what(), Catch::Contains("not one of this manager's devices"));
  CHECK_THROWS_WITH(first_only.memory(dk::device::cuda(1)),
                    Catch::Contains("not one of this manager's devices") && !Catch::Contains("does not exist"));
}
