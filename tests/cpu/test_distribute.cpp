// distribute/: schemes and their plans, custom schemes, device assignment (local rank and the
// replica x computation table), element types and leaf spans, structure summaries, bucket
// planning, and the collectives run through the one-rank self communicator (the same bucketing
// and checks as MPI and NCCL, without either). The multi-rank behaviour is tested under mpirun
// (tests/mpi, label mpi).
#include <catch2/catch.hpp>

#include <devicekit/distribute/assignment.hpp>
#include <devicekit/distribute/bucket.hpp>
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/distribute/self.hpp>
#include <devicekit/distribute/tree_collectives.hpp>
#include <devicekit/manager.hpp>
#include <devicekit/report/json.hpp>
#include <devicekit/tree/hana.hpp>

#include "test_support.hpp"

#include <boost/hana/define_struct.hpp>

#include <array>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace dk = devicekit;

namespace {

const std::vector<dk::device> four_gpus = {dk::device::cuda(0), dk::device::cuda(1), dk::device::cuda(2),
                                           dk::device::cuda(3)};

/// A custom scheme: the first half of the devices get a copy each (say, the ones on one NVLink
/// island). A plain struct, no inheritance, no registration.
struct first_half {
  static constexpr std::string_view name() noexcept { return "first_half"; }
  static dk::distribution_plan plan(const dk::tree_summary&, std::span<const dk::device> devices) {
    dk::distribution_plan p;
    for (std::size_t i = 0; i < std::max<std::size_t>(1, devices.size() / 2); ++i) p.shares.push_back({devices[i]});
    return p;
  }
};

struct no_plan {  // has a name but no plan(): not a scheme
  static constexpr std::string_view name() noexcept { return "no_plan"; }
};

struct wrong_plan {  // plan() returns the wrong type
  static constexpr std::string_view name() noexcept { return "wrong_plan"; }
  static int plan(const dk::tree_summary&, std::span<const dk::device>) { return 0; }
};

/// Clears the launchers' local-rank variables for one test (and restores them after).
struct no_local_rank {
  dk::testing::scoped_env ompi{"OMPI_COMM_WORLD_LOCAL_RANK", nullptr};
  dk::testing::scoped_env slurm{"SLURM_LOCALID", nullptr};
  dk::testing::scoped_env mvapich{"MV2_COMM_WORLD_LOCAL_RANK", nullptr};
  dk::testing::scoped_env local{"LOCAL_RANK", nullptr};
};

}  // namespace

// --- schemes ----------------------------------------------------------------------------------------

TEST_CASE("schemes model the concept; types without a plan() do not", "[distribute][scheme]") {
  STATIC_REQUIRE(dk::distribution_scheme<dk::single_device>);
  STATIC_REQUIRE(dk::distribution_scheme<dk::schemes::replicate>);
  STATIC_REQUIRE(dk::distribution_scheme<dk::shard_batch>);
  STATIC_REQUIRE(dk::distribution_scheme<dk::schemes::basic_shard_batch<dk::schemes::uneven_batch::pad>>);
  STATIC_REQUIRE(dk::distribution_scheme<first_half>);
  STATIC_REQUIRE_FALSE(dk::distribution_scheme<no_plan>);
  STATIC_REQUIRE_FALSE(dk::distribution_scheme<wrong_plan>);
  STATIC_REQUIRE_FALSE(dk::distribution_scheme<int>);
  // Stock schemes stay empty, so a manager pays nothing for them.
  STATIC_REQUIRE(std::is_empty_v<dk::shard_batch>);
  STATIC_REQUIRE(sizeof(dk::device_manager<dk::cpu_detector, dk::balanced, first_half>) ==
                 sizeof(dk::detail::manager_state));
}

TEST_CASE("single_device and replicate plans", "[distribute][scheme]") {
  const dk::tree_summary t{32, 3, 1024};
  const auto one = dk::single_device::plan(t, four_gpus);
  REQUIRE(one.shares.size() == 1);
  CHECK(one.shares[0].dev == dk::device::cuda(0));
  CHECK(one.shares[0].whole);
  const auto all = dk::schemes::replicate::plan(t, four_gpus);
  REQUIRE(all.shares.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(all.shares[i].dev == four_gpus[i]);
    CHECK(all.shares[i].whole);
  }
  CHECK_THROWS_AS(dk::single_device::plan(t, {}), dk::config_error);
}

