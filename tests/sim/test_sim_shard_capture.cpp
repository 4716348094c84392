// replicate_into and shard_into (place/shard.hpp) on simulated GPUs: captured into a CUDA graph
// once and replayed with fresh source data before every launch, every shard on every device
// checked after each; uneven shards (pad, ragged, row counts); what a graph cannot hold refused
// with capture_error before anything is queued; and the same calls eagerly. The simulator's race
// detector checks the fork onto each device's stream and the join back (a copy not ordered after
// the source's write, or a read of a shard not ordered after its copy, is a violation), and its
// capture refuses to end with a fork that was not joined (sim/README.md). With
// DEVICEKIT_SIM_PEER=none (sim.devicekit.gpus2_no_peer) the captures over several devices are
// refused and the eager calls go through host staging.
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace {

using e2 = dk::md::dextents<std::size_t, 2>;
using cols_t = dk::shaped_array<int, e2, dk::md::layout_left>;
/// A 1-D leaf, a layout_left leaf (its shard is one run per column, its padding zeroed whole) and
/// a scalar: rows along axis 0.
using host_tree = std::tuple<std::vector<float>, cols_t, int>;

constexpr std::size_t columns = 3;

host_tree step_tree(std::size_t rows, int k) {
  std::vector<float> a(rows);
  for (std::size_t i = 0; i < rows; ++i) a[i] = static_cast<float>(k * 1000) + static_cast<float>(i);
  cols_t b(dk::md::layout_left::mapping<e2>(e2(rows, columns)));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < columns; ++c) b(r, c) = k * 100 + static_cast<int>(r * columns + c);
  }
  return {std::move(a), std::move(b), 7};
}

/// Checks every shard of `shards` (synchronised) against step k's tree of `rows` rows: shard f
/// holds rows [begin, begin + valid) of the source, zeros after them (padding).
template <class Shards>
void check_shards(const Shards& shards, std::size_t rows, int k) {
  const host_tree want = step_tree(rows, k);
  std::size_t begin = 0;
  for (std::size_t f = 0; f < shards.size(); ++f) {
    INFO("step " << k << ", shard " << f << " on " << shards.devices[f].str());
    const auto got = dk::to_host(shards.trees[f]);
    const std::size_t valid = shards.valid[f];
    const auto& a = std::get<0>(got);
    REQUIRE(a.size() >= valid);
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i] == (i < valid ? std::get<0>(want)[begin + i] : 0.f));
    }
    const auto& b = std::get<1>(got);
    REQUIRE(b.mapping().extents().extent(0) == a.size());
    for (std::size_t r = 0; r < a.size(); ++r) {
      for (std::size_t c = 0; c < columns; ++c) CHECK(b(r, c) == (r < valid ? std::get<1>(want)(begin + r, c) : 0));
    }
    CHECK(std::get<2>(got) == 7);
    begin += valid;
  }
  CHECK(begin == rows);
}

/// Writes step k's tree into `src` on `s` (pageable host data: staged at the call).
template <class Src>
void write_step(Src& src, std::size_t rows, int k, const dk::stream& s) {
  dk::copy(step_tree(rows, k), src, s);
}

/// Captures shard_into(src, shards, s) (src on `from`), launches it `launches` times with fresh source data
/// before each and checks every shard after each. Without peer access between the devices the
/// capture is refused, and the same call works eagerly.
template <class Shards>
void replay_shard(const dk::stream& s, dk::device from, std::size_t rows, Shards& shards, int launches) {
  auto src = dk::place(step_tree(rows, 0), from);
  if (!all_peers() && shards.size() > 1) {
    const std::string m = capture_refusal([&] { (void)dk::capture(s, [&] { dk::shard_into(src, shards, s); }); });
    CHECK(m.find("have no peer access") != std::string::npos);
    CHECK(m.find("shard or replicate outside the capture") != std::string::npos);
    CHECK_FALSE(dk::capture_of(s).active);
    write_step(src, rows, 3, s);
    dk::shard_into(src, shards, s);
    s.synchronize();
    check_shards(shards, rows, 3);
    return;
  }
  dk::graph g = dk::capture(s, [&] { dk::shard_into(src, shards, s); });
  for (int k = 1; k <= launches; ++k) {
    write_step(src, rows, k, s);
    g.launch(s);
    s.synchronize();
    check_shards(shards, rows, k);
  }
  CHECK(g.launches() == static_cast<std::size_t>(launches));
}

}  // namespace

