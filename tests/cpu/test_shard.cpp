// place/shard.hpp on the CPU: shard along every axis and layout, each
// uneven-batch policy (error, pad, ragged), rows per device given, the
// mismatched-batch message, meshes with partition specs, and replicate.
#include <catch2/catch.hpp>

#include <devicekit/place/shard.hpp>
#include <devicekit/tree/hana.hpp>

#include "place_test_support.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace dk = devicekit;

// The batches are shaped arrays, which need an mdspan (test_place.cpp says how
// its absence is reported).
#if DEVICEKIT_HAS_MDSPAN
using namespace place_test;

// --- shard
// ------------------------------------------------------------------------------------

TEST_CASE("shard splits every leaf along the batch axis; scalars go to every shard", "[shard]") {
  const batch b = make_batch(4);
  const std::vector<dk::device> devs(2, dk::device::cpu());
  const auto s = dk::shard(b, devs);
  REQUIRE(s.size() == 2);
  CHECK(s.batch_axis == 0u);
  CHECK(s.batch_size == 4);
  CHECK(s.pad == 0);
  CHECK(s.valid == std::vector<std::size_t>{2, 2});
  const auto& second = s[1];
  CHECK(second.get<"images">().extent(0) == 2);
  CHECK(second.get<"images">()(0, 0, 0) == b.images(2, 0, 0));
  CHECK(second.get<"images">()(1, 1, 2) == b.images(3, 1, 2));
  CHECK(second.get<"labels">().size() == 2);
  CHECK(second.get<"labels">().data()[0] == b.labels[2]);
  CHECK(second.get<"lr">() == b.lr);
  // Each shard is its own placed copy.
  CHECK(second.get<"labels">().data() != b.labels.data() + 2);
  CHECK(s[0].get<"labels">().owner() != s[1].get<"labels">().owner());
}

TEST_CASE("shard along other axes and layouts gathers the right elements", "[shard]") {
  using e2 = dk::md::dextents<std::size_t, 2>;
  dk::shaped_array<int, e2> right(e2(3, 4));
  dk::shaped_array<int, e2, dk::md::layout_left> left(e2(3, 4));
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 4; ++j) {
      right(i, j) = static_cast<int>(10 * i + j);
      left(i, j) = static_cast<int>(10 * i + j);
    }
  }
  const auto t = std::make_tuple(right, left);
  const auto s = dk::shard(t, std::vector<dk::device>(2, dk::device::cpu()), 1);
  REQUIRE(s.size() == 2);
  const auto& r1 = std::get<0>(s[1]);
  const auto& l1 = std::get<1>(s[1]);
  CHECK(r1.extent(0) == 3);
  CHECK(r1.extent(1) == 2);
  CHECK(l1.extent(1) == 2);
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 2; ++j) {
      CHECK(r1(i, j) == static_cast<int>(10 * i + j + 2));
      CHECK(l1(i, j) == static_cast<int>(10 * i + j + 2));
    }
  }
  STATIC_REQUIRE(std::is_same_v<typename std::remove_cvref_t<decltype(l1)>::layout_type, dk::md::layout_left>);

  // A rank-1 leaf has no axis 1.
  const auto bad = std::make_tuple(right, std::vector<int>(3));
  CHECK_THROWS_WITH((void)dk::shard(bad, std::vector<dk::device>(2, dk::device::cpu()), 1),
                    Catch::Matchers::Contains("leaf '[1]' has rank 1, so it has no axis 1"));
}

