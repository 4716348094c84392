// place/ on a real GPU (runs only where a CUDA device is present; g++, so Hana structs too):
// round trips of random non-zero data for every leaf type, the chunked staging path, stream-
// ordered placement, device-to-device moves, replicate and shard over the devices present, and
// prefetch with a consumer stream.
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>

#include <boost/hana/define_struct.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace dk = devicekit;

namespace place_gpu {
using img_t = dk::shaped_array<float, dk::md::extents<std::size_t, dk::md::dynamic_extent, 3, 5>>;
struct batch {
  BOOST_HANA_DEFINE_STRUCT(batch, (img_t, images), (std::vector<std::int64_t>, labels), (float, scale));
};
}  // namespace place_gpu
using namespace place_gpu;

namespace {
std::mt19937_64& rng() {
  static std::mt19937_64 g(20261122);
  return g;
}
/// Random values that are never zero, so a copy that did nothing cannot pass.
template <class T>
T nonzero() {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(std::uniform_real_distribution<double>(0.5, 100.0)(rng()));
  } else {
    return static_cast<T>(std::uniform_int_distribution<int>(1, 120)(rng()));
  }
}
template <class T>
std::vector<T> random_vector(std::size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) x = nonzero<T>();
  return v;
}
template <class A>
void fill(A& a) {
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = nonzero<typename A::value_type>();
}
bool on_device(const void* p, int ordinal) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) return false;
  return attr.type == cudaMemoryTypeDevice && attr.device == ordinal;
}
int gpu_count() {
  int n = 0;
  (void)cudaGetDeviceCount(&n);
  return n;
}
}  // namespace

TEST_CASE("every leaf type round-trips through the GPU with its data", "[place][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  auto v = random_vector<float>(1000);
  auto d = random_vector<double>(77);
  std::array<std::uint8_t, 33> a{};
  for (auto& x : a) x = nonzero<std::uint8_t>();
  std::span<const double> sp(d);
  using e2 = dk::md::dextents<std::size_t, 2>;
  dk::shaped_array<int, e2> right(e2(7, 9));
  fill(right);
  dk::shaped_array<short, e2, dk::md::layout_left> left(e2(4, 6));
  fill(left);
  dk::shaped_array<float, e2, dk::md::layout_stride> strided(
      dk::md::layout_stride::mapping<e2>(e2(3, 4), dk::md::array<std::size_t, 2>{10, 2}));
  fill(strided);
  auto raw = random_vector<std::uint32_t>(12);
  dk::md::mdspan<std::uint32_t, dk::md::extents<std::size_t, 3, 4>> view(raw.data());
  batch b{img_t(img_t::extents_type(6)), random_vector<std::int64_t>(6), 3.5f};
  fill(b.images);

  const auto tree = std::make_tuple(v, a, sp, right, left, strided, view, std::int16_t{-9}, b);
  const auto placed = dk::place(tree, gpu);
  CHECK(dk::device_of(placed) == gpu);
  CHECK(on_device(std::get<0>(placed).data(), 0));
  CHECK(on_device(std::get<8>(placed).get<"labels">().data(), 0));
  const auto back = dk::to_host(placed);
  CHECK(std::get<0>(back) == v);
  CHECK(std::vector<std::uint8_t>(std::get<1>(back).begin(), std::get<1>(back).end()) ==
        std::vector<std::uint8_t>(a.begin(), a.end()));
  CHECK(std::get<2>(back) == d);
  CHECK(std::equal(right.data(), right.data() + right.size(), std::get<3>(back).data()));
  CHECK(std::equal(left.data(), left.data() + left.size(), std::get<4>(back).data()));
  CHECK(std::equal(strided.data(), strided.data() + strided.size(), std::get<5>(back).data()));
  CHECK(std::equal(raw.begin(), raw.end(), std::get<6>(back).data()));
  CHECK(std::get<7>(back) == -9);
  const batch& bb = std::get<8>(back);
  CHECK(bb.labels == b.labels);
  CHECK(bb.scale == 3.5f);
  CHECK(std::equal(b.images.data(), b.images.data() + b.images.size(), bb.images.data()));
}

