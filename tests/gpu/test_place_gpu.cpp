// place/ on a real GPU (runs only where a CUDA device is present; g++, so Hana
// structs too): the placement cases every backend runs
// (tests/common/place_cases.hpp) on cuda:0, and what needs a GPU's runtime: the
// chunked staging path, device-to-device moves, replicate and shard over the
// devices present, and pinned host memory a kernel-side copy reads. Built
// against the simulator too (sim_place_gpu).
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>

// The cases every backend runs, on the first GPU.
#define DEVICEKIT_CASES_BACKEND "gpu"
#define DEVICEKIT_CASES_DEVICE() devicekit::device::cuda(0)
#include "../common/place_cases.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dk = devicekit;
using place_cases::batch;
using place_cases::fill;
using place_cases::img_t;
using place_cases::random_vector;

namespace {
bool on_device(const void* p, int ordinal) { return place_cases::resides_on(p, dk::device::cuda(ordinal)); }
int gpu_count() {
  int n = 0;
  (void)cudaGetDeviceCount(&n);
  return n;
}
}  // namespace

TEST_CASE("a large tree goes through the double-buffered chunked staging", "[place][gpu]") {
  const auto before = dk::detail::stats().host_to_device_transfers.load();
  const auto tree = std::make_tuple(random_vector<float>(3u << 20), random_vector<std::int32_t>(5u << 20),
                                    random_vector<double>(1u << 20));  // 12 + 20 + 8 MiB
  const auto back = dk::to_host(dk::place(tree, dk::device::cuda(0)));
  CHECK(back == tree);
  CHECK(dk::detail::stats().host_to_device_transfers.load() - before >= 5);  // 40 MiB in 8 MiB chunks
}

TEST_CASE("a tree of a few MiB is staged in pieces, the copy of one while the host packs the next", "[place][gpu]") {
  std::vector<std::vector<float>> leaves;
  for (int i = 0; i < 2048; ++i) leaves.push_back(random_vector<float>(1024));  // 8 MiB in 4 KiB leaves
  const dk::stream s(dk::device::cuda(0));
  const auto before = dk::detail::stats().host_to_device_transfers.load();
  const auto placed = dk::place(leaves, dk::device::cuda(0), s);
  CHECK(dk::detail::stats().host_to_device_transfers.load() - before ==
        dk::detail::staging_pipeline_chunks().load());  // 2 MiB pieces
  CHECK(dk::to_host(placed, s) == leaves);
}

TEST_CASE(
    "device-to-device: same device in one copy, other devices by peer or "
    "staging",
    "[place][gpu]") {
  const auto tree =
      std::make_tuple(random_vector<float>(5000), random_vector<std::int8_t>(3), random_vector<double>(100));
  const auto on0 = dk::place(tree, dk::device::cuda(0));
  const auto copies_before = dk::detail::stats().device_to_device_copies.load();
  const auto again = dk::place(on0, dk::device::cuda(0));
  CHECK(dk::detail::stats().device_to_device_copies.load() - copies_before == 1);  // one run
  CHECK(std::get<0>(again).data() != std::get<0>(on0).data());
  CHECK(dk::to_host(again) == tree);
  const auto host_copy = dk::place(on0, dk::device::cpu());
  CHECK(dk::device_of(host_copy) == dk::device::cpu());
  CHECK(dk::to_host(host_copy) == tree);
  if (gpu_count() > 1) {
    const auto on1 = dk::place(on0, dk::device::cuda(1));
    CHECK(dk::device_of(on1) == dk::device::cuda(1));
    CHECK(dk::to_host(on1) == tree);
  }
}

