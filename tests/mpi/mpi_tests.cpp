// The MPI host backend of devicekit's collectives, on every rank of `mpirun -np N` (N = 2, 3, 4 in
// CTest): exact results of every collective on trees of mixed leaf types (Hana structs, tuples,
// pairs, arrays, vectors of subtrees, scalars, shaped arrays) and on flat leaf spans, with
// buckets of every kind (coalesced, one leaf per bucket, leaves larger than a bucket), the
// structure-mismatch error on every rank, argument errors that every rank reports alike, and
// scatter with unequal sizes.
#include "mpi_harness.hpp"

#include <devicekit/distribute/mpi.hpp>
#include <devicekit/distribute/tree_collectives.hpp>
#include <devicekit/tree/hana.hpp>

#include <boost/hana/define_struct.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <numeric>
#include <vector>

namespace dk = devicekit;

namespace {

int rank_ = 0;
int size_ = 1;

dk::mpi_communicator& comm_world() {
  static dk::mpi_communicator c;
  return c;
}

/// Bucket sizes every collective is run with: DDP's default (everything small coalesced), no
/// coalescing, and small buckets (several buckets, and leaves larger than one).
const std::array<std::size_t, 3> bucket_sizes = {dk::default_bucket_bytes, 0, 96};

/// A leaf of each kind: values depend on the rank and the index, so that a misplaced element
/// shows, and stay exact under the reductions below.
struct mixed {
  std::vector<std::int32_t> a;
  std::vector<double> b;
  std::vector<float> c;
  std::vector<std::int64_t> d;
  std::vector<std::uint8_t> e;
  std::vector<double> big;  // larger than the small buckets

  explicit mixed(int rank, std::size_t scale = 1)
      : a(5 * scale), b(3 * scale), c(7 * scale), d(2 * scale), e(4 * scale), big(40 * scale) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(100 * rank + static_cast<int>(i));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.5 * rank + static_cast<double>(i);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(rank) * 2.0f - static_cast<float>(i);
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = (std::int64_t{1} << 40) * rank + static_cast<std::int64_t>(i);
    for (std::size_t i = 0; i < e.size(); ++i) e[i] = static_cast<std::uint8_t>(rank + 3 * static_cast<int>(i));
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(rank * 1000) + static_cast<double>(i);
  }
  std::vector<dk::leaf_span> spans() {
    return {dk::leaf_span::of(a), dk::leaf_span::of(b), dk::leaf_span::of(c),
            dk::leaf_span::of(d), dk::leaf_span::of(e), dk::leaf_span::of(big)};
  }
  std::vector<dk::const_leaf_span> cspans() const {
    return {dk::const_leaf_span::of(a), dk::const_leaf_span::of(b), dk::const_leaf_span::of(c),
            dk::const_leaf_span::of(d), dk::const_leaf_span::of(e), dk::const_leaf_span::of(big)};
  }
};

/// Sum over ranks of f(rank).
template <class T, class F>
T over_ranks(F f) {
  T s{};
  for (int r = 0; r < size_; ++r) s = static_cast<T>(s + f(r));
  return s;
}

struct opaque_pair {
  std::int16_t x;
  char tag;
};

}  // namespace

MPI_TEST("all_reduce sum: exact on mixed leaf types, for every bucket size") {
  for (const auto bucket : bucket_sizes) {
    dk::mpi_communicator comm;
    comm.set_bucket_bytes(bucket);
    mixed m(rank_);
    auto leaves = m.spans();
    comm.all_reduce(leaves, dk::reduce_op::sum);
    bool ok = true;
    for (std::size_t i = 0; i < m.a.size(); ++i) {
      ok = ok && m.a[i] == over_ranks<std::int32_t>([&](int r) { return 100 * r + static_cast<int>(i); });
    }
    for (std::size_t i = 0; i < m.b.size(); ++i) {
      ok = ok && m.b[i] == over_ranks<double>([&](int r) { return 0.5 * r + static_cast<double>(i); });
    }
    for (std::size_t i = 0; i < m.c.size(); ++i) {
      ok = ok &&
           m.c[i] == over_ranks<float>([&](int r) { return static_cast<float>(r) * 2.0f - static_cast<float>(i); });
    }
    for (std::size_t i = 0; i < m.d.size(); ++i) {
      ok = ok && m.d[i] == over_ranks<std::int64_t>(
                               [&](int r) { return (std::int64_t{1} << 40) * r + static_cast<std::int64_t>(i); });
    }
    for (std::size_t i = 0; i < m.e.size(); ++i) {
      ok = ok && m.e[i] == over_ranks<std::uint8_t>([&](int r) { return r + 3 * static_cast<int>(i); });
    }
    for (std::size_t i = 0; i < m.big.size(); ++i) {
      ok = ok && m.big[i] == over_ranks<double>([&](int r) { return r * 1000.0 + static_cast<double>(i); });
    }
    CHECK(ok);
  }
}

