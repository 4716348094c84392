// tree/: leaves and nodes of every kind, nesting, paths, bytes, structure, tree_map over several
// trees, Hana structs (defined and adapted), shaped leaves, empty trees and zero-length leaves.
#include <catch2/catch.hpp>

#include <devicekit/tree/hana.hpp>
#include <devicekit/tree/tree.hpp>

#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/at_key.hpp>
#include <boost/hana/define_struct.hpp>
#include <boost/hana/keys.hpp>
#include <boost/hana/string.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace dk = devicekit;

namespace tree_test {
struct meta {
  BOOST_HANA_DEFINE_STRUCT(meta, (std::vector<double>, weights), (float, scale));
};
struct batch {
  BOOST_HANA_DEFINE_STRUCT(batch, (std::vector<float>, images), (std::vector<int>, labels), (meta, info));
};
// Adapted from outside, as one would do for a struct one cannot edit.
struct legacy {
  std::array<std::int16_t, 3> a;
  std::pair<int, std::vector<std::uint8_t>> b;
};
struct not_default_constructible {
  explicit not_default_constructible(int v) : x{static_cast<float>(v)} {}
  BOOST_HANA_DEFINE_STRUCT(not_default_constructible, (std::vector<float>, x));
};
}  // namespace tree_test
BOOST_HANA_ADAPT_STRUCT(tree_test::legacy, a, b);

using namespace tree_test;

namespace {
std::vector<std::string> paths_of(const auto& t, std::string_view root = {}) {
  std::vector<std::string> out;
  for (const auto& l : dk::leaves(t, root)) out.push_back(l.path);
  return out;
}
}  // namespace

TEST_CASE("leaf classification: scalars, contiguous ranges, shaped arrays; nodes of subtrees", "[tree]") {
  STATIC_REQUIRE(dk::is_leaf_v<float>);
  STATIC_REQUIRE(dk::is_leaf_v<const int&>);
  STATIC_REQUIRE(dk::is_leaf_v<std::vector<float>>);
  STATIC_REQUIRE(dk::is_leaf_v<std::span<const double>>);
  STATIC_REQUIRE(dk::is_leaf_v<std::array<std::int8_t, 4>>);
  STATIC_REQUIRE(dk::is_leaf_v<dk::device_array<float>>);
  STATIC_REQUIRE(dk::leaf_traits<std::vector<float>>::kind == dk::leaf_kind::contiguous);
  STATIC_REQUIRE(dk::leaf_traits<double>::kind == dk::leaf_kind::scalar);
  STATIC_REQUIRE(!dk::is_leaf_v<std::vector<std::vector<float>>>);
  STATIC_REQUIRE(dk::is_node_v<std::vector<std::vector<float>>>);
  STATIC_REQUIRE(dk::is_node_v<std::array<std::vector<float>, 2>>);
  STATIC_REQUIRE(dk::is_node_v<std::tuple<int, float>>);
  STATIC_REQUIRE(dk::is_node_v<std::pair<int, float>>);
  STATIC_REQUIRE(dk::is_node_v<batch>);
  STATIC_REQUIRE(dk::is_node_v<legacy>);
  STATIC_REQUIRE(dk::is_tree_v<std::tuple<batch, std::vector<legacy>, std::pair<int, std::array<batch, 2>>>>);
  STATIC_REQUIRE(dk::tree<batch>);
  // Not trees: a type with no leaf or node traits, and containers holding one.
  struct opaque {};
  STATIC_REQUIRE(!dk::is_tree_v<opaque>);
  STATIC_REQUIRE(!dk::is_tree_v<std::tuple<int, opaque>>);
  STATIC_REQUIRE(!dk::is_tree_v<std::vector<bool>>);
  STATIC_REQUIRE(!dk::tree<std::vector<opaque>>);
#if DEVICEKIT_HAS_MDSPAN
  using view2 = dk::md::mdspan<float, dk::md::dextents<std::size_t, 2>>;
  STATIC_REQUIRE(dk::is_leaf_v<view2>);
  STATIC_REQUIRE(dk::leaf_traits<view2>::kind == dk::leaf_kind::shaped);
  STATIC_REQUIRE(dk::leaf_traits<dk::shaped_array<int, dk::md::extents<std::size_t, 2, 3>>>::rank == 2);
#endif
}

