// How calls without a stream are ordered (README, "Calls without a stream"): like cudaMemcpy,
// after the work queued before them on the legacy default stream of each device they touch, and
// so on every blocking stream there (the per-thread default streams included); a call given a
// stream runs in that stream's order. Runs on a real GPU (label gpu) and on the simulator with 1,
// 2 and 4 devices (label sim), where queued work runs after random delays: a read that is not
// ordered after the copy that fills it sees the wrong bytes.
//
// The deterministic cases hold a stream with a host function that waits for a gate (a stand-in
// for a long kernel), queue a write behind it, and require the call to see the write: the gate
// opens only after the call has been made, so a call that does not wait for that stream reads the
// old bytes on every run.
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>
#include <devicekit/compute.hpp>

#include "../sim/sim_test_support.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <ranges>
#include <string>
#include <thread>
#include <vector>

namespace dk = devicekit;

namespace {

int gpu_count() {
  int n = 0;
  (void)cudaGetDeviceCount(&n);
  return n;
}

using sim_test::gate;

/// Pinned host memory holding `n` copies of `value`: the source of a write queued behind a gate
/// (a pageable source would make cudaMemcpyAsync wait for the held stream on a GPU).
struct pinned_floats {
  float* p = nullptr;
  std::size_t n = 0;
  pinned_floats(std::size_t count, float value) : n(count) {
    REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess);
    for (std::size_t i = 0; i < n; ++i) p[i] = value;
  }
  pinned_floats(const pinned_floats&) = delete;
  pinned_floats& operator=(const pinned_floats&) = delete;
  ~pinned_floats() { (void)cudaFreeHost(p); }
};

/// On device `ordinal`: holds `held` (a stream handle: cudaStreamLegacy, cudaStreamPerThread or
/// a stream of the caller's) with a gate, queues the copy of `value` into `dst` behind it, runs
/// `call` while the gate is still closed (it is opened 50 ms later from another thread), and
/// returns once the stream has drained. A call that does not wait for `held` reads `dst` before
/// the write on every run.
void with_write_queued_behind_a_gate(int ordinal, cudaStream_t held, float* dst, std::size_t n, float value,
                                     const std::function<void()>& call) {
  REQUIRE(cudaSetDevice(ordinal) == cudaSuccess);
  const pinned_floats src(n, value);
  gate g;
  REQUIRE(cudaLaunchHostFunc(held, gate::hold, &g) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(dst, src.p, n * sizeof(float), cudaMemcpyHostToDevice, held) == cudaSuccess);
  std::thread opener([&g] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g.open = true;
  });
  try {
    call();
  } catch (...) {
    g.open = true;
    opener.join();
    throw;
  }
  opener.join();
  REQUIRE(cudaStreamSynchronize(held) == cudaSuccess);
}

bool all_equal(const std::vector<float>& v, float value) {
  return std::all_of(v.begin(), v.end(), [value](float x) { return x == value; });
}

/// The first index where `v` differs from `value`, and what it holds there, for the message.
std::string first_difference(const std::vector<float>& v, float value) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != value) return "element " + std::to_string(i) + " is " + std::to_string(v[i]);
  }
  return "none";
}

constexpr std::size_t batch_elements = 65'536;

/// Batch `i`: 65,536 copies of `i`. `producer_delay` slows the source down (the consumer then
/// waits for each batch); the consumer's own delay slows the loop down (batches wait for it).
auto batches(int count, std::chrono::microseconds producer_delay) {
  return std::views::iota(0, count) | std::views::transform([producer_delay](int i) {
           if (producer_delay.count() > 0) std::this_thread::sleep_for(producer_delay);
           return std::vector<float>(batch_elements, static_cast<float>(i));
         });
}

template <class View>
void check_prefetched(View&& view, int count, std::chrono::microseconds consumer_delay) {
  int k = 0;
  for (auto& placed : view) {
    if (consumer_delay.count() > 0) std::this_thread::sleep_for(consumer_delay);
    const std::vector<float> back = dk::to_host(placed);
    INFO("batch " << k << ": " << first_difference(back, static_cast<float>(k)));
    CHECK(all_equal(back, static_cast<float>(k)));
    ++k;
  }
  CHECK(k == count);
}

}  // namespace

TEST_CASE("prefetched batches read back with to_host hold their own data", "[stream_order][prefetch_read_back]") {
  using std::chrono::microseconds;
  const int count = 8;
  for (const std::size_t depth : {1u, 2u, 3u}) {
    for (const auto& [producer, consumer] :
         {std::pair{microseconds(0), microseconds(300)}, std::pair{microseconds(300), microseconds(0)},
          std::pair{microseconds(0), microseconds(0)}}) {
      INFO("depth " << depth << ", producer delay " << producer.count() << " us, consumer delay " << consumer.count()
                    << " us");
      // What the README shows: the manager's default device, the default consumer (the legacy
      // default stream), and to_host without a stream.
      dk::device_manager<> dm;
      REQUIRE(dm.default_device().is_cuda());
      check_prefetched(dm.prefetch(batches(count, producer), depth), count, consumer);
      // Every device, through the free function.
      for (int d = 0; d < gpu_count(); ++d) {
        INFO("cuda:" << d);
        check_prefetched(dk::prefetch(batches(count, producer), dk::device::cuda(d), depth), count, consumer);
      }
    }
  }
}