MPI_TEST("all_reduce average, min, max, product") {
  dk::mpi_communicator comm;
  comm.set_bucket_bytes(64);
  std::vector<double> avg(9);
  std::vector<std::int32_t> iavg(5);
  for (std::size_t i = 0; i < avg.size(); ++i) avg[i] = 2.0 * rank_ + static_cast<double>(i);
  for (std::size_t i = 0; i < iavg.size(); ++i) iavg[i] = rank_ + static_cast<std::int32_t>(i);
  std::vector<dk::leaf_span> a = {dk::leaf_span::of(avg), dk::leaf_span::of(iavg)};
  comm.all_reduce(a, dk::reduce_op::average);
  // mean of 2r + i over r = 0..n-1 is (n - 1) + i, exactly; integers truncate like ncclAvg.
  for (std::size_t i = 0; i < avg.size(); ++i)
    CHECK_EQ(avg[i], static_cast<double>(size_ - 1) + static_cast<double>(i));
  for (std::size_t i = 0; i < iavg.size(); ++i) {
    CHECK_EQ(iavg[i], (size_ * (size_ - 1) / 2 + size_ * static_cast<int>(i)) / size_);
  }

  std::vector<std::int64_t> mn = {rank_ * 10L - 7, -rank_ * 1L}, mx = mn;
  std::vector<float> prod = {static_cast<float>(rank_ + 1), 2.0f};
  comm.all_reduce(std::vector<dk::leaf_span>{dk::leaf_span::of(mn)}, dk::reduce_op::min);
  comm.all_reduce(std::vector<dk::leaf_span>{dk::leaf_span::of(mx)}, dk::reduce_op::max);
  comm.all_reduce(std::vector<dk::leaf_span>{dk::leaf_span::of(prod)}, dk::reduce_op::product);
  CHECK_EQ(mn[0], -7L);
  CHECK_EQ(mn[1], -(size_ - 1L));
  CHECK_EQ(mx[0], (size_ - 1) * 10L - 7);
  CHECK_EQ(mx[1], 0L);
  float fact = 1;
  for (int r = 1; r <= size_; ++r) fact *= static_cast<float>(r);
  CHECK_EQ(prod[0], fact);
  CHECK_EQ(prod[1], static_cast<float>(1 << size_));
}

MPI_TEST("broadcast from the first and the last rank, opaque leaves included") {
  for (const int root : {0, size_ - 1}) {
    for (const auto bucket : bucket_sizes) {
      dk::mpi_communicator comm;
      comm.set_bucket_bytes(bucket);
      mixed m(rank_);
      std::vector<opaque_pair> op(3);
      for (std::size_t i = 0; i < op.size(); ++i)
        op[i] = {static_cast<std::int16_t>(rank_ * 7 + static_cast<int>(i)), static_cast<char>('a' + rank_)};
      auto leaves = m.spans();
      leaves.push_back(dk::leaf_span::of(op));
      CHECK(leaves.back().type == dk::element_type::opaque);
      comm.broadcast(leaves, root);
      const mixed want(root);
      CHECK(m.a == want.a);
      CHECK(m.b == want.b);
      CHECK(m.c == want.c);
      CHECK(m.d == want.d);
      CHECK(m.e == want.e);
      CHECK(m.big == want.big);
      for (std::size_t i = 0; i < op.size(); ++i) {
        CHECK_EQ(op[i].x, root * 7 + static_cast<int>(i));
        CHECK_EQ(op[i].tag, static_cast<char>('a' + root));
      }
    }
  }
}

MPI_TEST("all_gather: out holds every rank's leaf in rank order") {
  for (const auto bucket : bucket_sizes) {
    dk::mpi_communicator comm;
    comm.set_bucket_bytes(bucket);
    const mixed in(rank_);
    mixed out(0, static_cast<std::size_t>(size_));
    comm.all_gather(in.cspans(), out.spans());
    bool ok = true;
    for (int r = 0; r < size_; ++r) {
      const mixed want(r);
      const auto at = [&](const auto& v, const auto& w) {
        for (std::size_t i = 0; i < w.size(); ++i) ok = ok && v[static_cast<std::size_t>(r) * w.size() + i] == w[i];
      };
      at(out.a, want.a);
      at(out.b, want.b);
      at(out.c, want.c);
      at(out.d, want.d);
      at(out.e, want.e);
      at(out.big, want.big);
    }
    CHECK(ok);
  }
}

MPI_TEST("reduce_scatter: each rank keeps its part of the sum (and of the average)") {
  for (const auto bucket : bucket_sizes) {
    dk::mpi_communicator comm;
    comm.set_bucket_bytes(bucket);
    const mixed in(rank_, static_cast<std::size_t>(size_));
    mixed out(0);
    comm.reduce_scatter(in.cspans(), out.spans(), dk::reduce_op::sum);
    bool ok = true;
    const auto part = [&](const auto& v, const auto& full_of_rank) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      for (std::size_t i = 0; i < v.size(); ++i) {
        T s{};
        for (int r = 0; r < size_; ++r)
          s = static_cast<T>(s + full_of_rank(r)[static_cast<std::size_t>(rank_) * v.size() + i]);
        ok = ok && v[i] == s;
      }
    };
    part(out.a, [&](int r) { return mixed(r, static_cast<std::size_t>(size_)).a; });
    part(out.b, [&](int r) { return mixed(r, static_cast<std::size_t>(size_)).b; });
    part(out.c, [&](int r) { return mixed(r, static_cast<std::size_t>(size_)).c; });
    part(out.d, [&](int r) { return mixed(r, static_cast<std::size_t>(size_)).d; });
    part(out.e, [&](int r) { return mixed(r, static_cast<std::size_t>(size_)).e; });
    part(out.big, [&](int r) { return mixed(r, static_cast<std::size_t>(size_)).big; });
    CHECK(ok);
  }
  dk::mpi_communicator comm;
  std::vector<double> in(4 * static_cast<std::size_t>(size_));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = 2.0 * rank_ + static_cast<double>(i);
  std::vector<double> out(4);
  comm.reduce_scatter(std::vector<dk::const_leaf_span>{dk::const_leaf_span::of(in)},
                      std::vector<dk::leaf_span>{dk::leaf_span::of(out)}, dk::reduce_op::average);
  for (std::size_t i = 0; i < out.size(); ++i) {
    CHECK_EQ(out[i], static_cast<double>(size_ - 1) + static_cast<double>(static_cast<std::size_t>(rank_) * 4 + i));
  }
}