TEST_CASE("leaves: paths name struct members with '.', positions with [i], in traversal order", "[tree]") {
  const batch b{{1, 2, 3}, {7, 8}, {{0.5, 0.25}, 2.f}};
  CHECK(paths_of(b, "batch") ==
        std::vector<std::string>{"batch.images", "batch.labels", "batch.info.weights", "batch.info.scale"});
  CHECK(paths_of(b) == std::vector<std::string>{"images", "labels", "info.weights", "info.scale"});

  const auto t = std::make_tuple(b, std::pair<int, std::vector<float>>{1, {2.f}},
                                 std::vector<std::array<std::vector<int>, 2>>{{{{1}, {2, 3}}}});
  CHECK(paths_of(t) == std::vector<std::string>{"[0].images", "[0].labels", "[0].info.weights", "[0].info.scale",
                                                "[1][0]", "[1][1]", "[2][0][0]", "[2][0][1]"});

  const legacy l{{1, 2, 3}, {4, {5, 6, 7, 8}}};
  const auto info = dk::leaves(l, "legacy");
  REQUIRE(info.size() == 3);
  CHECK(info[0].path == "legacy.a");
  CHECK(info[0].element_type == "int16");
  CHECK(info[0].bytes == 6);
  CHECK(info[0].data == l.a.data());
  CHECK(info[1].path == "legacy.b[0]");
  CHECK(info[1].kind == dk::leaf_kind::scalar);
  CHECK(info[1].data == &l.b.first);
  CHECK(info[2].path == "legacy.b[1]");
  CHECK(info[2].element_type == "uint8");
  CHECK(info[2].shape == std::vector<std::size_t>{4});
  CHECK(info[2].device == dk::device::cpu());
}

TEST_CASE("leaf element names come from the one element_type vocabulary (core/element_type.hpp)", "[tree]") {
  const std::tuple<float, double, std::int64_t, char, signed char, unsigned char, bool, long double> t{};
  std::vector<std::string_view> names;
  std::vector<std::size_t> sizes;
  for (const auto& l : dk::leaves(t)) {
    names.push_back(l.element_type);
    sizes.push_back(l.element_size);
  }
  // The communicators' names: char is an 8-bit integer; bool and long double (80-bit x87
  // extended precision on x86-64, not IEEE binary128) have no fixed wire type and are opaque.
  CHECK(names == std::vector<std::string_view>{"float32", "float64", "int64", std::is_signed_v<char> ? "int8" : "uint8",
                                               "int8", "uint8", "opaque", "opaque"});
  CHECK(sizes.back() == sizeof(long double));  // the bytes a leaf stores are the C++ type's
  CHECK(dk::element_type_name<const std::uint16_t>() == dk::to_string(dk::element_type::uint16));
}

TEST_CASE("half, bfloat16 and fp8 leaves are leaves with PyTorch's dtype names", "[tree][float_types]") {
  const std::tuple<std::vector<dk::float16_t>, std::array<dk::bfloat16_t, 3>, dk::float8_e4m3_t,
                   std::vector<dk::float8_e5m2_t>>
      t{std::vector<dk::float16_t>(5), {}, dk::float8_e4m3_t{}, std::vector<dk::float8_e5m2_t>(2)};
  std::vector<std::string_view> names;
  for (const auto& l : dk::leaves(t)) names.push_back(l.element_type);
  CHECK(names == std::vector<std::string_view>{"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"});
  const auto info = dk::leaves(t);
  CHECK(info[0].kind == dk::leaf_kind::contiguous);
  CHECK(info[1].kind == dk::leaf_kind::contiguous);  // std::array of elements: a leaf, not a node
  CHECK(info[2].kind == dk::leaf_kind::scalar);
  CHECK(dk::total_bytes(t) == 5 * 2 + 3 * 2 + 1 + 2);
  STATIC_REQUIRE(dk::element_type_of<dk::bfloat16_t> == dk::element_type::bfloat16);
  STATIC_REQUIRE(dk::size_of(dk::element_type::float8_e4m3fn) == 1);
  // A float16 leaf and a bfloat16 leaf of the same size are different structures.
  const std::tuple<std::vector<dk::float16_t>> a{std::vector<dk::float16_t>(4)};
  const std::tuple<std::vector<dk::bfloat16_t>> b{std::vector<dk::bfloat16_t>(4)};
  CHECK(dk::leaves(a)[0].bytes == dk::leaves(b)[0].bytes);
  CHECK(dk::leaves(a)[0].element_type != dk::leaves(b)[0].element_type);
}