TEST_CASE("prefetch for a stream of the caller's: to_host on that stream sees each batch",
          "[stream_order][prefetch_read_back]") {
  const dk::device gpu = dk::device::cuda(gpu_count() - 1);
  const dk::stream consumer(gpu);  // non-blocking: to_host without a stream would not wait for it
  int k = 0;
  for (auto& placed : dk::prefetch(batches(6, std::chrono::microseconds(0)), gpu, 2, consumer)) {
    const std::vector<float> back = dk::to_host(placed, consumer);
    CHECK(all_equal(back, static_cast<float>(k)));
    ++k;
  }
  CHECK(k == 6);
}

TEST_CASE("to_host without a stream sees work queued before it on the legacy default stream", "[stream_order]") {
  for (int d = 0; d < gpu_count(); ++d) {
    const dk::device dev = dk::device::cuda(d);
    auto placed = dk::place(std::vector<float>(4096, 1.f), dev);
    std::vector<float> back;
    with_write_queued_behind_a_gate(d, cudaStreamLegacy, placed.data(), placed.size(), 7.f,
                                    [&] { back = dk::to_host(placed); });
    INFO("cuda:" << d << ": " << first_difference(back, 7.f));
    CHECK(all_equal(back, 7.f));
  }
}

TEST_CASE("to_host without a stream sees work on the per-thread default stream and on blocking streams",
          "[stream_order]") {
  const dk::device dev = dk::device::cuda(0);
  auto placed = dk::place(std::vector<float>(4096, 1.f), dev);
  std::vector<float> back;
  with_write_queued_behind_a_gate(0, cudaStreamPerThread, placed.data(), placed.size(), 3.f,
                                  [&] { back = dk::to_host(placed); });
  CHECK(all_equal(back, 3.f));

  cudaStream_t blocking = nullptr;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);  // cudaStreamDefault: a blocking stream
  with_write_queued_behind_a_gate(0, blocking, placed.data(), placed.size(), 4.f, [&] { back = dk::to_host(placed); });
  CHECK(all_equal(back, 4.f));
  REQUIRE(cudaStreamDestroy(blocking) == cudaSuccess);
}

TEST_CASE("to_host on a stream runs in that stream's order; another device's stream is refused", "[stream_order]") {
  const dk::device dev = dk::device::cuda(0);
  const dk::stream mine(dev);  // non-blocking: not ordered with the default streams
  auto placed = dk::place(std::vector<float>(4096, 1.f), dev);
  std::vector<float> back;
  with_write_queued_behind_a_gate(0, mine.native_handle(), placed.data(), placed.size(), 5.f,
                                  [&] { back = dk::to_host(placed, mine); });
  CHECK(all_equal(back, 5.f));
  if (gpu_count() > 1) {
    const dk::stream other(dk::device::cuda(1));
    CHECK_THROWS_AS(dk::to_host(placed, other), dk::device_mismatch);
  }
}

TEST_CASE("place, copy, replicate and shard without a stream see work queued on the legacy default stream",
          "[stream_order]") {
  const int n = gpu_count();
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      INFO("from cuda:" << from << " to cuda:" << to);
      const dk::device src_dev = dk::device::cuda(from);
      const dk::device dst_dev = dk::device::cuda(to);
      auto source = dk::place(std::vector<float>(8192, 1.f), src_dev);

      dk::placed_t<std::vector<float>> moved;
      with_write_queued_behind_a_gate(from, cudaStreamLegacy, source.data(), source.size(), 2.f,
                                      [&] { moved = dk::place(source, dst_dev); });
      CHECK(all_equal(dk::to_host(moved), 2.f));

      auto target = dk::place(std::vector<float>(8192, 0.f), dst_dev);
      with_write_queued_behind_a_gate(from, cudaStreamLegacy, source.data(), source.size(), 6.f,
                                      [&] { dk::copy(source, target); });
      CHECK(all_equal(dk::to_host(target), 6.f));
    }
  }
  std::vector<dk::device> all;
  for (int d = 0; d < n; ++d) all.push_back(dk::device::cuda(d));
  auto source = dk::place(std::vector<float>(8192, 1.f), all.front());
  dk::per_device<dk::placed_t<std::vector<float>>> copies;
  with_write_queued_behind_a_gate(0, cudaStreamLegacy, source.data(), source.size(), 8.f,
                                  [&] { copies = dk::replicate(source, all); });
  for (std::size_t i = 0; i < copies.trees.size(); ++i) {
    INFO("replica " << i);
    CHECK(all_equal(dk::to_host(copies.trees[i]), 8.f));
  }
  with_write_queued_behind_a_gate(0, cudaStreamLegacy, source.data(), source.size(), 9.f, [&] {
    const auto shards = dk::shard(source, all, 0, dk::uneven::ragged);
    for (const auto& s : shards) CHECK(all_equal(dk::to_host(s), 9.f));
  });
}

TEST_CASE("zeros_like on a stream runs in that stream's order and does not wait for it", "[stream_order]") {
  const dk::device dev = dk::device::cuda(0);
  const dk::stream mine(dev);
  const auto shape = std::vector<float>(4096, 1.f);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  gate g;
  REQUIRE(cudaLaunchHostFunc(mine.native_handle(), gate::hold, &g) == cudaSuccess);
  const auto zeros = dk::zeros_like(shape, dev, mine);
  const bool returned_while_held = !g.open.load();
  g.open = true;
  CHECK(returned_while_held);
  CHECK(all_equal(dk::to_host(zeros, mine), 0.f));
  if (gpu_count() > 1) {
    const dk::stream other(dk::device::cuda(1));
    CHECK_THROWS_AS(dk::zeros_like(shape, dev, other), dk::device_mismatch);
  }
}