MPI_TEST("scatter with unequal sizes: rank r receives its own count, in rank order") {
  for (const int root : {0, size_ - 1}) {
    for (const auto bucket : bucket_sizes) {
      dk::mpi_communicator comm;
      comm.set_bucket_bytes(bucket);
      // Rank r receives r + 1 ints, 2r doubles (none on rank 0), and 3 bytes.
      const auto n_a = [](int r) { return static_cast<std::size_t>(r + 1); };
      const auto n_b = [](int r) { return static_cast<std::size_t>(2 * r); };
      std::size_t total_a = 0, total_b = 0;
      for (int r = 0; r < size_; ++r) {
        total_a += n_a(r);
        total_b += n_b(r);
      }
      std::vector<std::int32_t> src_a;
      std::vector<double> src_b;
      std::vector<std::uint8_t> src_c;
      if (rank_ == root) {
        src_a.resize(total_a);
        src_b.resize(total_b);
        src_c.resize(3 * static_cast<std::size_t>(size_));
        std::iota(src_a.begin(), src_a.end(), 1000);
        for (std::size_t i = 0; i < total_b; ++i) src_b[i] = 0.25 * static_cast<double>(i);
        std::iota(src_c.begin(), src_c.end(), std::uint8_t{7});
      }
      std::vector<std::int32_t> a(n_a(rank_), -1);
      std::vector<double> b(n_b(rank_), -1.0);
      std::vector<std::uint8_t> c(3, 0);
      comm.scatter(std::vector<dk::const_leaf_span>{dk::const_leaf_span::of(src_a), dk::const_leaf_span::of(src_b),
                                                    dk::const_leaf_span::of(src_c)},
                   std::vector<dk::leaf_span>{dk::leaf_span::of(a), dk::leaf_span::of(b), dk::leaf_span::of(c)}, root);
      std::size_t off_a = 0, off_b = 0;
      for (int r = 0; r < rank_; ++r) {
        off_a += n_a(r);
        off_b += n_b(r);
      }
      bool ok = true;
      for (std::size_t i = 0; i < a.size(); ++i) ok = ok && a[i] == static_cast<std::int32_t>(1000 + off_a + i);
      for (std::size_t i = 0; i < b.size(); ++i) ok = ok && b[i] == 0.25 * static_cast<double>(off_b + i);
      for (std::size_t i = 0; i < c.size(); ++i)
        ok = ok && c[i] == static_cast<std::uint8_t>(7 + 3 * rank_ + static_cast<int>(i));
      CHECK(ok);
    }
  }
}

MPI_TEST("structure mismatch: every rank throws, names the ranks, and the communicator still works") {
  dk::mpi_communicator comm;
  std::vector<float> x(4, 1.0f), extra(2, 1.0f);
  std::vector<dk::leaf_span> leaves = {dk::leaf_span::of(x)};
  if (rank_ == 1) leaves.push_back(dk::leaf_span::of(extra));  // rank 1 passes one more leaf
  CHECK_THROWS_WITH(comm.all_reduce(leaves), dk::structure_mismatch_error, "rank 1: 2 leaves");
  CHECK_THROWS_WITH(comm.all_reduce(leaves), dk::structure_mismatch_error, "nothing was sent");

  // Same leaf count, different sizes on the last rank.
  std::vector<double> y(rank_ == size_ - 1 ? 5 : 4, 1.0);
  CHECK_THROWS_WITH(comm.all_reduce(std::vector<dk::leaf_span>{dk::leaf_span::of(y)}), dk::structure_mismatch_error,
                    "all_reduce on rank " + std::to_string(rank_));

  // Different roots.
  std::vector<int> z(3, rank_);
  CHECK_THROWS_WITH(comm.broadcast(std::vector<dk::leaf_span>{dk::leaf_span::of(z)}, rank_ == 0 ? 0 : 1),
                    dk::structure_mismatch_error, "root");

  // After the errors, the ranks are still in step.
  std::vector<float> ok(3, 2.0f);
  comm.all_reduce(std::vector<dk::leaf_span>{dk::leaf_span::of(ok)});
  CHECK_EQ(ok[2], 2.0f * static_cast<float>(size_));
}