TEST_CASE("shard_batch: rows per device under each uneven policy", "[distribute][scheme]") {
  using dk::schemes::uneven_batch;
  const auto rows = [](const dk::distribution_plan& p) {
    std::vector<std::size_t> out;
    for (const auto& s : p.shares) out.push_back(s.count);
    return out;
  };
  SECTION("even batch: the same under every policy") {
    const dk::tree_summary t{8, 2, 0};
    const auto p = dk::schemes::basic_shard_batch<uneven_batch::error>::plan(t, four_gpus);
    CHECK(rows(p) == std::vector<std::size_t>{2, 2, 2, 2});
    CHECK(p.shares[3].begin == 6);
    CHECK_FALSE(p.shares[0].whole);
    CHECK(dk::shard_batch::plan(t, four_gpus) == p);
  }
  SECTION("10 rows over 4 devices") {
    const dk::tree_summary t{10, 2, 0};
    CHECK_THROWS_WITH(dk::schemes::basic_shard_batch<uneven_batch::error>::plan(t, four_gpus),
                      Catch::Contains("10 rows does not divide into 4 equal shards") && Catch::Contains("pad"));
    const auto ragged = dk::shard_batch::plan(t, four_gpus);
    CHECK(rows(ragged) == std::vector<std::size_t>{3, 3, 2, 2});  // balanced, as numpy.array_split
    CHECK(ragged.shares[3].begin == 8);
    CHECK(ragged.shares[3].padding == 0);
    const auto pad = dk::schemes::basic_shard_batch<uneven_batch::pad>::plan(t, four_gpus);
    CHECK(rows(pad) == std::vector<std::size_t>{3, 3, 3, 1});
    CHECK(pad.shares[3].padding == 2);
    CHECK(pad.shares[0].padding == 0);
  }
  SECTION("fewer rows than devices: the last shards are empty") {
    const auto p = dk::shard_batch::plan({2, 1, 0}, four_gpus);
    CHECK(rows(p) == std::vector<std::size_t>{1, 1, 0, 0});
    CHECK(p.shares[3].begin == 2);
  }
  SECTION("9 rows over 4 devices: 3, 2, 2, 2, no shard empty") {
    const auto p = dk::shard_batch::plan({9, 1, 0}, four_gpus);
    CHECK(rows(p) == std::vector<std::size_t>{3, 2, 2, 2});
    std::vector<std::size_t> begins;
    for (const auto& s : p.shares) begins.push_back(s.begin);
    CHECK(begins == std::vector<std::size_t>{0, 3, 5, 7});
    // The scatter counts of the collectives are the same split.
    CHECK(dk::split_counts(9, 4) == rows(p));
  }
  SECTION("no rows: every shard empty") {
    const auto p = dk::shard_batch::plan({0, 1, 0}, four_gpus);
    CHECK(rows(p) == std::vector<std::size_t>{0, 0, 0, 0});
    CHECK(p.shares[3].begin == 0);
  }
}

TEST_CASE("balanced_rows: the split of numpy.array_split", "[distribute][scheme][split]") {
  // Every (rows, parts) up to 12 x 6: consecutive, covering, sizes within one, larger ones first.
  for (std::size_t rows = 0; rows <= 12; ++rows) {
    for (std::size_t parts = 1; parts <= 6; ++parts) {
      std::size_t next = 0;
      for (std::size_t i = 0; i < parts; ++i) {
        const dk::row_range r = dk::balanced_rows(rows, parts, i);
        CHECK(r.begin == next);
        CHECK(r.count == rows / parts + (i < rows % parts ? 1 : 0));
        if (rows >= parts) CHECK(r.count > 0);
        next += r.count;
      }
      CHECK(next == rows);
    }
  }
  CHECK_THROWS_WITH(dk::balanced_rows(5, 0, 0), Catch::Contains("zero parts"));
  CHECK_THROWS_WITH(dk::balanced_rows(5, 2, 2), Catch::Contains("part 2 asked of a split into 2 parts"));
  CHECK_THROWS_WITH(dk::check_row_counts(std::vector<std::size_t>{1, 5, 2}, 3, 9, "test"),
                    Catch::Contains("the row counts 1, 5, 2 sum to 8 but the batch has 9 rows"));
  CHECK_THROWS_WITH(dk::check_row_counts(std::vector<std::size_t>{4, 5}, 3, 9, "test"),
                    Catch::Contains("2 row count(s) given (4, 5) for 3 part(s)"));
  CHECK_NOTHROW(dk::check_row_counts(std::vector<std::size_t>{1, 5, 3}, 3, 9, "test"));
  // Counts whose sum wraps around to the batch (a -1 read into a size_t): refused, not taken as
  // a split whose first part starts past the end of the batch.
  const std::size_t minus_one = std::numeric_limits<std::size_t>::max();
  CHECK_THROWS_WITH(dk::check_row_counts(std::vector<std::size_t>{minus_one, 2}, 2, 1, "test"),
                    Catch::Contains("sum to more than"));
}

TEST_CASE("a plan's device assignment: one replica per share", "[distribute][scheme][assignment]") {
  const auto a = dk::shard_batch::plan({8, 1, 0}, four_gpus).assignment();
  CHECK(a.replica_count() == 4);
  CHECK(a.computation_count() == 1);
  CHECK(a.at(2, 0) == dk::device::cuda(2));
  CHECK(a.str() == "4 replicas x 1 computation: [[cuda:0], [cuda:1], [cuda:2], [cuda:3]]");
}

TEST_CASE("validate_plan catches a custom scheme's bad share", "[distribute][scheme]") {
  const dk::tree_summary t{4, 1, 16};
  dk::distribution_plan p{{{dk::device::cuda(7)}}};
  CHECK_THROWS_WITH(dk::validate_plan(p, t, four_gpus, "mine"), Catch::Contains("scheme 'mine', share 0 (cuda:7)"));
  CHECK_THROWS_WITH(dk::validate_plan(p, t, four_gpus, "mine"), Catch::Contains("not one of the manager's devices"));
  dk::distribution_plan rows{{{dk::device::cuda(0), false, 3, 2, 0}}};
  CHECK_THROWS_WITH(dk::validate_plan(rows, t, four_gpus, "mine"),
                    Catch::Contains("rows [3, 5) fall outside the batch of 4"));
  CHECK_NOTHROW(dk::validate_plan(first_half::plan(t, four_gpus), t, four_gpus, "first_half"));
}

// --- device assignment ---------------------------------------------------------------------------