TEST_CASE(
    "uneven batches: error (like JAX), pad (with the count), ragged "
    "(last shard smaller)",
    "[shard]") {
  const batch b = make_batch(5);
  const std::vector<dk::device> two(2, dk::device::cpu());

  CHECK_THROWS_AS((void)dk::shard(b, two), dk::config_error);
  CHECK_THROWS_WITH((void)dk::shard(b, two),
                    Catch::Matchers::Contains("axis 0 of size 5 cannot be split evenly over 2 devices") &&
                        Catch::Matchers::Contains("5 = 2 x 2 + 1") && Catch::Matchers::Contains("uneven::pad") &&
                        Catch::Matchers::Contains("uneven::ragged"));
  // A device list names no mesh: the message names none either. A mesh the caller gave is named.
  CHECK_THROWS_WITH((void)dk::shard(b, two),
                    Catch::Matchers::StartsWith("shard: axis 0 of size 5 cannot be split evenly over 2 devices: "));
  CHECK_THROWS_WITH((void)dk::shard(b, dk::mesh(two, "data"), dk::partition_spec{"data"}),
                    Catch::Matchers::Contains("over 2 devices (mesh axis 'data'): 5 = 2 x 2 + 1"));

  const auto padded = dk::shard(b, two, 0, dk::uneven::pad);
  CHECK(padded.pad == 1);
  CHECK(padded.valid == std::vector<std::size_t>{3, 2});
  CHECK(padded[0].get<"labels">().size() == 3);
  CHECK(padded[1].get<"labels">().size() == 3);
  CHECK(padded[1].get<"labels">().data()[0] == b.labels[3]);
  CHECK(padded[1].get<"labels">().data()[1] == b.labels[4]);
  CHECK(padded[1].get<"labels">().data()[2] == 0);  // padding is zero
  CHECK(padded[1].get<"images">().extent(0) == 3);
  CHECK(padded[1].get<"images">()(1, 1, 2) == b.images(4, 1, 2));
  CHECK(padded[1].get<"images">()(2, 1, 2) == 0.f);

  const std::vector<dk::device> three(3, dk::device::cpu());
  const auto ragged = dk::shard(b, three, 0, dk::uneven::ragged);
  CHECK(ragged.pad == 0);
  CHECK(ragged.valid == std::vector<std::size_t>{2, 2, 1});
  CHECK(ragged[2].get<"labels">().size() == 1);
  CHECK(ragged[2].get<"labels">().data()[0] == b.labels[4]);
  CHECK(ragged[2].get<"images">().extent(0) == 1);

  // More devices than rows: trailing shards are empty.
  const auto tiny = dk::shard(make_batch(1), three, 0, dk::uneven::ragged);
  CHECK(tiny.valid == std::vector<std::size_t>{1, 0, 0});
  CHECK(tiny[2].get<"labels">().empty());
  const auto tiny_pad = dk::shard(make_batch(1), three, 0, dk::uneven::pad);
  CHECK(tiny_pad.pad == 2);
  CHECK(tiny_pad[2].get<"labels">().size() == 1);
  CHECK(tiny_pad[2].get<"labels">().data()[0] == 0);

  // Even batches are the same under every policy.
  for (auto policy : {dk::uneven::error, dk::uneven::pad, dk::uneven::ragged}) {
    const auto even = dk::shard(make_batch(6), three, 0, policy);
    CHECK(even.pad == 0);
    CHECK(even.valid == std::vector<std::size_t>{2, 2, 2});
  }
}

/// The shards' rows put back together along axis 0 (the inverse of shard along
/// axis 0).
template <class Shards>
batch concatenate_shards(const Shards& shards) {
  std::size_t rows = 0;
  for (auto v : shards.valid) rows += v;
  batch out{images_t(images_t::extents_type(rows)), {}, 0.0};
  std::size_t at = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto host = dk::to_host(shards[i]);
    const auto& labels = host.template get<"labels">();
    const auto& images = host.template get<"images">();
    REQUIRE(labels.size() == shards.valid[i]);
    out.labels.insert(out.labels.end(), labels.begin(), labels.end());
    std::copy(images.data(), images.data() + images.size(), out.images.data() + at * 6);
    at += shards.valid[i];
    out.lr = host.template get<"lr">();
  }
  return out;
}