MPI_TEST("argument errors: the same config_error on every rank, no hang") {
  dk::mpi_communicator comm;
  std::vector<opaque_pair> op(2);
  CHECK_THROWS_WITH(comm.all_reduce(std::vector<dk::leaf_span>{dk::leaf_span::of(op)}), dk::config_error,
                    "opaque elements");
  std::vector<double> in(3), out(3 * static_cast<std::size_t>(size_) + 1);
  CHECK_THROWS_WITH(comm.all_gather(std::vector<dk::const_leaf_span>{dk::const_leaf_span::of(in)},
                                    std::vector<dk::leaf_span>{dk::leaf_span::of(out)}),
                    dk::config_error, "must hold");
  std::vector<int> src(rank_ == 0 ? 100 : 0), dst(2);  // the outputs add up to 2n, not 100
  CHECK_THROWS_WITH(comm.scatter(std::vector<dk::const_leaf_span>{dk::const_leaf_span::of(src)},
                                 std::vector<dk::leaf_span>{dk::leaf_span::of(dst)}, 0),
                    dk::config_error, "add up to " + std::to_string(2 * size_));
  std::vector<int> w(1);
  CHECK_THROWS_WITH(comm.broadcast(std::vector<dk::leaf_span>{dk::leaf_span::of(w)}, size_), dk::config_error,
                    "not a rank");
  comm.barrier();
}

MPI_TEST("an MPI failure becomes communication_error naming the operation, call, rank and MPI's text") {
  dk::mpi_communicator comm;
  std::vector<int> v(4, 1);
  // Past the argument checks, straight to the backend: MPI itself refuses the root (every rank
  // does, so none waits). The communicator returns errors instead of aborting the job.
  comm.backend().set_operation("broadcast");
  bool thrown = false;
  try {
    comm.backend().broadcast(0, v.data(), v.size(), dk::element_type::int32, size_ + 5);
  } catch (const dk::communication_error& e) {
    thrown = true;
    CHECK_EQ(e.backend(), std::string("MPI"));
    CHECK_EQ(e.operation(), std::string("broadcast"));
    CHECK_EQ(e.call(), std::string("MPI_Bcast"));
    CHECK_EQ(e.rank(), rank_);
    CHECK_EQ(e.size(), size_);
    CHECK(e.code() != 0);
    CHECK(!e.detail().empty());
    const std::string what = e.what();
    CHECK(what.find("MPI broadcast: MPI_Bcast failed on rank " + std::to_string(rank_) + " of " +
                    std::to_string(size_)) != std::string::npos);
  }
  CHECK(thrown);
  comm.all_reduce(std::vector<dk::leaf_span>{dk::leaf_span::of(v)});  // still usable
  CHECK_EQ(v[0], size_);
}

MPI_TEST("empty leaf lists and zero-length leaves") {
  dk::mpi_communicator comm;
  comm.all_reduce(std::vector<dk::leaf_span>{});
  std::vector<double> none, one(1, 1.0);
  comm.all_reduce(std::vector<dk::leaf_span>{dk::leaf_span::of(none), dk::leaf_span::of(one)});
  CHECK_EQ(one[0], static_cast<double>(size_));
  comm.broadcast(std::vector<dk::leaf_span>{dk::leaf_span::of(none)}, 0);
}

// --- trees ------------------------------------------------------------------------------------------

struct layer {
  BOOST_HANA_DEFINE_STRUCT(layer, (std::vector<float>, w), (std::array<double, 3>, b), (std::int64_t, step));
};
struct other_layer {  // the same leaf types under other member names
  BOOST_HANA_DEFINE_STRUCT(other_layer, (std::vector<float>, weights), (std::array<double, 3>, bias),
                           (std::int64_t, step));
};

using model = std::tuple<layer, std::pair<std::vector<std::int32_t>, std::vector<std::uint8_t>>,
                         std::vector<std::vector<double>>>;

/// A model whose every value depends on `rank` (and `scale` multiplies every leaf's length).
model make_model(int rank, std::size_t scale = 1, std::size_t layers = 3) {
  model m;
  auto& l = std::get<0>(m);
  l.w.resize(6 * scale);
  for (std::size_t i = 0; i < l.w.size(); ++i) l.w[i] = static_cast<float>(rank) + 0.5f * static_cast<float>(i);
  for (std::size_t i = 0; i < 3; ++i) l.b[i] = 10.0 * rank - static_cast<double>(i);
  l.step = 1000 + rank;
  auto& [ints, bytes] = std::get<1>(m);
  ints.resize(4 * scale);
  bytes.resize(5 * scale);
  for (std::size_t i = 0; i < ints.size(); ++i) ints[i] = -rank * 3 + static_cast<std::int32_t>(i);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(2 * rank + static_cast<int>(i));
  auto& stack = std::get<2>(m);
  stack.resize(layers);
  for (std::size_t k = 0; k < layers; ++k) {
    stack[k].resize((k + 1) * 7 * scale);
    for (std::size_t i = 0; i < stack[k].size(); ++i) stack[k][i] = 100.0 * rank + static_cast<double>(k * 1000 + i);
  }
  return m;
}

/// Applies f(leaf of a, leaf of b) over two models and says whether every call returned true.
template <class F>
bool all_leaves(const model& a, const model& b, F f) {
  bool ok = true;
  dk::for_each_leaf([&](const auto& x, const auto& y) { ok = ok && f(x, y); }, a, b);
  return ok;
}

