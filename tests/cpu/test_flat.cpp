// tree/flat.hpp: a tree flattened once into flat_leaf records (traversal order, bytes, element
// types, devices, owners), the device check made by the same walk, unflatten, and placement
// reading each leaf of the user's tree once.
#include <catch2/catch.hpp>

#include <devicekit/place/place.hpp>
#include <devicekit/tree/flat.hpp>
#include <devicekit/tree/hana.hpp>
#include <devicekit/tree/tree.hpp>

#include <boost/hana/at_key.hpp>
#include <boost/hana/define_struct.hpp>
#include <boost/hana/string.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace dk = devicekit;

namespace flat_test {
struct batch {
  BOOST_HANA_DEFINE_STRUCT(batch, (std::vector<float>, images), (std::int32_t, step), (std::vector<double>, labels));
};

/// A contiguous leaf of the user's own that counts how often its elements' address is asked for:
/// every walk that reads a leaf's bytes asks it.
struct counted_leaf {
  std::vector<float> values;
  static inline int data_calls = 0;
};
}  // namespace flat_test

template <>
struct dk::leaf_traits<flat_test::counted_leaf> {
  static constexpr bool is_leaf = true;
  static constexpr leaf_kind kind = leaf_kind::contiguous;
  using element_type = float;
  static constexpr std::size_t rank = 1;
  static const float* data(const flat_test::counted_leaf& l) noexcept {
    ++flat_test::counted_leaf::data_calls;
    return l.values.data();
  }
  static std::size_t size(const flat_test::counted_leaf& l) noexcept { return l.values.size(); }
  static std::array<std::size_t, 1> shape(const flat_test::counted_leaf& l) noexcept { return {l.values.size()}; }
  static dk::device device(const flat_test::counted_leaf&) noexcept { return dk::device::cpu(); }
};

TEST_CASE("flatten gives every leaf as a flat record in traversal order, with bytes, types and devices",
          "[tree][flat]") {
  const flat_test::batch b{{1.f, 2.f, 3.f}, 7, {0.5, 1.5}};
  const auto t = std::make_tuple(b, 2.0, std::vector<std::uint8_t>(5, 1));
  const dk::flat_tree flat = dk::flatten(t);

  REQUIRE(flat.leaves.size() == dk::leaf_count(t));
  REQUIRE(flat.leaves.size() == 5);
  const auto& images = flat.leaves[0];
  CHECK(images.kind == dk::leaf_kind::contiguous);
  CHECK(images.is_array());
  CHECK(images.data == reinterpret_cast<const std::byte*>(std::get<0>(t).images.data()));  // into the tree
  CHECK(images.size() == 3);
  CHECK(images.bytes == 12);
  CHECK(images.type == dk::element_type::float32);
  CHECK(images.device == dk::device::cpu());
  CHECK(images.element_size == sizeof(float));
  CHECK_FALSE(images.in_host_memory);
  CHECK(images.memory() == dk::device::cpu());
  CHECK(images.owner == nullptr);  // a host container: no allocation identity

  CHECK(flat.leaves[1].kind == dk::leaf_kind::scalar);
  CHECK_FALSE(flat.leaves[1].is_array());
  CHECK(flat.leaves[1].type == dk::element_type::int32);
  CHECK(flat.leaves[1].bytes == 4);
  CHECK(flat.leaves[2].type == dk::element_type::float64);
  CHECK(flat.leaves[2].size() == 2);
  CHECK(flat.leaves[3].kind == dk::leaf_kind::scalar);
  CHECK(flat.leaves[4].type == dk::element_type::uint8);
  CHECK(flat.leaves[4].bytes == 5);

  CHECK(flat.array_leaves == 3);
  CHECK(flat.array_bytes == 12 + 16 + 5);
  CHECK_FALSE(flat.source.has_value());

  // The records agree with leaves(), which adds paths and shapes.
  const auto described = dk::leaves(t);
  for (std::size_t i = 0; i < described.size(); ++i) {
    CHECK(flat.leaves[i].bytes == described[i].bytes);
    CHECK(flat.leaves[i].kind == described[i].kind);
  }
}

TEST_CASE("flatten_into reuses its output and starts it afresh", "[tree][flat]") {
  dk::flat_tree flat;
  dk::flatten_into(std::vector<std::vector<float>>(100, std::vector<float>(4)), flat);
  REQUIRE(flat.leaves.size() == 100);
  const auto* storage = flat.leaves.data();
  dk::flatten_into(std::vector<std::vector<float>>(3, std::vector<float>(2)), flat);
  CHECK(flat.leaves.size() == 3);
  CHECK(flat.array_leaves == 3);
  CHECK(flat.array_bytes == 3 * 2 * sizeof(float));
  CHECK(flat.leaves.data() == storage);  // the capacity was kept
}