TEST_CASE("total_bytes and leaf_count add up every leaf, scalars included", "[tree]") {
  const batch b{{1, 2, 3}, {7, 8}, {{0.5, 0.25}, 2.f}};
  CHECK(dk::leaf_count(b) == 4);
  CHECK(dk::total_bytes(b) == 3 * sizeof(float) + 2 * sizeof(int) + 2 * sizeof(double) + sizeof(float));
  const std::vector<std::vector<std::uint16_t>> lists{{1, 2}, {}, {3}};
  CHECK(dk::leaf_count(lists) == 3);
  CHECK(dk::total_bytes(lists) == 6);
}

TEST_CASE("empty trees and zero-length leaves", "[tree]") {
  const std::tuple<> nothing;
  CHECK(dk::leaf_count(nothing) == 0);
  CHECK(dk::total_bytes(nothing) == 0);
  CHECK(dk::leaves(nothing).empty());
  CHECK(dk::structure(nothing).str() == "()");
  const auto mapped = dk::tree_map([](const auto& x) { return x; }, nothing);
  STATIC_REQUIRE(std::is_same_v<decltype(mapped), const std::tuple<>>);

  const std::vector<std::vector<float>> no_children;
  CHECK(dk::leaf_count(no_children) == 0);
  CHECK(dk::structure(no_children).str() == "[]");

  const std::tuple<std::vector<float>, std::vector<int>> zero{{}, {}};
  const auto info = dk::leaves(zero);
  REQUIRE(info.size() == 2);
  CHECK(info[0].bytes == 0);
  CHECK(info[0].shape == std::vector<std::size_t>{0});
  CHECK(dk::total_bytes(zero) == 0);
}

TEST_CASE("tree_map keeps the structure: tuples, pairs, arrays, vectors, Hana structs", "[tree]") {
  const auto t = std::make_tuple(std::vector<float>{1, 2}, std::pair<int, double>{3, 4.5},
                                 std::array<std::vector<int>, 2>{{{1}, {2, 3, 4}}},
                                 std::vector<std::vector<short>>{{1, 1}, {}, {5}});
  const auto sizes = dk::tree_map([](const auto& leaf) { return dk::describe_leaf(leaf).size; }, t);
  using sizes_t = std::remove_cvref_t<decltype(sizes)>;
  STATIC_REQUIRE(std::is_same_v<sizes_t, std::tuple<std::size_t, std::pair<std::size_t, std::size_t>,
                                                    std::array<std::size_t, 2>, std::vector<std::size_t>>>);
  CHECK(std::get<0>(sizes) == 2);
  CHECK(std::get<1>(sizes).first == 1);
  CHECK(std::get<2>(sizes)[1] == 3);
  CHECK(std::get<3>(sizes) == std::vector<std::size_t>{2, 0, 1});
  // Scalars gathered in an array or vector make a leaf (a contiguous range of arithmetic values),
  // so `sizes` is a smaller tree than `t`; mapped to ranges, the structure stays.
  CHECK_FALSE(dk::same_structure(t, sizes));
  CHECK(dk::structure(sizes).str() == "(*,(*,*),*,*)");
  const auto ranges = dk::tree_map([](const auto& leaf) { return std::vector<char>(dk::describe_leaf(leaf).size); }, t);
  CHECK(dk::same_structure(t, ranges));
  CHECK(dk::structure(t).str() == "(*,(*,*),[*,*],[*,*,*])");
  CHECK(dk::structure(t).num_leaves() == 8);
}

TEST_CASE("tree_map over a Hana struct gives the struct back when member types stay", "[tree][hana]") {
  const batch b{{1, 2, 3}, {7, 8}, {{0.5}, 2.f}};
  const auto doubled = dk::tree_map(
      [](const auto& leaf) {
        auto copy = leaf;
        if constexpr (std::is_arithmetic_v<std::remove_cvref_t<decltype(leaf)>>) {
          copy *= 2;
        } else {
          for (auto& x : copy) x *= 2;
        }
        return copy;
      },
      b);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(doubled)>, batch>);
  CHECK(doubled.images == std::vector<float>{2, 4, 6});
  CHECK(doubled.labels == std::vector<int>{14, 16});
  CHECK(doubled.info.weights == std::vector<double>{1.0});
  CHECK(doubled.info.scale == 4.f);
}