MPI_TEST("trees: all_reduce sum of a Hana struct + pair + vector of layers, scalars included") {
  for (const auto bucket : bucket_sizes) {
    dk::mpi_communicator comm;
    comm.set_bucket_bytes(bucket);
    model m = make_model(rank_);
    dk::all_reduce(comm, m);
    // The expected sum, built leaf by leaf from every rank's model.
    model want = make_model(0);
    for (int r = 1; r < size_; ++r) {
      const model o = make_model(r);
      dk::for_each_leaf(
          [](auto& w, const auto& x) {
            if constexpr (std::is_arithmetic_v<std::remove_cvref_t<decltype(w)>>) {
              w += x;
            } else {
              for (std::size_t i = 0; i < std::size(w); ++i) w[i] += x[i];
            }
          },
          want, o);
    }
    CHECK(all_leaves(m, want, [](const auto& x, const auto& y) {
      if constexpr (std::is_arithmetic_v<std::remove_cvref_t<decltype(x)>>) {
        return x == y;
      } else {
        return std::equal(std::begin(x), std::end(x), std::begin(y), std::end(y));
      }
    }));
    CHECK_EQ(std::get<0>(m).step, 1000L * size_ + size_ * (size_ - 1) / 2);
  }
}

MPI_TEST("trees: all_reduce average and max; broadcast from the last rank") {
  dk::mpi_communicator comm;
  comm.set_bucket_bytes(64);
  model m = make_model(rank_);
  dk::all_reduce(comm, std::get<2>(m), dk::reduce_op::average);  // a vector of leaves is a tree too
  for (std::size_t k = 0; k < std::get<2>(m).size(); ++k) {
    const auto& v = std::get<2>(m)[k];
    bool ok = true;
    for (std::size_t i = 0; i < v.size(); ++i)
      ok = ok && v[i] == 50.0 * (size_ - 1) + static_cast<double>(k * 1000 + i);
    CHECK(ok);
  }
  auto pair = std::get<1>(make_model(rank_));
  dk::all_reduce(comm, pair, dk::reduce_op::max);
  CHECK_EQ(pair.first[0], 0);  // -3 r is largest on rank 0
  CHECK_EQ(static_cast<int>(pair.second[4]), 2 * (size_ - 1) + 4);

  model b = make_model(rank_);
  dk::broadcast(comm, b, size_ - 1);
  const model want = make_model(size_ - 1);
  CHECK(all_leaves(b, want, [](const auto& x, const auto& y) {
    if constexpr (std::is_arithmetic_v<std::remove_cvref_t<decltype(x)>>) {
      return x == y;
    } else {
      return std::equal(std::begin(x), std::end(x), std::begin(y), std::end(y));
    }
  }));
}

MPI_TEST("trees: all_gathered and reduce_scatter keep the structure, rank-major") {
  for (const auto bucket : bucket_sizes) {
    dk::mpi_communicator comm;
    comm.set_bucket_bytes(bucket);
    const model m = make_model(rank_);
    const auto g = dk::all_gathered(comm, m);
    CHECK(dk::same_structure(g, m));
    CHECK_EQ(std::get<0>(g).template get<"step">().size(),
             static_cast<std::size_t>(size_));  // a scalar gathers into a vector
    bool ok = true;
    for (int r = 0; r < size_; ++r) {
      const model want = make_model(r);
      dk::for_each_leaf(
          [&](const auto& got, const auto& w) {
            using W = std::remove_cvref_t<decltype(w)>;
            if constexpr (std::is_arithmetic_v<W>) {
              ok = ok && got[static_cast<std::size_t>(r)] == w;
            } else {
              for (std::size_t i = 0; i < std::size(w); ++i)
                ok = ok && got[static_cast<std::size_t>(r) * std::size(w) + i] == w[i];
            }
          },
          g, want);
    }
    CHECK(ok);

    // reduce_scatter of the gathered tree: rank r keeps the sum over ranks of part r, which is
    // size() x (rank r's original model).
    model mine = make_model(0);
    dk::reduce_scatter(comm, g, mine, dk::reduce_op::sum);
    const model orig = make_model(rank_);
    CHECK(all_leaves(mine, orig, [](const auto& x, const auto& y) {
      if constexpr (std::is_arithmetic_v<std::remove_cvref_t<decltype(x)>>) {
        return x == static_cast<std::remove_cvref_t<decltype(x)>>(y * size_);
      } else {
        for (std::size_t i = 0; i < std::size(x); ++i) {
          if (x[i] != static_cast<std::remove_cvref_t<decltype(x[i])>>(y[i] * size_)) return false;
        }
        return true;
      }
    }));
  }
}

MPI_TEST("trees: scatter a batch unevenly (split_counts) from the root") {
  using batch = std::tuple<std::vector<float>, std::vector<std::int64_t>>;
  const std::size_t rows = 10;  // 10 rows over n ranks: uneven for n = 4 (3, 3, 2, 2)
  const auto counts = dk::split_counts(rows, static_cast<std::size_t>(size_));
  std::size_t begin = 0;
  for (int r = 0; r < rank_; ++r) begin += counts[static_cast<std::size_t>(r)];
  const int root = size_ - 1;
  batch full;
  if (rank_ == root) {
    std::get<0>(full).resize(rows * 4);  // 4 features per row
    std::get<1>(full).resize(rows);
    for (std::size_t i = 0; i < rows * 4; ++i) std::get<0>(full)[i] = 0.5f * static_cast<float>(i);
    for (std::size_t i = 0; i < rows; ++i) std::get<1>(full)[i] = static_cast<std::int64_t>(i) * 11;
  }
  const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
  batch part{std::vector<float>(mine * 4, -1.f), std::vector<std::int64_t>(mine, -1)};
  dk::scatter(comm_world(), full, part, root);
  bool ok = true;
  for (std::size_t i = 0; i < mine * 4; ++i)
    ok = ok && std::get<0>(part)[i] == 0.5f * static_cast<float>(begin * 4 + i);
  for (std::size_t i = 0; i < mine; ++i) ok = ok && std::get<1>(part)[i] == static_cast<std::int64_t>(begin + i) * 11;
  CHECK(ok);
  CHECK(dk::split_counts(10, 4) == (std::vector<std::size_t>{3, 3, 2, 2}));
}