TEST_CASE("flatten finds the one device of the array leaves, and names both paths when there are two", "[tree][flat]") {
  std::vector<float> a(4), b(4);
  // Views only carry a device; flatten reads no element, so host memory labelled with a device will do.
  const auto on0 = dk::device_array<float>::view(a.data(), a.size(), dk::device::cuda(0));
  const auto on1 = dk::device_array<float>::view(b.data(), b.size(), dk::device::cuda(1));

  const auto one = std::make_tuple(on0, std::vector<float>(2), 3.f);
  const dk::flat_tree flat = dk::flatten(one);
  REQUIRE(flat.source.has_value());
  CHECK(*flat.source == dk::device::cuda(0));
  CHECK(flat.leaves[0].device == dk::device::cuda(0));
  CHECK(flat.leaves[0].memory() == dk::device::cuda(0));
  CHECK(flat.leaves[1].device == dk::device::cpu());  // host leaves may be mixed in

  const auto two = std::make_tuple(std::vector<float>(1), on0, on1);
  try {
    (void)dk::flatten(two, "my_operation");
    FAIL("no device_mismatch");
  } catch (const dk::device_mismatch& e) {
    const std::string what = e.what();
    CHECK(what.find("my_operation") != std::string::npos);
    CHECK(what.find("[1]") != std::string::npos);
    CHECK(what.find("[2]") != std::string::npos);
    CHECK(what.find("cuda:0") != std::string::npos);
    CHECK(what.find("cuda:1") != std::string::npos);
  }
}

TEST_CASE("for_each_flat_leaf hands over the records flatten keeps, and finds the device after every leaf",
          "[tree][flat]") {
  const auto t = std::make_tuple(std::vector<float>{1.f, 2.f}, 3.0, std::vector<std::int64_t>{4});
  const dk::flat_tree flat = dk::flatten(t);
  std::size_t i = 0;
  const auto device = dk::for_each_flat_leaf(t, [&](const dk::flat_leaf& leaf) {
    REQUIRE(i < flat.leaves.size());
    CHECK(leaf.data == flat.leaves[i].data);
    CHECK(leaf.bytes == flat.leaves[i].bytes);
    CHECK(leaf.type == flat.leaves[i].type);
    ++i;
  });
  CHECK(i == 3);
  CHECK_FALSE(device.has_value());

  std::vector<float> a(2), b(2);
  const auto two = std::make_tuple(dk::device_array<float>::view(a.data(), 2, dk::device::cuda(0)),
                                   dk::device_array<float>::view(b.data(), 2, dk::device::cuda(1)));
  std::size_t seen = 0;
  CHECK_THROWS_AS(dk::for_each_flat_leaf(two, [&](const dk::flat_leaf&) { ++seen; }), dk::device_mismatch);
  CHECK(seen == 2);
}

TEST_CASE("unflatten rebuilds the structure from the records, and refuses a tree of another leaf count",
          "[tree][flat]") {
  const flat_test::batch b{{1.f, 2.f}, 3, {4.0}};
  const dk::flat_tree flat = dk::flatten(b);
  const auto sizes = dk::unflatten(b, flat, [](const auto&, const dk::flat_leaf& r, std::size_t i) {
    return std::array<std::size_t, 2>{i, r.bytes};  // a range: the struct keeps its three members
  });
  CHECK(dk::same_structure(sizes, b));
  CHECK(boost::hana::at_key(sizes, BOOST_HANA_STRING("images")) == std::array<std::size_t, 2>{0, 8});
  CHECK(boost::hana::at_key(sizes, BOOST_HANA_STRING("step")) == std::array<std::size_t, 2>{1, 4});
  CHECK(boost::hana::at_key(sizes, BOOST_HANA_STRING("labels")) == std::array<std::size_t, 2>{2, 8});

  const auto more = std::make_tuple(1.f, 2.f, 3.f, 4.f);
  CHECK_THROWS_AS(dk::unflatten(more, flat, [](const auto& l, const dk::flat_leaf&, std::size_t) { return l; }),
                  dk::tree_structure_error);
  const auto fewer = std::make_tuple(1.f);
  CHECK_THROWS_AS(dk::unflatten(fewer, flat, [](const auto& l, const dk::flat_leaf&, std::size_t) { return l; }),
                  dk::tree_structure_error);
}

TEST_CASE("a placed tree's records share its block's owner and say where the bytes are", "[tree][flat][place]") {
  const std::vector<std::vector<float>> t{{1.f, 2.f}, {3.f}, {4.f, 5.f, 6.f}};
  const auto placed = dk::place(t, dk::device::cpu());
  const dk::flat_tree flat = dk::flatten(placed);
  REQUIRE(flat.leaves.size() == 3);
  CHECK(flat.leaves[0].owner != nullptr);
  for (const auto& leaf : flat.leaves) {
    CHECK(leaf.owner == flat.leaves[0].owner);  // one block
    CHECK(leaf.memory() == dk::device::cpu());
  }
  CHECK(dk::to_host(placed) == t);
}

TEST_CASE("place reads each leaf of the user's tree once, on a stream and without one", "[tree][flat][place]") {
  std::vector<flat_test::counted_leaf> t(10);
  for (std::size_t i = 0; i < t.size(); ++i) t[i].values.assign(3, static_cast<float>(i));
  const dk::stream s;
  auto& pool = dk::default_memory(dk::device::cpu());

  flat_test::counted_leaf::data_calls = 0;
  const auto placed = dk::place(t, dk::device::cpu(), s, pool);
  CHECK(flat_test::counted_leaf::data_calls == 10);

  flat_test::counted_leaf::data_calls = 0;
  const auto stream_less = dk::place(t, dk::device::cpu());
  CHECK(flat_test::counted_leaf::data_calls == 10);

  const auto back = dk::to_host(placed);
  REQUIRE(back.size() == 10);
  CHECK(back[7] == std::vector<float>(3, 7.f));
  CHECK(dk::to_host(stream_less) == back);
}