TEST_CASE("tree_map over a Hana struct with new member types gives a mapped_struct with the names", "[tree][hana]") {
  const batch b{{1, 2, 3}, {7, 8}, {{0.5}, 2.f}};
  const auto n = dk::tree_map([](const auto& leaf) { return dk::describe_leaf(leaf).size; }, b);
  using n_t = std::remove_cvref_t<decltype(n)>;
  STATIC_REQUIRE(dk::is_mapped_struct_v<n_t>);
  CHECK(n.get<"images">() == 3);
  CHECK(n.get<"labels">() == 2);
  CHECK(n.get<"info">().get<"weights">() == 1);
  CHECK(n.get<2>().get<1>() == 1);
  CHECK(n_t::name<1>() == "labels");
  // It is a Hana struct too.
  CHECK(boost::hana::at_key(n, BOOST_HANA_STRING("labels")) == 2);
  CHECK(paths_of(n, "batch") == paths_of(b, "batch"));
  CHECK(dk::same_structure(n, b));
  CHECK(dk::structure(b).str() == "{images:*,labels:*,info:{weights:*,scale:*}}");
  // Mapping back to the original member types gives the original struct type.
  const auto back = dk::tree_map([](std::size_t k) { return std::vector<float>(k, 1.f); }, n.get<"info">());
  STATIC_REQUIRE(dk::is_mapped_struct_v<std::remove_cvref_t<decltype(back)>>);  // weights was vector<double>
  const auto back2 = dk::tree_map([](auto k) { return std::vector<double>(k, 1.0); },
                                  std::make_tuple(n.get<"info">().get<"weights">()));
  CHECK(std::get<0>(back2).size() == 1);
  const auto restored = dk::tree_map(
      [](const auto&, const auto& original) { return std::remove_cvref_t<decltype(original)>(original); }, n, b);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(restored)>, batch>);
  CHECK(restored.images == b.images);
}

TEST_CASE("a struct that is not default-constructible maps to a mapped_struct even with the same types",
          "[tree][hana]") {
  const not_default_constructible s(3);
  const auto same = dk::tree_map([](const auto& v) { return v; }, s);
  STATIC_REQUIRE(dk::is_mapped_struct_v<std::remove_cvref_t<decltype(same)>>);
  CHECK(same.get<"x">() == std::vector<float>{3.f});
}

TEST_CASE("tree_map and for_each_leaf zip several trees of the same structure", "[tree]") {
  const std::tuple<std::vector<int>, std::array<int, 2>, int> a{{1, 2}, {3, 4}, 5};
  const std::tuple<std::vector<int>, std::vector<int>, long> b{{10, 20}, {30, 40}, 50};
  const auto sum = dk::tree_map(
      [](const auto& x, const auto& y) {
        if constexpr (std::is_arithmetic_v<std::remove_cvref_t<decltype(x)>>) {
          return static_cast<long>(x + y);
        } else {
          std::vector<int> out;
          for (std::size_t i = 0; i < x.size(); ++i) out.push_back(x[i] + y[i]);
          return out;
        }
      },
      a, b);
  CHECK(std::get<0>(sum) == std::vector<int>{11, 22});
  CHECK(std::get<1>(sum) == std::vector<int>{33, 44});
  CHECK(std::get<2>(sum) == 55);

  std::vector<std::string> visited;
  dk::for_each_leaf_with_path([&](const dk::tree_path& p, const auto&, const auto&) { visited.push_back(p.str()); }, a,
                              b);
  CHECK(visited == std::vector<std::string>{"[0]", "[1]", "[2]"});
}

TEST_CASE("trees whose vector nodes differ in length are refused with the path and both lengths", "[tree]") {
  const std::vector<std::vector<int>> a{{1}, {2}, {3}};
  const std::vector<std::vector<int>> b{{1}, {2}};
  CHECK_THROWS_AS(dk::for_each_leaf([](const auto&, const auto&) {}, a, b), dk::tree_structure_error);
  CHECK_THROWS_WITH(
      dk::for_each_leaf([](const auto&, const auto&) {}, a, b),
      Catch::Matchers::Contains("(root)") && Catch::Matchers::Contains("3 children in the first tree, 2 in tree 2"));
  const std::tuple<int, std::vector<std::vector<int>>> c{1, {{1}}};
  const std::tuple<int, std::vector<std::vector<int>>> d{1, {}};
  CHECK_THROWS_WITH((void)dk::tree_map([](const auto& x, const auto&) { return x; }, c, d),
                    Catch::Matchers::Contains("differ at '[1]'"));
  CHECK_FALSE(dk::same_structure(a, b));
}