TEST_CASE("a large tree goes through the double-buffered chunked staging", "[place][gpu]") {
  const auto before = dk::detail::stats().host_to_device_transfers.load();
  const auto tree = std::make_tuple(random_vector<float>(3u << 20), random_vector<std::int32_t>(5u << 20),
                                    random_vector<double>(1u << 20));  // 12 + 20 + 8 MiB
  const auto back = dk::to_host(dk::place(tree, dk::device::cuda(0)));
  CHECK(back == tree);
  CHECK(dk::detail::stats().host_to_device_transfers.load() - before >= 5);  // 40 MiB in 8 MiB chunks
}

TEST_CASE("place on a caller's stream is ordered on that stream", "[place][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream s(gpu);
  auto src = random_vector<float>(1 << 16);
  const auto placed = dk::place(std::make_tuple(src), gpu, s);
  src.assign(src.size(), 0.f);  // the source may change once place returns
  s.synchronize();
  std::vector<float> check(1 << 16);
  REQUIRE(cudaMemcpy(check.data(), std::get<0>(placed).data(), check.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  CHECK(check[0] != 0.f);
  CHECK(check == std::get<0>(dk::to_host(placed)));
}

TEST_CASE("device-to-device: same device in one copy, other devices by peer or staging", "[place][gpu]") {
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
  // Three shards whatever the number of GPUs (devices may repeat): 10 rows pad to 12.
  const std::vector<dk::device> three{gpus[0], gpus[gpus.size() > 1 ? 1 : 0], gpus[0]};
  const auto s = dk::shard(b, three, 0, dk::uneven::pad);
  CHECK(s.pad == 2);
  CHECK(s.valid == std::vector<std::size_t>{4, 4, 2});
  // Shards' images have a dynamic batch extent, so they come back as a mapped_struct.
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

// Issue 12: a tree already on a GPU is sharded and replicated from there (device-to-device and
// peer copies, padding zeroed on the device), giving what sharding its host copy gives.
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

TEST_CASE("prefetch to the GPU delivers every tree with a consumer stream waiting on events", "[prefetch][gpu]") {
  const dk::device gpu = dk::device::cuda(0);
  const dk::stream consumer(gpu);
  std::vector<std::vector<float>> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(random_vector<float>(1 << 18));
  std::size_t k = 0;
  for (auto& placed : dk::prefetch(batches, gpu, 2, consumer)) {
    std::vector<float> got(placed.size());
    REQUIRE(cudaMemcpyAsync(got.data(), placed.data(), placed.size_bytes(), cudaMemcpyDeviceToHost,
                            consumer.native_handle()) == cudaSuccess);
    consumer.synchronize();
    CHECK(got == batches[k]);
    ++k;
  }
  CHECK(k == batches.size());
}

TEST_CASE("a tree placed in pinned host memory stays on its device, and a kernel-side copy reads it",
          "[place][gpu][memory_kind]") {
  const dk::device gpu = dk::device::cuda(0);
  const auto tree = std::make_tuple(random_vector<float>(1 << 18), random_vector<std::int32_t>(1000));
  const auto pinned = dk::place(tree, gpu, dk::memory_kind::pinned_host);
  CHECK(dk::device_of(pinned) == gpu);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, std::get<0>(pinned).data()) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeHost);
  CHECK(dk::to_host(pinned) == tree);
  // The device reads it straight from pinned memory (one copy, no staging) and back.
  const auto on_device = dk::place(pinned, gpu);
  CHECK(dk::to_host(on_device) == tree);
  CHECK(dk::to_host(dk::place(on_device, gpu, dk::memory_kind::pinned_host)) == tree);
}