TEST_CASE(
    "ragged shards are balanced (numpy.array_split) and put back "
    "together give the batch",
    "[shard][split]") {
  const std::vector<dk::device> four(4, dk::device::cpu());
  const batch b = make_batch(9);
  const auto s = dk::shard(b, four, 0, dk::uneven::ragged);
  CHECK(s.valid == std::vector<std::size_t>{3, 2, 2, 2});
  CHECK(s.pad == 0);
  // Shard 1 holds rows 3 and 4, shard 3 rows 7 and 8.
  CHECK(s[1].get<"labels">().size() == 2);
  CHECK(s[1].get<"labels">().data()[0] == b.labels[3]);
  CHECK(s[3].get<"labels">().data()[1] == b.labels[8]);
  CHECK(s[3].get<"images">().extent(0) == 2);
  CHECK(s[3].get<"images">()(1, 1, 2) == b.images(8, 1, 2));
  const batch back = concatenate_shards(s);
  CHECK(back.labels == b.labels);
  CHECK(std::equal(back.images.data(), back.images.data() + back.images.size(), b.images.data()));

  // Fewer rows than devices: one row each until they run out.
  const auto two_rows = dk::shard(make_batch(2), four, 0, dk::uneven::ragged);
  CHECK(two_rows.valid == std::vector<std::size_t>{1, 1, 0, 0});
  CHECK(two_rows[1].get<"labels">().data()[0] == make_batch(2).labels[1]);
  CHECK(two_rows[3].get<"labels">().empty());
  // No rows at all.
  const auto none = dk::shard(make_batch(0), four, 0, dk::uneven::ragged);
  CHECK(none.valid == std::vector<std::size_t>{0, 0, 0, 0});
  CHECK(none[0].get<"images">().extent(0) == 0);
  CHECK(concatenate_shards(none).labels.empty());

  // The mesh form splits the same way.
  const auto by_mesh = dk::shard(b, dk::mesh(four), dk::partition_spec{"data"}, dk::uneven::ragged);
  CHECK(by_mesh.valid == std::vector<std::size_t>{3, 2, 2, 2});
}

TEST_CASE("shard with rows per device given: any split summing to the batch", "[shard][split]") {
  const std::vector<dk::device> three(3, dk::device::cpu());
  const batch b = make_batch(9);
  const auto s = dk::shard(b, three, 0, std::vector<std::size_t>{1, 5, 3});
  CHECK(s.valid == std::vector<std::size_t>{1, 5, 3});
  CHECK(s.policy == dk::uneven::ragged);
  CHECK(s[0].get<"labels">().size() == 1);
  CHECK(s[1].get<"labels">().data()[0] == b.labels[1]);
  CHECK(s[1].get<"images">().extent(0) == 5);
  CHECK(s[2].get<"images">()(0, 0, 0) == b.images(6, 0, 0));
  CHECK(concatenate_shards(s).labels == b.labels);
  // Empty shards are a split too.
  CHECK(dk::shard(b, three, 0, std::vector<std::size_t>{0, 9, 0}).valid == std::vector<std::size_t>{0, 9, 0});

  CHECK_THROWS_AS((void)dk::shard(b, three, 0, std::vector<std::size_t>{1, 5, 2}), dk::config_error);
  CHECK_THROWS_WITH((void)dk::shard(b, three, 0, std::vector<std::size_t>{1, 5, 2}),
                    Catch::Matchers::Contains("the row counts 1, 5, 2 sum to 8 but the batch has 9 rows"));
  CHECK_THROWS_WITH((void)dk::shard(b, three, 0, std::vector<std::size_t>{4, 5}),
                    Catch::Matchers::Contains("2 row count(s) given (4, 5) for 3 part(s)"));
  CHECK_THROWS_WITH((void)dk::shard(b, three, 0, std::vector<std::size_t>{}),
                    Catch::Matchers::Contains("no row counts given for 3 device(s)"));
}

TEST_CASE("leaves that disagree on the batch size are named with their sizes", "[shard]") {
  const auto t =
      std::make_tuple(std::vector<float>(8), std::vector<int>(7), std::vector<short>(8), std::vector<char>(7));
  const std::vector<dk::device> two(2, dk::device::cpu());
  CHECK_THROWS_AS((void)dk::shard(t, two), dk::config_error);
  CHECK_THROWS_WITH((void)dk::shard(t, two), Catch::Matchers::Contains("disagree on the batch size along axis 0") &&
                                                 Catch::Matchers::Contains("'[1]', '[3]' have 7") &&
                                                 Catch::Matchers::Contains("'[0]', '[2]' have 8"));
  batch b = make_batch(4);
  b.labels.resize(3);
  CHECK_THROWS_WITH((void)dk::shard(b, two, 0, dk::uneven::ragged),
                    Catch::Matchers::Contains("'labels' has 3") && Catch::Matchers::Contains("'images' has 4"));
}

TEST_CASE("shard of empty trees and zero-length batches", "[shard]") {
  const std::vector<dk::device> two(2, dk::device::cpu());
  const auto none = dk::shard(std::tuple<>{}, two);
  CHECK(none.size() == 2);
  CHECK(none.batch_axis == 0u);  // the split dimension, even with no leaf to split
  CHECK(none.batch_size == 0);
  const auto empty = dk::shard(std::make_tuple(std::vector<float>{}, 1), two);
  CHECK(empty.batch_size == 0);
  CHECK(std::get<0>(empty[1]).empty());
  CHECK(std::get<1>(empty[1]) == 1);
}