MPI_TEST("trees: a different structure on one rank fails on every rank") {
  dk::mpi_communicator comm;
  // One more layer on the last rank (a vector node of another length).
  model m = make_model(rank_, 1, rank_ == size_ - 1 ? 4 : 3);
  CHECK_THROWS_WITH(dk::all_reduce(comm, m), dk::structure_mismatch_error, "nothing was sent");
  // Same leaf types and sizes, other member names: the structure hash tells them apart.
  std::vector<float> w(6, 1.f);
  if (rank_ == 0) {
    other_layer o{w, {1, 2, 3}, 4};
    CHECK_THROWS_WITH(dk::all_reduce(comm, o), dk::structure_mismatch_error, "rank 0:");
  } else {
    layer l{w, {1, 2, 3}, 4};
    CHECK_THROWS_WITH(dk::all_reduce(comm, l), dk::structure_mismatch_error, "rank 0:");
  }
  // A leaf in device memory on rank 1: every rank refuses, rank 1 names the leaf.
  float x[4] = {1, 2, 3, 4};
  auto leaf =
      rank_ == 1 ? dk::device_array<float>::view(x, 4, dk::device::cuda(0)) : dk::device_array<float>::view(x, 4);
  std::tuple<std::vector<float>, dk::device_array<float>> t{w, leaf};
  if (rank_ == 1) {
    CHECK_THROWS_WITH(dk::all_reduce(comm, t), dk::config_error, "leaf '[1]' is in cuda:0 memory");
  } else {
    CHECK_THROWS_WITH(dk::all_reduce(comm, t), dk::config_error, "rank(s) 1 passed leaves");
  }
  // Still in step afterwards.
  model ok = make_model(rank_);
  dk::broadcast(comm, ok, 0);
  CHECK_EQ(std::get<0>(ok).step, 1000L);
}

#if DEVICEKIT_HAS_MDSPAN
MPI_TEST("trees: shaped arrays (mdspan extents) are leaves like any other") {
  dk::mpi_communicator comm;
  using ext = dk::md::dextents<std::size_t, 2>;
  std::tuple<dk::shaped_array<float, ext>, std::vector<double>> t{dk::shaped_array<float, ext>(ext(3, 4)), {1.0, 2.0}};
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 4; ++j)
      std::get<0>(t)(i, j) = static_cast<float>(rank_ * 100) + static_cast<float>(i * 4 + j);
  }
  dk::all_reduce(comm, t);
  const float base = static_cast<float>(100 * size_ * (size_ - 1) / 2);
  CHECK_EQ(std::get<0>(t)(2, 3), base + static_cast<float>(size_ * 11));
  CHECK_EQ(std::get<1>(t)[1], 2.0 * size_);
}
#endif

// --- reduced-precision leaves: widened to float, reduced, rounded once ----------------------------

namespace {

/// Rank r's value i: multiples of 1/4 in [-0.5, 0.5], so that float sums over any number of ranks
/// are exact (any order) and only the final rounding to T remains.
float small_value(int rank, std::size_t i) {
  return 0.25f * static_cast<float>((rank + static_cast<int>(i)) % 5) - 0.5f + static_cast<float>(i % 3);
}

/// What every rank must hold after the reduction: the exact float result over all ranks,
/// narrowed to T once (the average divided in float first).
template <class T>
float expected_reduced(std::size_t i, dk::reduce_op op) {
  float acc = dk::widen(dk::narrow_to<T>(small_value(0, i)));
  for (int r = 1; r < size_; ++r) {
    const float x = dk::widen(dk::narrow_to<T>(small_value(r, i)));
    acc = op == dk::reduce_op::max ? std::max(acc, x) : acc + x;
  }
  if (op == dk::reduce_op::average) acc /= static_cast<float>(size_);
  return dk::widen(dk::narrow_to<T>(acc));
}

template <class T>
void check_reduced_all_reduce(const char* name) {
  auto& comm = comm_world();
  for (const std::size_t bucket : bucket_sizes) {
    comm.set_bucket_bytes(bucket);
    for (const auto op : {dk::reduce_op::sum, dk::reduce_op::average, dk::reduce_op::max}) {
      std::tuple<std::vector<T>, std::vector<float>, std::vector<T>> t;
      for (std::size_t i = 0; i < 37; ++i) std::get<0>(t).push_back(dk::narrow_to<T>(small_value(rank_, i)));
      std::get<1>(t).assign(5, static_cast<float>(rank_));
      for (std::size_t i = 0; i < 3; ++i) std::get<2>(t).push_back(dk::narrow_to<T>(small_value(rank_, i)));
      dk::all_reduce(comm, t, op);
      int wrong = 0;
      for (std::size_t i = 0; i < std::get<0>(t).size(); ++i) {
        if (dk::widen(std::get<0>(t)[i]) != expected_reduced<T>(i, op)) ++wrong;
      }
      for (std::size_t i = 0; i < std::get<2>(t).size(); ++i) {
        if (dk::widen(std::get<2>(t)[i]) != expected_reduced<T>(i, op)) ++wrong;
      }
      if (wrong != 0) std::fprintf(stderr, "%s: %d wrong elements (bucket %zu, op %d)\n", name, wrong, bucket, int(op));
      CHECK_EQ(wrong, 0);
    }
  }
  comm.set_bucket_bytes(dk::default_bucket_bytes);
}

}  // namespace