TEST_CASE("rvalue trees hand their leaves over by move", "[tree]") {
  std::tuple<std::vector<float>, std::vector<float>> t{std::vector<float>(100, 1.f), std::vector<float>(5, 2.f)};
  const float* p0 = std::get<0>(t).data();
  auto moved = dk::tree_map([](auto&& leaf) { return std::forward<decltype(leaf)>(leaf); }, std::move(t));
  CHECK(std::get<0>(moved).data() == p0);
  CHECK(std::get<1>(moved).size() == 5);
}

#if DEVICEKIT_HAS_MDSPAN
TEST_CASE("shaped leaves: shaped_array and mdspan views report extents, layouts and storage", "[tree][shaped]") {
  using e3 = dk::md::extents<std::size_t, dk::md::dynamic_extent, 2, 3>;
  dk::shaped_array<float, e3> images(e3(4));
  CHECK(images.size() == 24);
  CHECK(images.shape() == std::array<std::size_t, 3>{4, 2, 3});
  images(3, 1, 2) = 7.f;
  CHECK(images.data()[23] == 7.f);  // layout_right: last index fastest
  CHECK(images.view()(3, 1, 2) == 7.f);

  dk::shaped_array<int, dk::md::dextents<std::size_t, 2>, dk::md::layout_left> cols(
      dk::md::dextents<std::size_t, 2>(3, 2));
  cols(2, 0) = 5;
  CHECK(cols.data()[2] == 5);  // layout_left: first index fastest

  std::vector<double> raw(12, 0.0);
  dk::md::mdspan<double, dk::md::dextents<std::size_t, 2>> view(raw.data(), 3, 4);
  const auto t = std::make_tuple(images, cols, view);
  const auto info = dk::leaves(t);
  REQUIRE(info.size() == 3);
  CHECK(info[0].kind == dk::leaf_kind::shaped);
  CHECK(info[0].shape == std::vector<std::size_t>{4, 2, 3});
  CHECK(info[0].bytes == 24 * sizeof(float));
  CHECK(info[1].shape == std::vector<std::size_t>{3, 2});
  CHECK(info[2].data == raw.data());
  CHECK(info[2].shape == std::vector<std::size_t>{3, 4});

  // A strided layout's storage is its required span, not the product of the extents.
  using s2 = dk::md::layout_stride::mapping<dk::md::dextents<std::size_t, 2>>;
  const s2 strided(dk::md::dextents<std::size_t, 2>(2, 3), dk::md::array<std::size_t, 2>{8, 2});
  dk::shaped_array<float, dk::md::dextents<std::size_t, 2>, dk::md::layout_stride> padded(strided);
  CHECK(padded.size() == 13);  // (2-1)*8 + (3-1)*2 + 1

  // Copies share the buffer; storage given as a vector is adopted.
  const auto alias = images;
  CHECK(alias.data() == images.data());
  std::vector<float> storage(6, 1.5f);
  const float* sp = storage.data();
  const dk::shaped_array<float, dk::md::dextents<std::size_t, 2>> adopted(std::move(storage),
                                                                          dk::md::dextents<std::size_t, 2>(2, 3));
  CHECK(adopted.data() == sp);
  CHECK_THROWS_AS((dk::shaped_array<float, dk::md::dextents<std::size_t, 2>>(std::vector<float>(5),
                                                                             dk::md::dextents<std::size_t, 2>(2, 3))),
                  dk::config_error);
}
#endif

TEST_CASE("device_array views and owners", "[tree]") {
  std::vector<int> v{1, 2, 3};
  const auto view = dk::device_array<int>::view(v.data(), v.size());
  CHECK_FALSE(view.owns());
  CHECK(view.device() == dk::device::cpu());
  CHECK(view.size_bytes() == 12);
  const auto info = dk::describe_leaf(view);
  CHECK(info.kind == dk::leaf_kind::contiguous);
  CHECK(info.data == v.data());
  const auto on_gpu = dk::device_array<int>(nullptr, nullptr, 0, dk::device::cuda(1));
  CHECK(dk::describe_leaf(on_gpu).device == dk::device::cuda(1));
}