TEST_CASE("shard_into captured: a GPU tree padded over every GPU replays 100 times with fresh data",
          "[sim][graph][shard]") {
  const auto gpus = all_gpus();
  const dk::stream s(gpus[0]);
  const std::size_t rows = 3 * gpus.size() + 1;  // uneven over 2 and 4 devices
  auto shards = dk::shard(dk::place(step_tree(rows, 0), gpus[0]), gpus, 0, dk::uneven::pad);
  const auto memsets_before = dk::detail::stats().device_memsets.load();
  replay_shard(s, gpus[0], rows, shards, 100);
  if (gpus.size() > 1 && all_peers()) {
    CHECK(shards.pad > 0);
    // One padded shard, two array leaves: two memset nodes, recorded at the capture; the
    // launches replay them without queuing any.
    CHECK(dk::detail::stats().device_memsets.load() == memsets_before + 2);
  }
}

TEST_CASE("shard_into captured: ragged, even and row-count splits replay with fresh data", "[sim][graph][shard]") {
  const auto gpus = all_gpus();
  const dk::stream s(gpus[0]);
  const std::size_t rows = 2 * gpus.size() + 1;
  const auto on_gpu = dk::place(step_tree(rows, 0), gpus[0]);
  SECTION("ragged") {
    auto shards = dk::shard(on_gpu, gpus, 0, dk::uneven::ragged);
    replay_shard(s, gpus[0], rows, shards, 20);
  }
  SECTION("row counts") {
    std::vector<std::size_t> counts(gpus.size(), 0);
    counts.back() = rows;  // every row on the last device, the others empty
    auto shards = dk::shard(on_gpu, gpus, 0, counts);
    replay_shard(s, gpus[0], rows, shards, 20);
  }
  SECTION("even") {
    const std::size_t even = 2 * gpus.size();
    auto shards = dk::shard(dk::place(step_tree(even, 0), gpus[0]), gpus);
    replay_shard(s, gpus[0], even, shards, 20);
  }
}

TEST_CASE("replicate_into captured: a copy from pinned memory and the replicas replay 100 times",
          "[sim][graph][replicate]") {
  const auto gpus = all_gpus();
  const dk::stream s(gpus[0]);
  const std::size_t rows = 5;
  // The host writes each step's data into pinned memory; the graph copies it to the GPU, then
  // replicates it to every device.
  auto pinned = dk::place(step_tree(rows, 0), gpus[0], dk::memory_kind::pinned_host);
  auto src = dk::place(step_tree(rows, 0), gpus[0]);
  auto copies = dk::replicate(src, gpus);
  const auto check_copies = [&](int k) {
    const host_tree want = step_tree(rows, k);
    for (std::size_t i = 0; i < copies.size(); ++i) {
      INFO("step " << k << ", copy " << i);
      CHECK(dk::device_of(copies[i]) == gpus[i]);
      const auto got = dk::to_host(copies[i]);
      CHECK(std::get<0>(got) == std::get<0>(want));
      CHECK(std::equal(std::get<1>(want).data(), std::get<1>(want).data() + rows * columns, std::get<1>(got).data()));
    }
  };
  if (!all_peers() && gpus.size() > 1) {
    const std::string m = capture_refusal([&] { (void)dk::capture(s, [&] { dk::replicate_into(src, copies, s); }); });
    CHECK(m.find("replicate_into: ") == 0);
    CHECK(m.find("have no peer access") != std::string::npos);
    write_step(src, rows, 4, s);
    dk::replicate_into(src, copies, s);
    s.synchronize();
    check_copies(4);
    return;
  }
  dk::graph g = dk::capture(s, [&] {
    dk::copy(pinned, src, s);
    dk::replicate_into(src, copies, s);
  });
  for (int k = 1; k <= 100; ++k) {
    const host_tree h = step_tree(rows, k);
    std::copy(std::get<0>(h).begin(), std::get<0>(h).end(), std::get<0>(pinned).data());
    std::copy(std::get<1>(h).data(), std::get<1>(h).data() + rows * columns, std::get<1>(pinned).data());
    g.launch(s);
    s.synchronize();
    check_copies(k);
  }
}