TEST_CASE("replicate and shard over the GPUs present", "[shard][gpu]") {
  std::vector<dk::device> gpus;
  for (int i = 0; i < gpu_count(); ++i) gpus.push_back(dk::device::cuda(i));
  batch b{img_t(img_t::extents_type(10)), random_vector<std::int64_t>(10), 1.5f};
  fill(b.images);
  const auto r = dk::replicate(b, gpus);
  REQUIRE(r.size() == gpus.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    CHECK(dk::device_of(r[i]) == gpus[i]);
    CHECK(dk::to_host(r[i]).labels == b.labels);
  }
  // Three shards whatever the number of GPUs (devices may repeat): 10 rows pad
  // to 12.
  const std::vector<dk::device> three{gpus[0], gpus[gpus.size() > 1 ? 1 : 0], gpus[0]};
  const auto s = dk::shard(b, three, 0, dk::uneven::pad);
  CHECK(s.pad == 2);
  CHECK(s.valid == std::vector<std::size_t>{4, 4, 2});
  // Shards' images have a dynamic batch extent, so they come back as a
  // mapped_struct.
  const auto last = dk::to_host(s[2]);
  CHECK(last.get<"labels">()[0] == b.labels[8]);
  CHECK(last.get<"labels">()[1] == b.labels[9]);
  CHECK(last.get<"labels">()[2] == 0);
  CHECK(last.get<"images">()(1, 2, 4) == b.images(9, 2, 4));
  CHECK(last.get<"images">()(3, 2, 4) == 0.f);
  const auto ragged = dk::shard(b, three, 0, dk::uneven::ragged);
  CHECK(ragged.valid == std::vector<std::size_t>{4, 3, 3});  // balanced, as numpy.array_split
  CHECK(dk::to_host(ragged[2]).get<"labels">().size() == 3);
  CHECK(dk::to_host(ragged[2]).get<"labels">()[0] == b.labels[7]);
}

// A tree already on a GPU is sharded and replicated from there
// (device-to-device and peer copies, padding zeroed on the device), giving what
// sharding its host copy gives.
TEST_CASE("replicate and shard of a tree already on a GPU match the host's", "[shard][gpu]") {
  std::vector<dk::device> gpus;
  for (int i = 0; i < gpu_count(); ++i) gpus.push_back(dk::device::cuda(i));
  batch b{img_t(img_t::extents_type(10)), random_vector<std::int64_t>(10), 1.5f};
  fill(b.images);
  const auto on_gpu = dk::place(b, gpus.back());
  const auto r = dk::replicate(on_gpu, gpus);
  REQUIRE(r.size() == gpus.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    CHECK(dk::device_of(r[i]) == gpus[i]);
    const auto back = dk::to_host(r[i]);
    CHECK(back.labels == b.labels);
    CHECK(std::equal(back.images.data(), back.images.data() + back.images.size(), b.images.data()));
  }
  const std::vector<dk::device> three{gpus[0], gpus[gpus.size() > 1 ? 1 : 0], gpus[0]};
  for (const auto policy : {dk::uneven::pad, dk::uneven::ragged}) {
    const auto from_gpu = dk::shard(on_gpu, three, 0, policy);
    const auto from_host = dk::shard(b, three, 0, policy);
    CHECK(from_gpu.valid == from_host.valid);
    CHECK(from_gpu.pad == from_host.pad);
    for (std::size_t i = 0; i < three.size(); ++i) {
      CHECK(dk::device_of(from_gpu[i]) == three[i]);
      CHECK(on_device(from_gpu[i].get<"labels">().data(), three[i].ordinal()));
      const auto got = dk::to_host(from_gpu[i]);
      const auto want = dk::to_host(from_host[i]);
      CHECK(got.get<"labels">() == want.get<"labels">());
      const auto& gi = got.get<"images">();
      const auto& wi = want.get<"images">();
      REQUIRE(gi.size() == wi.size());
      CHECK(std::equal(gi.data(), gi.data() + gi.size(), wi.data()));
      CHECK(got.get<"scale">() == 1.5f);
    }
  }
}

TEST_CASE(
    "a tree placed in pinned host memory stays on its device, and a "
    "kernel-side copy reads it",
    "[place][gpu][memory_kind]") {
  const dk::device gpu = dk::device::cuda(0);
  const auto tree = std::make_tuple(random_vector<float>(1 << 18), random_vector<std::int32_t>(1000));
  const auto pinned = dk::place(tree, gpu, dk::memory_kind::pinned_host);
  CHECK(dk::device_of(pinned) == gpu);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, std::get<0>(pinned).data()) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeHost);
  CHECK(dk::to_host(pinned) == tree);
  // The device reads it straight from pinned memory (one copy, no staging) and
  // back.
  const auto on_device = dk::place(pinned, gpu);
  CHECK(dk::to_host(on_device) == tree);
  CHECK(dk::to_host(dk::place(on_device, gpu, dk::memory_kind::pinned_host)) == tree);
}