MPI_TEST("reduced precision: all_reduce of float16, bfloat16 and fp8 leaves, in float, rounded once") {
  check_reduced_all_reduce<dk::float16_t>("float16");
  check_reduced_all_reduce<dk::bfloat16_t>("bfloat16");
  check_reduced_all_reduce<dk::float8_e4m3_t>("float8_e4m3fn");
  check_reduced_all_reduce<dk::float8_e5m2_t>("float8_e5m2");
}

MPI_TEST("reduced precision: reduce_scatter of bfloat16, broadcast and all_gather of float16 as bytes") {
  auto& comm = comm_world();
  const auto n = static_cast<std::size_t>(size_);
  constexpr std::size_t part = 6;
  std::vector<dk::bfloat16_t> in;
  for (std::size_t i = 0; i < part * n; ++i) in.push_back(dk::narrow_to<dk::bfloat16_t>(small_value(rank_, i)));
  std::vector<dk::bfloat16_t> out(part);
  comm.reduce_scatter(std::vector<dk::const_leaf_span>{dk::const_leaf_span::of(in)},
                      std::vector<dk::leaf_span>{dk::leaf_span::of(out)});
  for (std::size_t i = 0; i < part; ++i) {
    CHECK_EQ(dk::widen(out[i]),
             expected_reduced<dk::bfloat16_t>(static_cast<std::size_t>(rank_) * part + i, dk::reduce_op::sum));
  }
  std::vector<dk::float16_t> h(5);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = dk::narrow_to<dk::float16_t>(small_value(rank_, i) + 0.1f);
  std::vector<dk::float16_t> all(h.size() * n);
  comm.all_gather(std::vector<dk::const_leaf_span>{dk::const_leaf_span::of(h)},
                  std::vector<dk::leaf_span>{dk::leaf_span::of(all)});
  for (std::size_t r = 0; r < n; ++r) {
    CHECK_EQ(dk::widen(all[r * h.size() + 4]),
             dk::widen(dk::narrow_to<dk::float16_t>(small_value(static_cast<int>(r), 4) + 0.1f)));
  }
  comm.broadcast(std::vector<dk::leaf_span>{dk::leaf_span::of(h)}, size_ - 1);
  CHECK_EQ(dk::widen(h[2]), dk::widen(dk::narrow_to<dk::float16_t>(small_value(size_ - 1, 2) + 0.1f)));
  // The backend itself, as a custom caller would use it: a float16 broadcast moves bytes.
  comm.backend().broadcast(0, h.data(), h.size(), dk::element_type::float16, 0);
  CHECK_EQ(dk::widen(h[1]), dk::widen(dk::narrow_to<dk::float16_t>(small_value(size_ - 1, 1) + 0.1f)));
}

MPI_TEST("all_reduce of a bucket larger than a slice: 1 KiB float leaves, packed and sliced") {
  // Two and a half slices of mpi_backend::slice_bytes() in one bucket: reduced slice by slice,
  // each slice packed and unpacked from the start of the staging buffer, the last one partial;
  // every leaf must come back whole.
  auto& comm = comm_world();
  const std::size_t count = dk::detail::mpi_backend::slice_bytes() * 5 / 2 / 1024;
  static_assert(dk::detail::mpi_backend::slice_bytes() * 5 / 2 < dk::default_bucket_bytes);
  std::vector<std::vector<float>> leaves(count, std::vector<float>(256));
  for (std::size_t l = 0; l < leaves.size(); ++l) {
    for (std::size_t i = 0; i < 256; ++i)
      leaves[l][i] = static_cast<float>(rank_ + 1) * static_cast<float>(l * 3 + i % 7);
  }
  dk::all_reduce(comm, leaves);
  const float ranks_sum = static_cast<float>(size_ * (size_ + 1) / 2);
  int wrong = 0;
  for (std::size_t l = 0; l < leaves.size(); ++l) {
    for (std::size_t i = 0; i < 256; ++i) wrong += leaves[l][i] != ranks_sum * static_cast<float>(l * 3 + i % 7);
  }
  CHECK_EQ(wrong, 0);
}