TEST_CASE("shard_into and replicate_into eagerly: queued on the stream and its forks, joined back",
          "[sim][shard][replicate]") {
  const auto gpus = all_gpus();
  const dk::stream s(gpus[0]);
  const std::size_t rows = 3 * gpus.size() + 2;
  auto src = dk::place(step_tree(rows, 0), gpus[0]);
  auto shards = dk::shard(src, gpus, 0, dk::uneven::pad);
  auto copies = dk::replicate(src, gpus);
  for (int k = 1; k <= 5; ++k) {
    write_step(src, rows, k, s);
    dk::shard_into(src, shards, s);
    dk::replicate_into(src, copies, s);
    s.synchronize();  // the forks were joined into s: this covers every copy
    check_shards(shards, rows, k);
    for (std::size_t i = 0; i < copies.size(); ++i)
      CHECK(std::get<0>(dk::to_host(copies[i])) == std::get<0>(step_tree(rows, k)));
  }
  SECTION("from a host tree: staged at the call") {
    dk::shard_into(step_tree(rows, 9), shards, s);
    dk::replicate_into(step_tree(rows, 9), copies, s);
    s.synchronize();
    check_shards(shards, rows, 9);
    CHECK(std::get<0>(dk::to_host(copies.trees.back())) == std::get<0>(step_tree(rows, 9)));
  }
  SECTION("with a cpu device among the shards: the host path") {
    std::vector<dk::device> mixed = gpus;
    mixed.push_back(dk::device::cpu());
    const std::size_t n = 2 * mixed.size() + 1;
    auto on_gpu = dk::place(step_tree(n, 0), gpus[0]);
    auto mixed_shards = dk::shard(on_gpu, mixed, 0, dk::uneven::ragged);
    write_step(on_gpu, n, 6, s);
    dk::shard_into(on_gpu, mixed_shards, s);
    s.synchronize();
    check_shards(mixed_shards, n, 6);
  }
}

TEST_CASE("shard_into eagerly gathers a strided layout on the host; captured it is refused", "[sim][graph][shard]") {
  const auto gpus = all_gpus();
  const dk::stream s(gpus[0]);
  const std::size_t rows = 2 * gpus.size();
  // Strides {10, 2}: the fastest dimension is not contiguous, so each shard needs a gather.
  const auto strided_tree = [&](float k) {
    dk::shaped_array<float, e2, dk::md::layout_stride> t(
        dk::md::layout_stride::mapping<e2>(e2(rows, 4), dk::md::array<std::size_t, 2>{10, 2}));
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < 4; ++c) t(r, c) = k + static_cast<float>(r * 4 + c);
    }
    return std::make_tuple(std::move(t));
  };
  auto src = dk::place(strided_tree(0.f), gpus[0]);
  auto shards = dk::shard(src, gpus);
  const std::string m = capture_refusal([&] { (void)dk::capture(s, [&] { dk::shard_into(src, shards, s); }); });
  CHECK(m.find("shard_into: a leaf's layout") != std::string::npos);
  CHECK(m.find("only the host can gather") != std::string::npos);
  CHECK(m.find("shard a contiguous (layout_right or layout_left) copy") != std::string::npos);
  CHECK_FALSE(dk::capture_of(s).active);
  dk::copy(strided_tree(50.f), src, s);
  dk::shard_into(src, shards, s);
  s.synchronize();
  for (std::size_t f = 0; f < shards.size(); ++f) {
    const auto got = std::get<0>(dk::to_host(shards.trees[f]));
    for (std::size_t r = 0; r < 2; ++r) {
      for (std::size_t c = 0; c < 4; ++c) CHECK(got(r, c) == 50.f + static_cast<float>((2 * f + r) * 4 + c));
    }
  }
}

