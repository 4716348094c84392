// The copy planner (transfer/detail/planner.hpp), the simulator's cudaMemcpyBatchAsync, and
// shard / replicate of trees already on GPUs, which must stay on the GPUs. The
// simulator's copy counters (cuda_sim::copies()) show which copies the runtime was asked for.
#include <catch2/catch.hpp>
#include <devicekit/cuda_sim/control.hpp>
#include <devicekit/devicekit.hpp>
#include <devicekit/transfer/detail/copy.hpp>

#include "sim_devicekit_support.hpp"

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <numeric>
#include <tuple>
#include <vector>

namespace dk = devicekit;
namespace sim = devicekit::cuda_sim;
using dk::detail::copy_direction;
using dk::detail::copy_path;
using dk::detail::plan_copy;

namespace {

std::vector<float> iota_floats(std::size_t n, float from) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

}  // namespace

TEST_CASE("the planner's decisions by direction, count and size", "[planner]") {
  const dk::detail::copy_paths_available none{};
  dk::detail::copy_paths_available batch{};
  batch.batch_api = true;
  dk::detail::copy_paths_available both = batch;
  both.cub_batched = true;
  constexpr std::size_t kib = 1024;

  CHECK(plan_copy(copy_direction::device_to_device, 0, 0, both) == copy_path::none);
  // Many small runs on one device: CUB's kernel where the program has it, else the batch API.
  CHECK(plan_copy(copy_direction::device_to_device, 1000, 1000 * 4 * kib, both) == copy_path::cub_batched);
  CHECK(plan_copy(copy_direction::device_to_device, 1000, 1000 * 4 * kib, batch) == copy_path::batch_api);
  CHECK(plan_copy(copy_direction::device_to_device, 1000, 1000 * 4 * kib, none) == copy_path::single);
  // The kernel from 8 runs averaging up to 1 MiB, where it beat both other paths on an H200.
  constexpr std::size_t mib = std::size_t{1} << 20;
  CHECK(plan_copy(copy_direction::device_to_device, 8, 8 * 256, both) == copy_path::cub_batched);
  CHECK(plan_copy(copy_direction::device_to_device, 7, 7 * 256, both) == copy_path::batch_api);
  CHECK(plan_copy(copy_direction::device_to_device, 100, 100 * mib, both) == copy_path::cub_batched);
  CHECK(plan_copy(copy_direction::device_to_device, 100, 100 * mib + 100, both) == copy_path::batch_api);
  // Few runs, or large ones: no kernel; the batch API from batch_api_min_count runs on.
  CHECK(plan_copy(copy_direction::device_to_device, dk::detail::batch_api_min_count - 1, 64 * kib, both) ==
        copy_path::single);
  CHECK(plan_copy(copy_direction::device_to_device, dk::detail::batch_api_min_count, 64 * kib, batch) ==
        copy_path::batch_api);
  CHECK(plan_copy(copy_direction::device_to_device, 4, 4 * 16 * mib, both) == copy_path::batch_api);
  // Between devices: peer copies (batched when several), staged without peer access.
  CHECK(plan_copy(copy_direction::peer, 100, 100 * kib, both) == copy_path::batch_api);
  CHECK(plan_copy(copy_direction::peer, 2, 100 * kib, both) == copy_path::single);
  auto no_peer = both;
  no_peer.peer_access = false;
  CHECK(plan_copy(copy_direction::peer, 100, 100 * kib, no_peer) == copy_path::staged);
  // Host ends: pageable memory, or small pinned runs, are packed into one staged transfer.
  CHECK(plan_copy(copy_direction::host_to_device, 1, 4 * kib, both) == copy_path::staged);
  auto pinned = both;
  pinned.host_pinned = true;
  CHECK(plan_copy(copy_direction::host_to_device, 100, 100 * kib, pinned) == copy_path::staged);
  CHECK(plan_copy(copy_direction::device_to_host, 8, 8 * (std::size_t{2} << 20), pinned) == copy_path::batch_api);
  CHECK(plan_copy(copy_direction::device_to_host, 2, 2 * (std::size_t{2} << 20), pinned) == copy_path::single);
  CHECK(std::string(dk::detail::to_string(copy_path::batch_api)) == "batch_api");
}