namespace {

/// Rank r's element j of leaf i in the ring tests: small integers, so that sums, averages and
/// float products over up to four ranks are exact in any order; `for_product` keeps float
/// factors in 1..3 (integer products wrap).
template <class T>
T ring_value(int r, std::size_t i, std::size_t j, bool for_product) {
  const auto k = static_cast<std::size_t>(r) * 37 + i * 13 + j;
  if (for_product && std::is_floating_point_v<T>) return static_cast<T>(1 + k % 3);
  if constexpr (std::is_signed_v<T>) return static_cast<T>(static_cast<long>(k % 101) - 50);
  // Sums of up to four ranks stay below 256: Open MPI's AVX reductions saturate 8-bit sums where
  // C's unsigned arithmetic (and the ring) wraps, and the last, packed slice goes through them.
  return static_cast<T>(k % 63);
}

/// The all-reduce of ring_value over every rank as MPI computes it: integers wrap, an average
/// divides the sum once.
template <class T>
T ring_expected(std::size_t i, std::size_t j, dk::reduce_op op) {
  const bool product = op == dk::reduce_op::product;
  T acc = ring_value<T>(0, i, j, product);
  for (int r = 1; r < size_; ++r) {
    const T v = ring_value<T>(r, i, j, product);
    switch (op) {
      case dk::reduce_op::min: acc = v < acc ? v : acc; break;
      case dk::reduce_op::max: acc = acc < v ? v : acc; break;
      case dk::reduce_op::product:
        acc = static_cast<T>(std::is_integral_v<T>
                                 ? static_cast<T>(static_cast<std::uint64_t>(acc) * static_cast<std::uint64_t>(v))
                                 : static_cast<T>(acc * v));
        break;
      default:
        acc = static_cast<T>(std::is_integral_v<T>
                                 ? static_cast<T>(static_cast<std::uint64_t>(acc) + static_cast<std::uint64_t>(v))
                                 : static_cast<T>(acc + v));
    }
  }
  return op == dk::reduce_op::average ? static_cast<T>(acc / static_cast<T>(size_)) : acc;
}

/// A little over 2 MiB of leaves of uneven sizes (up to 6 KB), every eleventh empty: two slices
/// of a MiB whose ring segments end inside leaves, and a last slice of 84 to 102 KiB, small
/// enough on two or more ranks to be packed instead.
template <class T>
std::vector<std::vector<T>> ring_tree(dk::reduce_op op) {
  std::vector<std::vector<T>> tree;
  std::size_t bytes = 0;
  for (std::size_t i = 0; bytes < (std::size_t{2} << 20) + (std::size_t{96} << 10); ++i) {
    const std::size_t n = i % 11 == 5 ? 0 : 1 + (i * 7919) % (6000 / sizeof(T) + 1);
    std::vector<T> leaf(n);
    for (std::size_t j = 0; j < n; ++j) leaf[j] = ring_value<T>(rank_, i, j, op == dk::reduce_op::product);
    bytes += n * sizeof(T);
    tree.push_back(std::move(leaf));
  }
  return tree;
}

template <class T>
void check_ring(dk::reduce_op op) {
  auto tree = ring_tree<T>(op);
  dk::all_reduce(comm_world(), tree, op);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < tree.size(); ++i) {
    for (std::size_t j = 0; j < tree[i].size(); ++j) wrong += tree[i][j] != ring_expected<T>(i, j, op) ? 1 : 0;
  }
  if (wrong != 0) std::printf("rank %d: %zu wrong elements (op %d)\n", rank_, wrong, static_cast<int>(op));
  CHECK_EQ(wrong, std::size_t{0});
}

}  // namespace

MPI_TEST("all_reduce of many leaves where they lie: the ring over MPI datatypes, every op") {
  using op = dk::reduce_op;
  for (const op o : {op::sum, op::average, op::min, op::max, op::product}) check_ring<float>(o);
  for (const op o : {op::sum, op::min, op::max, op::product}) check_ring<std::int32_t>(o);
  check_ring<double>(op::sum);
  check_ring<std::uint8_t>(op::sum);
  check_ring<std::uint8_t>(op::product);  // wraps
  check_ring<std::int64_t>(op::product);
  check_ring<std::int16_t>(op::average);  // integers truncate
}

MPI_TEST("the ring takes large slices of MPI types and declines the rest, sending nothing") {
  auto& backend = comm_world().backend();
  using backend_type = std::remove_reference_t<decltype(backend)>;
  const std::size_t per_rank = backend_type::ring_min_segment_bytes / sizeof(float);
  std::vector<std::vector<float>> large(4, std::vector<float>(per_rank * static_cast<std::size_t>(size_) / 4 + 1));
  std::vector<std::vector<float>> small(4, std::vector<float>(per_rank * static_cast<std::size_t>(size_) / 4 - 1));
  std::vector<dk::float16_t> halves(per_rank * static_cast<std::size_t>(size_));
  auto spans = [](auto& leaves) {
    std::vector<dk::leaf_span> s;
    for (auto& l : leaves) s.push_back(dk::leaf_span::of(l));
    return s;
  };
  const std::vector<std::size_t> all = {0, 1, 2, 3};
  for (auto& l : large) std::fill(l.begin(), l.end(), static_cast<float>(rank_ + 1));
  CHECK(backend.all_reduce_leaves(spans(large), all, dk::element_type::float32, dk::reduce_op::sum));
  CHECK_EQ(large[3].back(), static_cast<float>(size_ * (size_ + 1) / 2));
  for (auto& l : small) std::fill(l.begin(), l.end(), 1.0f);
  CHECK(!backend.all_reduce_leaves(spans(small), all, dk::element_type::float32, dk::reduce_op::sum));
  CHECK_EQ(small[0][0], 1.0f);  // untouched
  const std::vector<dk::leaf_span> h = {dk::leaf_span::of(halves)};
  CHECK(!backend.all_reduce_leaves(h, std::vector<std::size_t>{0}, dk::element_type::float16, dk::reduce_op::sum));
}

int main(int argc, char** argv) {
  dk::mpi_environment env(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (size_ < 2) {
    if (rank_ == 0) std::printf("run me under mpirun with 2 or more processes\n");
    return 2;
  }
  const int failures = mpitest::run_all(MPI_COMM_WORLD);
  return failures == 0 ? 0 : 1;
}