TEST_CASE("shard_into and replicate_into refuse in a capture what a graph cannot hold, queuing nothing",
          "[sim][graph][shard][replicate]") {
  const auto gpus = all_gpus();
  const dk::stream s(gpus[0]);
  const std::size_t rows = 2 * gpus.size();
  auto src = dk::place(step_tree(rows, 0), gpus[0]);
  auto shards = dk::shard(src, gpus);
  auto copies = dk::replicate(src, gpus);

  // A source in pageable host memory would be staged once, at the capture.
  const host_tree host = step_tree(rows, 1);
  std::string m = capture_refusal([&] { (void)dk::capture(s, [&] { dk::shard_into(host, shards, s); }); });
  CHECK(m.find("shard_into: the source lies in pageable host memory") == 0);
  CHECK(m.find("being captured into a CUDA graph") != std::string::npos);
  CHECK(m.find("place the source on a GPU") != std::string::npos);
  m = capture_refusal([&] { (void)dk::capture(s, [&] { dk::replicate_into(host, copies, s); }); });
  CHECK(m.find("replicate_into: the source lies in pageable host memory") == 0);
  CHECK_FALSE(dk::capture_of(s).active);

  // A cpu device's part is written by the host at call time.
  std::vector<dk::device> mixed = gpus;
  mixed.push_back(dk::device::cpu());
  auto mixed_shards = dk::shard(src, mixed, 0, dk::uneven::pad);
  auto mixed_copies = dk::replicate(src, mixed);
  m = capture_refusal([&] { (void)dk::capture(s, [&] { dk::shard_into(src, mixed_shards, s); }); });
  CHECK(m.find("shard_into: a shard is on cpu:0") == 0);
  CHECK(m.find("leave cpu devices out") != std::string::npos);
  m = capture_refusal([&] { (void)dk::capture(s, [&] { dk::replicate_into(src, mixed_copies, s); }); });
  CHECK(m.find("replicate_into: a destination is on cpu:0") == 0);

  // Nothing was left queued or half-captured: the same stream captures and replays.
  // Without peer access a capture over several devices is refused (replay_shard checks it).
  if (!all_peers() && gpus.size() > 1) return;
  dk::graph g = dk::capture(s, [&] { dk::shard_into(src, shards, s); });
  write_step(src, rows, 2, s);
  g.launch(s);
  s.synchronize();
  check_shards(shards, rows, 2);
}

TEST_CASE("shard_into checks the shards against the source before queuing", "[sim][shard]") {
  const auto gpus = all_gpus();
  const dk::stream s(gpus[0]);
  const std::size_t rows = 2 * gpus.size();
  auto src = dk::place(step_tree(rows, 0), gpus[0]);
  auto shards = dk::shard(src, gpus);
  // Another batch size.
  const auto other = dk::place(step_tree(rows + 2 * gpus.size(), 0), gpus[0]);
  CHECK_THROWS_WITH(dk::shard_into(other, shards, s),
                    Catch::Contains("shard_into: the source's batch has") && Catch::Contains("shard a new tree"));
  // Shards of a 2-D mesh record no split: the mesh form is needed.
  if (gpus.size() == 4) {
    const dk::mesh m(gpus, 2, 2, "data", "model");
    const dk::partition_spec spec{"data", "model"};
    using grid_t = dk::shaped_array<int, e2>;
    grid_t grid(e2(4, 6));
    for (std::size_t i = 0; i < 24; ++i) grid.data()[i] = static_cast<int>(i);
    auto on_gpu = dk::place(std::make_tuple(grid), gpus[0]);
    auto grid_shards = dk::shard(on_gpu, m, spec);
    CHECK_THROWS_WITH(dk::shard_into(on_gpu, grid_shards, s), Catch::Contains("shard_into(tree, mesh, spec, shards"));
    for (std::size_t i = 0; i < 24; ++i) grid.data()[i] = static_cast<int>(100 + i);
    dk::copy(std::make_tuple(grid), on_gpu, s);
    if (all_peers()) {
      dk::graph g = dk::capture(s, [&] { dk::shard_into(on_gpu, m, spec, grid_shards, s); });
      g.launch(s);
    } else {
      dk::shard_into(on_gpu, m, spec, grid_shards, s);
    }
    s.synchronize();
    for (std::size_t f = 0; f < 4; ++f) {
      const auto got = std::get<0>(dk::to_host(grid_shards.trees[f]));
      const auto c = grid_shards.mesh_coords[f];
      for (std::size_t r = 0; r < 2; ++r) {
        for (std::size_t q = 0; q < 3; ++q) CHECK(got(r, q) == grid(c[0] * 2 + r, c[1] * 3 + q));
      }
    }
  }
}