TEST_CASE("cudaMemcpyBatchAsync in the simulator: the documented rules", "[sim][batch]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(cudaMalloc(&a, 1024) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, 1024) == cudaSuccess);
  std::vector<unsigned char> host(1024);
  std::iota(host.begin(), host.end(), static_cast<unsigned char>(0));
  REQUIRE(cudaMemcpy(a, host.data(), 1024, cudaMemcpyHostToDevice) == cudaSuccess);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  auto* ab = static_cast<unsigned char*>(a);
  auto* bb = static_cast<unsigned char*>(b);
  void* dsts[2] = {bb, bb + 512};
  const void* srcs[2] = {ab + 512, ab};
  std::size_t sizes[2] = {512, 512};
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t idx = 0;

  // The legacy NULL stream, a bad attribute index and an invalid access order are refused.
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, nullptr) == cudaErrorInvalidValue);
  std::size_t bad_idx = 1;
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &bad_idx, 1, s) == cudaErrorInvalidValue);
  cudaMemcpyAttributes invalid{};
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &invalid, &idx, 1, s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();

  const auto before = sim::copies();
  REQUIRE(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, s) == cudaSuccess);
  std::vector<unsigned char> back(1024);
  REQUIRE(cudaMemcpyAsync(back.data(), b, 1024, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  for (std::size_t i = 0; i < 512; ++i) {
    CHECK(back[i] == host[512 + i]);
    CHECK(back[512 + i] == host[i]);
  }
  const auto after = sim::copies();
  CHECK(after.batch_calls == before.batch_calls + 1);
  CHECK(after.batched_copies == before.batched_copies + 2);
  CHECK(after.device_to_device == before.device_to_device + 2);
  CHECK(after.device_to_host == before.device_to_host + 1);

  // A copy past its allocation is a violation and queues nothing of the batch.
  sim::expect_violations(1);
  std::size_t too_big[2] = {512, 1024};
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, too_big, 2, &attr, &idx, 1, s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(sim::copies().batch_calls == after.batch_calls);
  // Copies that depend on each other within one batch are undefined: a violation.
  sim::expect_violations(1);
  void* overlap_dsts[2] = {bb, bb + 256};
  CHECK(cudaMemcpyBatchAsync(overlap_dsts, srcs, sizes, 2, &attr, &idx, 1, s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaFree(a) == cudaSuccess);
  REQUIRE(cudaFree(b) == cudaSuccess);
}

TEST_CASE("many small device-to-device runs go in one cudaMemcpyBatchAsync from a g++ TU", "[sim][planner]") {
  // This file is compiled by g++: no CUB kernel can be registered, so the batch API is the way.
  REQUIRE(dk::detail::batched_copy_hook.load() == nullptr);
  const dk::device gpu = dk::device::cuda(0);
  constexpr std::size_t count = 64;
  constexpr std::size_t each = 4096;
  const auto src = dk::place(iota_floats(count * each / sizeof(float), 1.0f), gpu);
  auto dst = dk::place(std::vector<float>(count * each / sizeof(float), 0.0f), gpu);
  const auto* s = reinterpret_cast<const std::byte*>(src.data());
  auto* d = reinterpret_cast<std::byte*>(dst.data());
  std::vector<dk::detail::copy_run> runs;
  for (std::size_t i = 0; i < count; ++i) {  // reversed order: no two runs merge
    runs.push_back({s + i * each, gpu, d + (count - 1 - i) * each, each});
  }
  const auto before = sim::copies();
  const auto calls_before = dk::detail::stats().batch_api_calls.load();
  const auto& st = dk::detail::placement_stream(gpu);
  dk::detail::copy_runs(runs, gpu, st.native_handle());
  st.synchronize();
  const auto after = sim::copies();
  CHECK(after.batch_calls == before.batch_calls + 1);
  CHECK(after.batched_copies == before.batched_copies + count);
  CHECK(after.device_to_host == before.device_to_host);
  CHECK(dk::detail::stats().batch_api_calls.load() == calls_before + 1);
  const auto out = dk::to_host(dst);
  const auto in = dk::to_host(src);
  const std::size_t per = each / sizeof(float);
  for (std::size_t i = 0; i < count; ++i) {
    CHECK(std::equal(in.begin() + static_cast<std::ptrdiff_t>(i * per),
                     in.begin() + static_cast<std::ptrdiff_t>((i + 1) * per),
                     out.begin() + static_cast<std::ptrdiff_t>((count - 1 - i) * per)));
  }
}

TEST_CASE("copy_runs from the host: packed once, scattered by one batch", "[sim][planner]") {
  const dk::device gpu = dk::device::cuda(0);
  auto dst = dk::place(std::vector<int>(100, 0), gpu);
  std::vector<int> a(10, 7);
  std::vector<int> b(20, 9);
  std::vector<dk::detail::copy_run> runs{{reinterpret_cast<const std::byte*>(a.data()), dk::device::cpu(),
                                          reinterpret_cast<std::byte*>(dst.data() + 50), a.size() * sizeof(int)},
                                         {reinterpret_cast<const std::byte*>(b.data()), dk::device::cpu(),
                                          reinterpret_cast<std::byte*>(dst.data() + 5), b.size() * sizeof(int)}};
  const auto before = sim::copies();
  const auto& st = dk::detail::placement_stream(gpu);
  dk::detail::copy_runs(runs, gpu, st.native_handle());
  st.synchronize();
  const auto out = dk::to_host(dst);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int want = (i >= 50 && i < 60) ? 7 : (i >= 5 && i < 25) ? 9 : 0;
    CHECK(out[i] == want);
  }
  CHECK(sim::copies().host_to_device == before.host_to_device + 2);  // two pieces from one staging buffer
}

TEST_CASE("shard of a tree on a GPU stays on the GPUs", "[sim][multi][shard]") {
  const auto gpus = all_gpus();
  REQUIRE(gpus.size() >= 2);
  const std::size_t rows = 8 * gpus.size();
  const auto host = std::make_tuple(iota_floats(rows, 0.5f), iota_floats(rows, 1000.0f), 42);
  const auto on_gpu = dk::place(host, gpus[0]);
  const auto before = sim::copies();
  const auto sharded = dk::shard(on_gpu, gpus);
  const auto after = sim::copies();
  const auto expected = dk::shard(host, gpus);
  REQUIRE(sharded.trees.size() == gpus.size());
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    CHECK(dk::device_of(sharded.trees[i]) == gpus[i]);
    CHECK(dk::to_host(sharded.trees[i]) == dk::to_host(expected.trees[i]));
    CHECK(sharded.valid[i] == expected.valid[i]);
  }
  if (all_peers()) {
    CHECK(after.device_to_host == before.device_to_host);  // no host detour
    CHECK(after.host_to_device == before.host_to_device);
    CHECK(after.peer > before.peer);
  } else {
    // Without peer access (DEVICEKIT_SIM_PEER=none) the shards of other devices pass through
    // pinned host memory, as any copy between such devices must; the first device's shard
    // still stays on it.
    CHECK(after.device_to_host > before.device_to_host);
  }
  CHECK(after.device_to_device > before.device_to_device);
}