TEST_CASE("local rank from the launcher's environment, in order of precedence", "[distribute][assignment]") {
  const no_local_rank clean;
  CHECK_FALSE(dk::local_rank_from_environment().has_value());
  {
    const dk::testing::scoped_env e("LOCAL_RANK", "2");
    auto r = dk::local_rank_from_environment();
    REQUIRE(r);
    CHECK(r->rank == 2);
    CHECK(r->source == "LOCAL_RANK");
  }
  {
    const dk::testing::scoped_env e1("LOCAL_RANK", "2"), e2("SLURM_LOCALID", "1"),
        e3("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    auto r = dk::local_rank_from_environment();
    REQUIRE(r);
    CHECK(r->rank == 3);
    CHECK(r->source == "OMPI_COMM_WORLD_LOCAL_RANK");
  }
  {
    const dk::testing::scoped_env e("MV2_COMM_WORLD_LOCAL_RANK", "5");
    CHECK(dk::local_rank_from_environment()->source == "MV2_COMM_WORLD_LOCAL_RANK");
  }
  {
    const dk::testing::scoped_env e("SLURM_LOCALID", "one");
    CHECK_THROWS_WITH(dk::local_rank_from_environment(),
                      Catch::Contains("SLURM_LOCALID='one'") && Catch::Contains("non-negative integer"));
  }
}

TEST_CASE("assign_device: visible[local_rank % n], overridden by settings", "[distribute][assignment]") {
  const no_local_rank clean;
  const std::vector<dk::device> two = {dk::device::cuda(0), dk::device::cuda(1)};
  CHECK(dk::assign_device(two, {}, dk::local_rank_info{0, "test"}) == dk::device::cuda(0));
  CHECK(dk::assign_device(two, {}, dk::local_rank_info{1, "test"}) == dk::device::cuda(1));
  CHECK(dk::assign_device(two, {}, dk::local_rank_info{5, "test"}) == dk::device::cuda(1));  // 4 ranks per 2 GPUs
  CHECK(dk::assign_device(two) == dk::device::cuda(0));                                      // no launcher: the first
  {
    const dk::testing::scoped_env e("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    CHECK(dk::assign_device(two) == dk::device::cuda(1));
  }
  dk::settings s;
  s.set_device(dk::device::cuda(0));
  CHECK(dk::assign_device(two, s, dk::local_rank_info{1, "test"}) == dk::device::cuda(0));
  s.set_device(dk::device::cuda(4));
  CHECK_THROWS_WITH(dk::assign_device(two, s), Catch::Contains("cuda:4 is not visible") && Catch::Contains("cuda:1"));
  CHECK_THROWS_AS(dk::assign_device({}), dk::config_error);
  const std::vector<dk::device> host = {dk::device::cpu()};
  CHECK(dk::assign_device(host, {}, dk::local_rank_info{3, "test"}) == dk::device::cpu());
}

TEST_CASE("device_assignment: replica x computation table, printed and serialised", "[distribute][assignment]") {
  const auto a = dk::device_assignment::create(
      {{dk::device::cuda(0), dk::device::cuda(1)}, {dk::device::cuda(2), dk::device::cuda(3)}});
  CHECK(a.replica_count() == 2);
  CHECK(a.computation_count() == 2);
  CHECK(a.at(1, 0) == dk::device::cuda(2));
  CHECK(a.find(dk::device::cuda(3)) == std::pair<std::size_t, std::size_t>{1, 1});
  CHECK_FALSE(a.find(dk::device::cpu()).has_value());
  CHECK(a.str() == "2 replicas x 2 computations: [[cuda:0, cuda:1], [cuda:2, cuda:3]]");
  std::ostringstream os;
  os << a;
  CHECK(os.str() == a.str());
  CHECK(a.serialize() == "2x2:cuda:0,cuda:1,cuda:2,cuda:3");
  CHECK(dk::device_assignment::parse(a.serialize()) == a);
  CHECK(dk::device_assignment::parse(dk::device_assignment().serialize()) == dk::device_assignment());
  CHECK_THROWS_WITH(a.at(2, 0), Catch::Contains("outside 2 x 2"));
  CHECK_THROWS_WITH(dk::device_assignment::create({{dk::device::cuda(0)}, {}}), Catch::Contains("replica 1 has 0"));
  CHECK_THROWS_WITH(dk::device_assignment::parse("2x1:cuda:0"), Catch::Contains("need 2 devices, got 1"));
  CHECK_THROWS_WITH(dk::device_assignment::parse("cuda:0"), Catch::Contains("expected 'RxC:dev"));
  CHECK_THROWS_AS(dk::device_assignment::parse("1x1:tpu:0"), dk::config_error);
  // 2^32 x 2^32 cells wrap around to 0 in 64 bits: refused, not a table with no devices whose
  // at(0, 0) reads past its end.
  CHECK_THROWS_WITH(dk::device_assignment::parse("4294967296x4294967296:"),
                    Catch::Contains("need more than SIZE_MAX devices"));
  CHECK_THROWS_WITH(dk::device_assignment(std::size_t{1} << 32, std::size_t{1} << 32, {}),
                    Catch::Contains("need more than SIZE_MAX devices"));
}

// --- leaves, summaries, buckets -----------------------------------------------------------------

TEST_CASE("element types of C++ types; opaque leaves count bytes", "[distribute][leaf]") {
  STATIC_REQUIRE(dk::element_type_of<float> == dk::element_type::float32);
  STATIC_REQUIRE(dk::element_type_of<const double> == dk::element_type::float64);
  STATIC_REQUIRE(dk::element_type_of<std::int8_t> == dk::element_type::int8);
  STATIC_REQUIRE(dk::element_type_of<std::uint16_t> == dk::element_type::uint16);
  STATIC_REQUIRE(dk::element_type_of<int> == dk::element_type::int32);
  STATIC_REQUIRE(dk::element_type_of<unsigned long long> == dk::element_type::uint64);
  STATIC_REQUIRE(dk::element_type_of<bool> == dk::element_type::opaque);
  STATIC_REQUIRE(dk::element_type_of<long double> == dk::element_type::opaque);
  STATIC_REQUIRE(dk::size_of(dk::element_type::bfloat16) == 2);
  STATIC_REQUIRE(dk::size_of(dk::element_type::int64) == 8);
  struct rgb {
    std::uint8_t r, g, b;
  };
  std::vector<rgb> px(5);
  const auto s = dk::leaf_span::of(px);
  CHECK(s.type == dk::element_type::opaque);
  CHECK(s.count == 15);
  CHECK(s.bytes() == 15);
  std::vector<double> d(3);
  const dk::const_leaf_span c = dk::leaf_span::of(d);
  CHECK(c.count == 3);
  CHECK(c.bytes() == 24);
  CHECK(c.data == d.data());
}

TEST_CASE("element types: one table of names, sizes and kinds", "[distribute][leaf]") {
  STATIC_REQUIRE(dk::element_type_count == 15);  // 13, and the two fp8 formats
  STATIC_REQUIRE(dk::to_string(dk::element_type::float8_e4m3fn) == "float8_e4m3fn");
  STATIC_REQUIRE(dk::is_floating(dk::element_type::float8_e5m2));
  STATIC_REQUIRE(dk::to_string(dk::element_type::bfloat16) == "bfloat16");
  STATIC_REQUIRE(dk::to_string(dk::element_type::opaque) == "opaque");
  STATIC_REQUIRE(dk::size_of(dk::element_type::opaque) == 1);
  STATIC_REQUIRE(dk::size_of(dk::element_type::uint32) == 4);
  STATIC_REQUIRE(dk::is_floating(dk::element_type::float16));
  STATIC_REQUIRE_FALSE(dk::is_floating(dk::element_type::int64));
  STATIC_REQUIRE(dk::element_type_name<float>() == "float32");
  for (const auto& row : dk::element_types) {
    CHECK(dk::to_string(row.type) == row.name);
    CHECK(dk::size_of(row.type) == row.size);
  }
}

TEST_CASE("structure summaries tell leaf lists apart", "[distribute][leaf]") {
  std::vector<float> a(4), b(5);
  std::vector<int> i(4);
  const std::vector<dk::leaf_span> x = {dk::leaf_span::of(a)}, y = {dk::leaf_span::of(b)}, z = {dk::leaf_span::of(i)};
  const auto sx = dk::summarize(std::span<const dk::leaf_span>(x));
  CHECK(sx == dk::summarize(std::span<const dk::leaf_span>(x)));
  CHECK(sx.leaf_count == 1);
  CHECK(sx.total_bytes == 16);
  CHECK(sx.hash != dk::summarize(std::span<const dk::leaf_span>(y)).hash);  // count
  CHECK(sx.hash != dk::summarize(std::span<const dk::leaf_span>(z)).hash);  // type
  // Without counts (scatter), only the types matter.
  CHECK(dk::summarize(std::span<const dk::leaf_span>(x), false).hash ==
        dk::summarize(std::span<const dk::leaf_span>(y), false).hash);
}

TEST_CASE("structure summaries tell float16 from bfloat16 and the two fp8 formats", "[distribute][leaf]") {
  // Same sizes, same counts: only the element type differs, and the hash must see it (a rank
  // passing bf16 gradients where another passes fp16 would otherwise sum garbage).
  std::vector<dk::float16_t> h(4);
  std::vector<dk::bfloat16_t> b(4);
  std::vector<dk::float8_e4m3_t> e4(4);
  std::vector<dk::float8_e5m2_t> e5(4);
  const std::vector<dk::leaf_span> lh = {dk::leaf_span::of(h)}, lb = {dk::leaf_span::of(b)},
                                   l4 = {dk::leaf_span::of(e4)}, l5 = {dk::leaf_span::of(e5)};
  const auto sh = dk::summarize(std::span<const dk::leaf_span>(lh));
  const auto sb = dk::summarize(std::span<const dk::leaf_span>(lb));
  CHECK(sh.total_bytes == sb.total_bytes);
  CHECK(sh.hash != sb.hash);
  CHECK(dk::summarize(std::span<const dk::leaf_span>(l4)).hash !=
        dk::summarize(std::span<const dk::leaf_span>(l5)).hash);
  // Through a tree too: the tree tag (node kinds, lengths) is the same for both.
  std::tuple<std::vector<dk::float16_t>> th{h};
  std::tuple<std::vector<dk::bfloat16_t>> tb{b};
  CHECK(dk::structure_hash(th) == dk::structure_hash(tb));
}

TEST_CASE("bucket planning: by type, bounded size, large leaves alone, empty leaves skipped", "[distribute][bucket]") {
  using et = dk::element_type;
  const std::vector<et> types = {et::float32, et::float32, et::int64, et::float32, et::float32, et::float32, et::int64};
  const std::vector<std::size_t> counts = {10, 10, 2, 0, 100, 10, 3};
  SECTION("by type with 64-byte buckets") {
    const auto b = dk::plan_buckets(types, counts, 64, true);
    // float32: 40 + 40 > 64, so {0} and {1} each; {4} (400 bytes) alone; {5} cannot join {1}
    // (80 > 64). int64: {2, 6} (16 + 24 bytes) coalesced. Buckets appear in the order they open.
    REQUIRE(b.size() == 5);
    CHECK(b[0].leaves == std::vector<std::size_t>{0});
    CHECK(b[1].leaves == std::vector<std::size_t>{1});
    CHECK(b[2].type == et::int64);
    CHECK(b[2].leaves == std::vector<std::size_t>{2, 6});
    CHECK(b[2].count == 5);
    CHECK(b[2].bytes() == 40);
    CHECK(b[3].leaves == std::vector<std::size_t>{4});
    CHECK(b[4].leaves == std::vector<std::size_t>{5});
    CHECK(b[3].direct());
  }
  SECTION("by type with 96-byte buckets: small float leaves coalesce") {
    const auto b = dk::plan_buckets(types, counts, 96, true);
    REQUIRE(b.size() == 4);
    CHECK(b[0].leaves == std::vector<std::size_t>{0, 1});
    CHECK(b[0].count == 20);
    CHECK_FALSE(b[0].direct());
    CHECK(b[3].leaves == std::vector<std::size_t>{5});
  }
  SECTION("bytes, one big bucket") {
    const auto b = dk::plan_buckets(types, counts, dk::default_bucket_bytes, false);
    REQUIRE(b.size() == 1);
    CHECK(b[0].type == et::opaque);
    CHECK(b[0].leaves == std::vector<std::size_t>{0, 1, 2, 4, 5, 6});
    CHECK(b[0].count == 40 + 40 + 16 + 400 + 40 + 24);
  }
  SECTION("bucket size 0: one leaf per bucket") {
    const auto b = dk::plan_buckets(types, counts, 0, true);
    CHECK(b.size() == 6);
    for (const auto& x : b) CHECK(x.direct());
  }
}

// --- collectives through the self communicator ---------------------------------------------------

namespace {
struct layer {
  BOOST_HANA_DEFINE_STRUCT(layer, (std::vector<float>, w), (std::array<double, 2>, b), (int, step));
  friend bool operator==(const layer&, const layer&) = default;
};
}  // namespace

TEST_CASE("self communicator: every collective on a tree, bucketed and not", "[distribute][collectives]") {
  for (const std::size_t bucket : {dk::default_bucket_bytes, std::size_t{0}, std::size_t{16}}) {
    dk::self_communicator comm;
    comm.set_bucket_bytes(bucket);
    std::tuple<layer, std::vector<std::int64_t>, std::vector<std::uint8_t>> t{
        layer{{1.5f, 2.5f, 3.5f}, {4.0, 5.0}, 6}, {7, 8, 9, 10}, {11, 12}};
    const auto copy = t;
    dk::all_reduce(comm, t);
    dk::all_reduce(comm, t, dk::reduce_op::average);
    dk::broadcast(comm, t);
    CHECK(t == copy);
    auto g = dk::all_gathered(comm, t);
    CHECK(dk::same_structure(g, t));
    CHECK(std::get<1>(g) == std::get<1>(t));
    CHECK(std::get<0>(g).template get<"step">() == std::vector<int>{6});
    auto out = copy;
    std::get<1>(out).assign(4, 0);
    dk::reduce_scatter(comm, t, out);
    CHECK(out == copy);
    std::get<2>(out).assign(2, 0);
    dk::scatter(comm, t, out);
    CHECK(out == copy);
  }
}

namespace {
/// Values of `T` from floats, and back.
template <class T>
std::vector<T> narrowed(const std::vector<float>& v) {
  std::vector<T> out;
  for (const float x : v) out.push_back(dk::narrow_to<T>(x));
  return out;
}
template <class T>
std::vector<float> widened(const std::vector<T>& v) {
  std::vector<float> out;
  for (const T x : v) out.push_back(dk::widen(x));
  return out;
}

/// The reduction of one rank's leaf as a widened loop computes it: each element widened to
/// float, reduced over the one rank (itself), divided for the average, narrowed once.
template <class T>
std::vector<float> expected_one_rank(const std::vector<T>& v, dk::reduce_op op) {
  std::vector<float> out;
  for (const T x : v) {
    float acc = dk::widen(x);  // the reduction over one rank starts and ends here
    if (op == dk::reduce_op::average) acc /= 1.0f;
    out.push_back(dk::widen(dk::narrow_to<T>(acc)));
  }
  return out;
}

template <class T>
void check_reduced_float_self(dk::self_communicator& comm) {
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 3.0f, -0.125f, 6.0f, 0.0f, 2.5f};
  for (const auto op : {dk::reduce_op::sum, dk::reduce_op::max, dk::reduce_op::min, dk::reduce_op::average}) {
    std::tuple<std::vector<T>, std::vector<float>, std::vector<T>> t{narrowed<T>(values), values,
                                                                     narrowed<T>({4.0f, -1.0f})};
    const auto want = expected_one_rank(std::get<0>(t), op);
    dk::all_reduce(comm, t, op);
    CHECK(widened(std::get<0>(t)) == want);
    CHECK(widened(std::get<2>(t)) == std::vector<float>{4.0f, -1.0f});
    CHECK(std::get<1>(t) == values);
  }
  // reduce_scatter on one rank: the whole leaf is this rank's part.
  const auto in = narrowed<T>(values);
  std::vector<T> out(values.size());
  comm.reduce_scatter(std::vector<dk::const_leaf_span>{dk::const_leaf_span::of(in)},
                      std::vector<dk::leaf_span>{dk::leaf_span::of(out)});
  CHECK(widened(out) == widened(in));
}
}  // namespace

TEST_CASE("self communicator: float16, bfloat16 and fp8 leaves reduce (in float, rounded once)",
          "[distribute][collectives][float_types]") {
  CHECK(dk::detail::self_backend::can_reduce(dk::element_type::float16));
  CHECK(dk::detail::self_backend::can_reduce(dk::element_type::bfloat16));
  CHECK(dk::detail::self_backend::can_reduce(dk::element_type::float8_e4m3fn));
  CHECK(dk::detail::self_backend::can_reduce(dk::element_type::float8_e5m2));
  CHECK_FALSE(dk::detail::self_backend::can_reduce(dk::element_type::opaque));
  for (const std::size_t bucket : {dk::default_bucket_bytes, std::size_t{0}, std::size_t{4}}) {
    dk::self_communicator comm;
    comm.set_bucket_bytes(bucket);
    check_reduced_float_self<dk::float16_t>(comm);
    check_reduced_float_self<dk::bfloat16_t>(comm);
    check_reduced_float_self<dk::float8_e4m3_t>(comm);
    check_reduced_float_self<dk::float8_e5m2_t>(comm);
  }
}

namespace {
/// The one-rank backend without copy(): not a collective_backend.
struct backend_without_copy {
  std::size_t participants() const { return 1; }
  int size() const { return 1; }
  int rank(std::size_t) const { return 0; }
  static std::string_view name() { return "partial"; }
  static bool can_reduce(dk::element_type) { return true; }
  bool accepts(dk::device, std::size_t) const { return true; }
  std::string memory_description(std::size_t) const { return {}; }
  void set_operation(std::string_view) {}
  void group_begin() {}
  void group_end() {}
  void* scratch(std::size_t, int, std::size_t) { return nullptr; }
  void exchange(const void*, std::size_t, void*) {}
  void broadcast(std::size_t, void*, std::size_t, dk::element_type, int) {}
  void all_reduce(std::size_t, const void*, void*, std::size_t, dk::element_type, dk::reduce_op) {}
  void all_gather(std::size_t, const void*, void*, std::size_t, dk::element_type) {}
  void reduce_scatter(std::size_t, const void*, void*, std::size_t, dk::element_type, dk::reduce_op) {}
  void scatter(std::size_t, const void*, const std::size_t*, const std::size_t*, void*, std::size_t, int) {}
  void finish(std::string_view) {}
};
/// The same with copy(): a collective_backend.
struct backend_with_copy : backend_without_copy {
  void copy(std::size_t, void*, const void*, std::size_t) {}
};
}  // namespace

TEST_CASE("collective_backend: the stock backends model it; a backend without copy() does not",
          "[distribute][collectives][concept]") {
  STATIC_REQUIRE(dk::collective_backend<dk::detail::self_backend>);
  STATIC_REQUIRE(dk::collective_backend<backend_with_copy>);
  STATIC_REQUIRE_FALSE(dk::collective_backend<backend_without_copy>);
  STATIC_REQUIRE_FALSE(dk::detail::backend_requirements::has_copy<backend_without_copy>);
  STATIC_REQUIRE(dk::detail::backend_requirements::has_exchange<backend_without_copy>);
  STATIC_REQUIRE_FALSE(dk::collective_backend<int>);
  // The three public communicators are the one façade.
  STATIC_REQUIRE(std::is_same_v<dk::self_communicator, dk::basic_communicator<dk::detail::self_backend>>);
  STATIC_REQUIRE(dk::communicator<dk::self_communicator>);
  STATIC_REQUIRE(dk::communicator<dk::basic_communicator<backend_with_copy>>);
}

TEST_CASE("the communicator façade: rank, size, memory, and one leaf list per local rank",
          "[distribute][collectives]") {
  dk::self_communicator comm(dk::collective_options{64, true});
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(comm.local_ranks() == 1);
  CHECK(comm.options().bucket_bytes == 64);
  CHECK(&comm.set_options({}).set_bucket_bytes(32) == &comm);  // the setters chain
  CHECK(comm.options().bucket_bytes == 32);
  CHECK(comm.accepts(dk::device::cpu()));
  CHECK_FALSE(comm.accepts(dk::device::cuda(0)));
  CHECK(comm.memory_description() == "the self communicator cannot use: it works on host (cpu) memory");
  // The per-local-rank forms take one list per local rank: here one.
  std::vector<float> a = {1.f, 2.f}, b = {3.f, 4.f, 5.f};
  const std::vector<std::vector<dk::const_leaf_span>> in = {{dk::const_leaf_span::of(a), dk::const_leaf_span::of(b)}};
  std::vector<float> ga(2), gb(3);
  const std::vector<std::vector<dk::leaf_span>> out = {{dk::leaf_span::of(ga), dk::leaf_span::of(gb)}};
  comm.all_gather(in, out);
  CHECK(ga == a);
  CHECK(gb == b);
  const std::vector<std::vector<dk::leaf_span>> two = {{dk::leaf_span::of(a)}, {dk::leaf_span::of(b)}};
  CHECK_THROWS_WITH(comm.all_reduce(two),
                    Catch::Contains("self_communicator::all_reduce: 2 leaf lists for 1 local ranks"));
  comm.barrier();
}

TEST_CASE("self communicator: argument errors name the problem", "[distribute][collectives]") {
  dk::self_communicator comm;
  std::vector<double> in(3), big(4);
  CHECK_THROWS_WITH(comm.all_gather(std::vector<dk::const_leaf_span>{dk::const_leaf_span::of(in)},
                                    std::vector<dk::leaf_span>{dk::leaf_span::of(big)}),
                    Catch::Contains("leaf 0 of the output must hold 1 x the input leaf (3 float64), it holds 4"));
  // A bool scalar is a leaf of opaque bytes: it moves, it is not reduced.
  std::tuple<bool, std::vector<float>> t{true, {1.f}};
  dk::broadcast(comm, t);  // bytes move fine
  float x[2] = {1, 2};
  std::tuple<dk::device_array<float>> on_gpu{dk::device_array<float>::view(x, 2, dk::device::cuda(0))};
  CHECK_THROWS_WITH(dk::all_reduce(comm, on_gpu), Catch::Contains("leaf '[0]' is in cuda:0 memory"));
  CHECK_THROWS_WITH(comm.broadcast(std::vector<dk::leaf_span>{dk::leaf_span::of(in)}, 1),
                    Catch::Contains("root 1 is not a rank"));
}

TEST_CASE("tree structure hashes: same structure, same hash; other names or lengths, another", "[distribute][leaf]") {
  const layer a{{1.f}, {2.0, 3.0}, 4};
  const layer b{{5.f, 6.f}, {7.0, 8.0}, 9};  // other values and lengths of leaves: same structure
  CHECK(dk::structure_hash(a) == dk::structure_hash(b));
  const std::vector<std::vector<float>> two(2), three(3);
  CHECK(dk::structure_hash(two) != dk::structure_hash(three));
  CHECK(dk::structure_hash(std::make_tuple(a)) != dk::structure_hash(a));
  CHECK(dk::split_counts(10, 4) == std::vector<std::size_t>{3, 3, 2, 2});
  CHECK(dk::split_counts(2, 4) == std::vector<std::size_t>{1, 1, 0, 0});
  CHECK_THROWS_AS(dk::split_counts(1, 0), dk::config_error);
}

// --- the manager: its scheme's plan and the report's device assignment ----------------------

TEST_CASE("the manager plans with its scheme and reports the device assignment", "[distribute][manager]") {
  using sharded = dk::device_manager<dk::fixed_detector, dk::balanced, dk::shard_batch>;
  sharded dm{dk::settings::without_environment().set_device(dk::device::cuda(1)),
             dk::fixed_detector{dk::testing::simulated_gpus(3)}};
  // The default device comes first.
  CHECK(dm.scheme_devices() == std::vector<dk::device>{dk::device::cuda(1), dk::device::cuda(0), dk::device::cuda(2)});
  const auto p = dm.plan({7, 2, 0});
  REQUIRE(p.shares.size() == 3);
  CHECK(p.shares[0].dev == dk::device::cuda(1));
  CHECK(p.shares[0].count == 3);
  CHECK(p.shares[1].count == 2);  // 7 rows over 3: 3, 2, 2
  CHECK(p.shares[2].count == 2);
  CHECK(p.shares[2].begin == 5);
  std::ostringstream os;
  dk::print_device_info(dm, os);
  CHECK_THAT(os.str(),
             Catch::Contains("Distribution: shard_batch") &&
                 Catch::Contains("Device Assignment: 3 replicas x 1 computation: [[cuda:1], [cuda:0], [cuda:2]]"));

  const auto j = dk::to_json(dm.report());
  CHECK(j["device_assignment"]["replicas"] == 3);
  CHECK(j["device_assignment"]["computations"] == 1);
  CHECK(j["device_assignment"]["devices"][2][0] == "cuda:2");

  using single = dk::device_manager<dk::fixed_detector, dk::balanced, dk::single_device>;
  single one{dk::settings::without_environment(), dk::fixed_detector{dk::testing::simulated_gpus(3)}};
  CHECK(one.report().assignment.str() == "1 replica x 1 computation: [[cuda:0]]");

  using custom = dk::device_manager<dk::fixed_detector, dk::balanced, first_half>;
  custom half{dk::settings::without_environment(), dk::fixed_detector{dk::testing::simulated_gpus(3)}};
  CHECK(half.plan({}).shares.size() == 1);
}

// --- dm.distribute: the scheme applied to a tree -------------------------------------------------

namespace {
struct batch {
  BOOST_HANA_DEFINE_STRUCT(batch, (std::vector<float>, x), (std::vector<std::int32_t>, y));
};
batch make_batch(std::size_t rows) {
  batch b;
  for (std::size_t i = 0; i < rows; ++i) {
    b.x.push_back(static_cast<float>(i) + 0.5f);
    b.y.push_back(static_cast<std::int32_t>(10 * i));
  }
  return b;
}
/// Two host "devices" (cpu:0, cpu:1): enough to see a plan spread a tree without a GPU.
dk::capabilities two_cpus() {
  dk::capabilities caps;
  caps.device_type = dk::device_kind::cpu;
  for (int i = 0; i < 2; ++i) {
    dk::device_properties p;
    p.id = dk::device::cpu(i);
    p.name = "host";
    p.total_memory_bytes = std::uint64_t{1} << 30;  // the manager's host pool is sized from it
    caps.devices.push_back(p);
  }
  caps.device_count = 2;
  return caps;
}
struct whole_on_second {  // custom: one copy, on the second device
  static constexpr std::string_view name() noexcept { return "whole_on_second"; }
  static dk::distribution_plan plan(const dk::tree_summary&, std::span<const dk::device> devices) {
    return {{{devices.back()}}};
  }
};
template <class Leaf>
std::vector<typename Leaf::element_type> host_values(const Leaf& leaf) {
  return {leaf.data(), leaf.data() + leaf.size()};
}
}  // namespace

TEST_CASE("dm.distribute applies the manager's scheme (on host devices)", "[distribute][manager]") {
  const batch b = make_batch(5);
  CHECK(dk::summarize_tree(b).batch == 5);
  CHECK(dk::summarize_tree(b).leaf_count == 2);
  CHECK(dk::summarize_tree(b).total_bytes == 40);
  SECTION("single_device: one copy on the default device") {
    dk::device_manager<dk::fixed_detector, dk::balanced, dk::single_device> dm{
        dk::settings::without_environment().set_device(dk::device::cpu(1)), dk::fixed_detector{two_cpus()}};
    const auto d = dm.distribute(b);
    REQUIRE(d.size() == 1);
    CHECK(d.devices == std::vector<dk::device>{dk::device::cpu(1)});
    CHECK(host_values(d[0].template get<"x">()) == b.x);
  }
  SECTION("replicate: a copy per device") {
    dk::device_manager<dk::fixed_detector, dk::balanced, dk::schemes::replicate> dm{dk::settings::without_environment(),
                                                                                    dk::fixed_detector{two_cpus()}};
    const auto d = dm.distribute(b);
    REQUIRE(d.size() == 2);
    CHECK(d.devices == std::vector<dk::device>{dk::device::cpu(0), dk::device::cpu(1)});
    CHECK(host_values(d[1].template get<"y">()) == b.y);
  }
  SECTION("shard_batch (ragged): 5 rows as 3 + 2") {
    dk::device_manager<dk::fixed_detector, dk::balanced, dk::shard_batch> dm{dk::settings::without_environment(),
                                                                             dk::fixed_detector{two_cpus()}};
    const auto d = dm.distribute(b);
    REQUIRE(d.size() == 2);
    CHECK(d.valid == std::vector<std::size_t>{3, 2});
    CHECK(host_values(d[1].template get<"y">()) == std::vector<std::int32_t>{30, 40});
    CHECK(dm.plan(dk::summarize_tree(b)).shares[1].count == 2);
  }
  SECTION("shard_batch with the error policy refuses 5 rows over 2 devices") {
    dk::device_manager<dk::fixed_detector, dk::balanced,
                       dk::schemes::basic_shard_batch<dk::schemes::uneven_batch::error>>
        dm{dk::settings::without_environment(), dk::fixed_detector{two_cpus()}};
    CHECK_THROWS_WITH((void)dm.distribute(b), Catch::Contains("5 rows does not divide into 2"));
    CHECK(dm.distribute(make_batch(4)).valid == std::vector<std::size_t>{2, 2});
  }
  SECTION("shard_batch with padding") {
    dk::device_manager<dk::fixed_detector, dk::balanced, dk::schemes::basic_shard_batch<dk::schemes::uneven_batch::pad>>
        dm{dk::settings::without_environment(), dk::fixed_detector{two_cpus()}};
    const auto d = dm.distribute(b);
    CHECK(d.pad == 1);
    CHECK(host_values(d[1].template get<"y">()) == std::vector<std::int32_t>{30, 40, 0});
  }
  SECTION("a custom scheme") {
    dk::device_manager<dk::fixed_detector, dk::balanced, whole_on_second> dm{dk::settings::without_environment(),
                                                                             dk::fixed_detector{two_cpus()}};
    const auto d = dm.distribute(b);
    CHECK(d.devices == std::vector<dk::device>{dk::device::cpu(1)});
  }
}

namespace {
/// A custom scheme with a row split of its own: 1, 5, 3 rows of a batch of 9 (say, devices of
/// unequal speed), on cpu:0, cpu:1, cpu:0.
struct one_five_three {
  static constexpr bool splits_batch = true;
  static constexpr std::string_view name() noexcept { return "one_five_three"; }
  static dk::distribution_plan plan(const dk::tree_summary& t, std::span<const dk::device> devices) {
    const std::size_t first = std::min<std::size_t>(1, t.batch);
    const std::size_t second = std::min<std::size_t>(5, t.batch - first);
    return {{{devices[0], false, 0, first, 0},
             {devices[1], false, first, second, 0},
             {devices[0], false, first + second, t.batch - first - second, 0}}};
  }
};
/// A custom split that forgets rows: 2 + 2 of any batch.
struct drops_rows {
  static constexpr bool splits_batch = true;
  static constexpr std::string_view name() noexcept { return "drops_rows"; }
  static dk::distribution_plan plan(const dk::tree_summary& t, std::span<const dk::device> devices) {
    const std::size_t n = std::min<std::size_t>(2, t.batch);
    return {{{devices[0], false, 0, n, 0}, {devices[1], false, n, std::min<std::size_t>(2, t.batch - n), 0}}};
  }
};
/// A custom split whose shares are out of order.
struct swapped_rows {
  static constexpr bool splits_batch = true;
  static constexpr std::string_view name() noexcept { return "swapped_rows"; }
  static dk::distribution_plan plan(const dk::tree_summary& t, std::span<const dk::device> devices) {
    const std::size_t half = t.batch / 2;
    return {{{devices[0], false, half, t.batch - half, 0}, {devices[1], false, 0, half, 0}}};
  }
};
}  // namespace

TEST_CASE("dm.distribute places a custom scheme's own row split", "[distribute][manager][split]") {
  const batch b = make_batch(9);
  dk::device_manager<dk::fixed_detector, dk::balanced, one_five_three> dm{dk::settings::without_environment(),
                                                                          dk::fixed_detector{two_cpus()}};
  const auto d = dm.distribute(b);
  REQUIRE(d.size() == 3);
  CHECK(d.valid == std::vector<std::size_t>{1, 5, 3});
  CHECK(d.devices == std::vector<dk::device>{dk::device::cpu(0), dk::device::cpu(1), dk::device::cpu(0)});
  CHECK(host_values(d[0].template get<"y">()) == std::vector<std::int32_t>{0});
  CHECK(host_values(d[1].template get<"y">()) == std::vector<std::int32_t>{10, 20, 30, 40, 50});
  CHECK(host_values(d[2].template get<"x">()) == std::vector<float>{6.5f, 7.5f, 8.5f});

  dk::device_manager<dk::fixed_detector, dk::balanced, drops_rows> short_dm{dk::settings::without_environment(),
                                                                            dk::fixed_detector{two_cpus()}};
  CHECK_THROWS_AS((void)short_dm.distribute(b), dk::config_error);
  CHECK_THROWS_WITH((void)short_dm.distribute(b),
                    Catch::Contains("'drops_rows'") && Catch::Contains("sum to 4 rows, but the batch has 9"));
  dk::device_manager<dk::fixed_detector, dk::balanced, swapped_rows> swapped_dm{dk::settings::without_environment(),
                                                                                dk::fixed_detector{two_cpus()}};
  CHECK_THROWS_WITH((void)swapped_dm.distribute(b),
                    Catch::Contains("share 0 (cpu:0) starts at row 4 instead of 0") && Catch::Contains("in order"));
}