TEST_CASE("mesh + partition spec: 2-D meshes, named axes, unnamed axes replicated", "[shard][mesh]") {
  const batch b = make_batch(4);
  const dk::mesh m(std::vector<dk::device>(4, dk::device::cpu()), 2, 2, "data", "model");
  CHECK(m.str() == "mesh(data=2, model=2)");

  // Batch over "data"; "model" unnamed: the two devices of a row hold the same
  // rows.
  const auto by_data = dk::shard(b, m, dk::partition_spec{"data", std::nullopt});
  REQUIRE(by_data.size() == 4);
  CHECK(by_data.mesh_coords[3] == std::vector<std::size_t>{1, 1});
  CHECK(by_data.valid == std::vector<std::size_t>{2, 2, 2, 2});
  CHECK(by_data[2].get<"labels">().data()[0] == b.labels[2]);
  CHECK(by_data[3].get<"labels">().data()[0] == b.labels[2]);
  CHECK(by_data[1].get<"labels">().data()[1] == b.labels[1]);
  CHECK(by_data[1].get<"images">().extent(1) == 2);

  // Two dimensions split; the rank-1 labels are split along the batch only.
  const auto both = dk::shard(b, m, dk::partition_spec{"data", "model"});
  const auto& im = both[1].get<"images">();  // coords (0, 1)
  CHECK(im.extent(0) == 2);
  CHECK(im.extent(1) == 1);
  CHECK(im(1, 0, 2) == b.images(1, 1, 2));
  CHECK(both[1].get<"labels">().size() == 2);

  // A 1-D mesh, as JAX's jax.device_put(data, NamedSharding(mesh, P("data"))).
  const dk::mesh line(std::vector<dk::device>(2, dk::device::cpu()));
  const auto halves = dk::shard(b, line, dk::partition_spec{"data"});
  CHECK(halves[1].get<"labels">().data()[0] == b.labels[2]);

  CHECK_THROWS_WITH((void)dk::shard(b, m, dk::partition_spec{"batch"}),
                    Catch::Matchers::Contains("names mesh axis 'batch', which mesh(data=2, "
                                              "model=2) does not have"));
  CHECK_THROWS_WITH((void)dk::shard(b, m, dk::partition_spec{"data", "data"}),
                    Catch::Matchers::Contains("two dimensions over mesh axis 'data'"));
  CHECK_THROWS_AS(dk::mesh(std::vector<dk::device>(3, dk::device::cpu()), 2, 2, "a", "b"), dk::config_error);
  CHECK_THROWS_AS(dk::mesh(std::vector<dk::device>(4, dk::device::cpu()), 2, 2, "a", "a"), dk::config_error);
  // A shape whose product wraps around to the number of devices ((2^64 - 1)^2 is 1 in 64 bits).
  const std::size_t minus_one = std::numeric_limits<std::size_t>::max();
  CHECK_THROWS_WITH(dk::mesh(std::vector<dk::device>(1, dk::device::cpu()), minus_one, minus_one, "a", "b"),
                    Catch::Matchers::Contains("holds more than SIZE_MAX devices"));
  // Non-batch dimensions that do not divide: the leaf is named.
  const dk::mesh three(std::vector<dk::device>(3, dk::device::cpu()), 1, 3, "data", "model");
  CHECK_THROWS_WITH((void)dk::shard(b, three, dk::partition_spec{"data", "model"}),
                    Catch::Matchers::Contains("leaf 'images': axis 1 of size 2 cannot be split evenly over 3"));
}

TEST_CASE("replicate puts a full copy on every device", "[replicate]") {
  const batch b = make_batch(3);
  const std::vector<dk::device> devs(3, dk::device::cpu());
  const auto r = dk::replicate(b, devs);
  REQUIRE(r.size() == 3);
  for (const auto& copy : r) {
    CHECK(dk::to_host(copy).labels == b.labels);
    CHECK(copy.get<"images">()(2, 1, 2) == b.images(2, 1, 2));
  }
  CHECK(r[0].get<"labels">().data() != r[2].get<"labels">().data());
  CHECK_THROWS_AS((void)dk::replicate(b, std::vector<dk::device>{}), dk::config_error);
}

#endif  // DEVICEKIT_HAS_MDSPAN