TEST_CASE("shard with uneven::pad of a tree on a GPU pads on the device", "[sim][multi][shard]") {
  const auto gpus = all_gpus();
  REQUIRE(gpus.size() >= 2);
  const std::size_t rows = 3 * gpus.size() + 1;  // uneven over any device count
  const auto host = std::make_tuple(iota_floats(rows, 1.0f));
  // A shaped layout_left leaf: split along dimension 0, its shard is one run per column.
  dk::shaped_array<int, dk::md::dextents<std::size_t, 2>, dk::md::layout_left> cols(
      dk::md::layout_left::mapping<dk::md::dextents<std::size_t, 2>>(dk::md::dextents<std::size_t, 2>(rows, 3)));
  for (std::size_t i = 0; i < rows * 3; ++i) cols.data()[i] = static_cast<int>(i) + 1;
  const auto host_tree = std::make_tuple(std::get<0>(host), cols);
  const auto on_gpu = dk::place(host_tree, gpus[0]);
  const auto memsets_before = dk::detail::stats().device_memsets.load();
  const auto before = sim::copies();
  const auto sharded = dk::shard(on_gpu, gpus, 0, dk::uneven::pad);
  const auto after = sim::copies();
  const auto expected = dk::shard(host_tree, gpus, 0, dk::uneven::pad);
  CHECK(sharded.pad == expected.pad);
  CHECK(sharded.pad > 0);
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const auto got = dk::to_host(sharded.trees[i]);
    const auto want = dk::to_host(expected.trees[i]);
    CHECK(std::get<0>(got) == std::get<0>(want));
    const auto& g = std::get<1>(got);
    const auto& w = std::get<1>(want);
    REQUIRE(g.mapping() == w.mapping());
    CHECK(std::equal(g.data(), g.data() + g.mapping().required_span_size(), w.data()));
    CHECK(sharded.valid[i] == expected.valid[i]);
  }
  CHECK(dk::detail::stats().device_memsets.load() > memsets_before);
  if (all_peers()) CHECK(after.device_to_host == before.device_to_host);
}

TEST_CASE("replicate of a tree on a GPU stays on the GPUs", "[sim][multi][replicate]") {
  const auto gpus = all_gpus();
  REQUIRE(gpus.size() >= 2);
  const auto host = std::make_tuple(iota_floats(1000, 2.0f), std::vector<int>(77, 5));
  const auto on_gpu = dk::place(host, gpus[1]);
  const auto before = sim::copies();
  const auto copies = dk::replicate(on_gpu, gpus);
  const auto after = sim::copies();
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    CHECK(dk::device_of(copies.trees[i]) == gpus[i]);
    CHECK(dk::to_host(copies.trees[i]) == host);
  }
  if (all_peers()) {
    CHECK(after.device_to_host == before.device_to_host);
    CHECK(after.host_to_device == before.host_to_device);
  }
}

TEST_CASE("shard of a tree whose leaves are on two GPUs is refused and loses nothing", "[sim][multi][shard]") {
  const auto gpus = all_gpus();
  REQUIRE(gpus.size() >= 2);
  const auto a = dk::place(iota_floats(16, 1.0f), gpus[0]);
  const auto b = dk::place(iota_floats(16, 100.0f), gpus[1]);
  const auto mixed = std::make_tuple(a, b);
  std::vector<std::size_t> in_use;
  for (const auto g : gpus) in_use.push_back(sim::device_bytes_in_use(g.ordinal()));
  try {
    (void)dk::shard(mixed, gpus);
    FAIL("shard accepted leaves on two devices");
  } catch (const dk::device_mismatch& e) {
    CHECK(std::string(e.what()).find("different devices") != std::string::npos);
    CHECK(e.expected() == gpus[0]);
    CHECK(e.actual() == gpus[1]);
  }
  for (std::size_t i = 0; i < gpus.size(); ++i) CHECK(sim::device_bytes_in_use(gpus[i].ordinal()) == in_use[i]);
  CHECK(dk::to_host(a) == iota_floats(16, 1.0f));
  CHECK(dk::to_host(b) == iota_floats(16, 100.0f));
}
