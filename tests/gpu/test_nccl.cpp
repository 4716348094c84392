// NCCL communicators on the GPUs present: a one-rank communicator on cuda:0 (what a single-GPU
// machine runs), and with two or more GPUs ncclCommInitAll across all of them, with exact
// results for every collective on leaves of mixed types, bucketed and not.
#include <catch2/catch.hpp>

#include <devicekit/core/graph.hpp>
#include <devicekit/distribute/nccl.hpp>
#include <devicekit/distribute/tree_collectives.hpp>
#include <memory>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#if DEVICEKIT_HAS_NCCL

namespace dk = devicekit;

namespace {

/// A device buffer holding a copy of a host vector (and copied back by host()).
template <class T>
class dev_vec {
 public:
  dev_vec(int ordinal, const std::vector<T>& h) : ordinal_(ordinal), n_(h.size()) {
    dk::scoped_device on(ordinal);
    DEVICEKIT_CUDA_CHECK(cudaMalloc(&p_, std::max<std::size_t>(n_, 1) * sizeof(T)));
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  dev_vec(int ordinal, std::size_t n, T fill) : dev_vec(ordinal, std::vector<T>(n, fill)) {}
  dev_vec(const dev_vec&) = delete;
  dev_vec& operator=(const dev_vec&) = delete;
  ~dev_vec() { (void)cudaFree(p_); }
  [[nodiscard]] std::vector<T> host() const {
    std::vector<T> h(n_);
    DEVICEKIT_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  [[nodiscard]] dk::leaf_span span() { return dk::leaf_span::of(std::span<T>(p_, n_)); }
  [[nodiscard]] dk::const_leaf_span cspan() const { return dk::const_leaf_span::of(std::span<const T>(p_, n_)); }

 private:
  int ordinal_;
  std::size_t n_;
  T* p_ = nullptr;
};

template <class T>
std::vector<T> ramp(std::size_t n, T start, T step) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(start + static_cast<T>(i) * step);
  return v;
}

/// Every GPU this process sees; with fewer than two, a warning that the multi-GPU test has nothing
/// to run on (the caller returns).
std::vector<dk::device> every_gpu() {
  int n = 0;
  DEVICEKIT_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) WARN("only " << n << " GPU: the multi-GPU NCCL test needs two or more");
  std::vector<dk::device> devs;
  for (int g = 0; g < n; ++g) devs.push_back(dk::device::cuda(g));
  return devs;
}

}  // namespace

TEST_CASE("a one-rank NCCL communicator on the device present: every collective, every bucket size", "[nccl][gpu]") {
  const dk::device dev = dk::device::cuda(0);
  for (const std::size_t bucket : {dk::default_bucket_bytes, std::size_t{0}, std::size_t{64}}) {
    auto comm = dk::nccl_communicator::one_rank(dev);
    comm.set_bucket_bytes(bucket);
    REQUIRE(comm.size() == 1);
    REQUIRE(comm.rank() == 0);
    const auto f = ramp<float>(37, 1.5f, 0.25f);
    const auto d = ramp<double>(11, -3.0, 0.5);
    const auto i = ramp<std::int32_t>(5, 7, 3);
    const auto l = ramp<std::int64_t>(64, std::int64_t{1} << 40, 1);
    dev_vec<float> df(0, f);
    dev_vec<double> dd(0, d);
    dev_vec<std::int32_t> di(0, i);
    dev_vec<std::int64_t> dl(0, l);
    std::vector<dk::leaf_span> leaves = {df.span(), dd.span(), di.span(), dl.span()};

    comm.all_reduce(leaves, dk::reduce_op::sum);  // one rank: the sum is the input
    CHECK(df.host() == f);
    CHECK(dd.host() == d);
    CHECK(di.host() == i);
    CHECK(dl.host() == l);
    comm.all_reduce(leaves, dk::reduce_op::average);
    CHECK(df.host() == f);
    CHECK(dl.host() == l);
    comm.broadcast(leaves, 0);
    CHECK(dd.host() == d);

    dev_vec<float> of(0, f.size(), 0.0f);
    dev_vec<std::int64_t> ol(0, l.size(), 0);
    comm.all_gather(std::vector<dk::const_leaf_span>{df.cspan(), dl.cspan()},
                    std::vector<dk::leaf_span>{of.span(), ol.span()});
    CHECK(of.host() == f);
    CHECK(ol.host() == l);
    dev_vec<float> rf(0, f.size(), 0.0f);
    comm.reduce_scatter(std::vector<dk::const_leaf_span>{df.cspan()}, std::vector<dk::leaf_span>{rf.span()});
    CHECK(rf.host() == f);
    dev_vec<double> sd(0, d.size(), 0.0);
    comm.scatter(std::vector<dk::const_leaf_span>{dd.cspan()}, std::vector<dk::leaf_span>{sd.span()}, 0);
    CHECK(sd.host() == d);
  }
}

TEST_CASE("NCCL: argument errors, int16 reductions refused, abort makes later calls throw", "[nccl][gpu]") {
  auto comm = dk::nccl_communicator::one_rank(dk::device::cuda(0));
  dev_vec<std::int16_t> s(0, 8, 1);
  CHECK_THROWS_WITH(comm.all_reduce(std::vector<dk::leaf_span>{s.span()}), Catch::Contains("cannot reduce int16"));
  CHECK_THROWS_AS(comm.broadcast(std::vector<dk::leaf_span>{s.span()}, 1), dk::config_error);
  comm.broadcast(std::vector<dk::leaf_span>{s.span()}, 0);  // still usable
  CHECK(s.host() == std::vector<std::int16_t>(8, 1));
  comm.check_async_errors();
  comm.abort("test");
  CHECK(comm.aborted());
  CHECK_THROWS_WITH(comm.all_reduce(std::vector<dk::leaf_span>{s.span()}), Catch::Contains("was aborted (test)"));
}

TEST_CASE("NCCL on trees: device_array leaves on the communicator's device; host leaves refused", "[nccl][gpu]") {
  auto comm = dk::nccl_communicator::one_rank(dk::device::cuda(0));
  const auto f = ramp<float>(100, 2.0f, 0.5f);
  const auto l = ramp<std::int64_t>(3, 5, 5);
  dev_vec<float> df(0, f);
  dev_vec<std::int64_t> dl(0, l);
  auto tree =
      std::make_tuple(dk::device_array<float>::view(static_cast<float*>(df.span().data), f.size(), dk::device::cuda(0)),
                      std::make_pair(dk::device_array<std::int64_t>::view(static_cast<std::int64_t*>(dl.span().data),
                                                                          l.size(), dk::device::cuda(0)),
                                     0));
  // The scalar (an int in host memory) is not on cuda:0: refused before anything moves.
  CHECK_THROWS_WITH(dk::all_reduce(comm, tree), Catch::Contains("leaf '[1][1]' is in cpu:0 memory"));
  auto device_only = std::make_tuple(std::get<0>(tree), std::get<1>(tree).first);
  dk::all_reduce(comm, device_only, dk::reduce_op::sum);
  dk::broadcast(comm, device_only, 0);
  CHECK(df.host() == f);
  CHECK(dl.host() == l);
}

TEST_CASE("ncclCommInitAll across every GPU: exact collectives per local rank", "[nccl][gpu][multi]") {
  const std::vector<dk::device> devs = every_gpu();
  if (devs.size() < 2) return;
  const int n = static_cast<int>(devs.size());
  auto comm = dk::nccl_communicator::init_all(devs);
  comm.set_bucket_bytes(128);
  REQUIRE(comm.size() == n);
  REQUIRE(comm.local_ranks() == n);

  // all_reduce: rank g holds g + i (floats) and 1000 g + i (int64).
  std::vector<std::unique_ptr<dev_vec<float>>> f;
  std::vector<std::unique_ptr<dev_vec<std::int64_t>>> l;
  std::vector<std::vector<dk::leaf_span>> per_rank;
  for (int g = 0; g < n; ++g) {
    f.push_back(std::make_unique<dev_vec<float>>(g, ramp<float>(33, static_cast<float>(g), 1.0f)));
    l.push_back(std::make_unique<dev_vec<std::int64_t>>(g, ramp<std::int64_t>(9, 1000 * g, 1)));
    per_rank.push_back({f.back()->span(), l.back()->span()});
  }
  comm.all_reduce(per_rank, dk::reduce_op::sum);
  const float gsum = static_cast<float>(n * (n - 1) / 2);
  for (int g = 0; g < n; ++g) {
    const auto hf = f[static_cast<std::size_t>(g)]->host();
    const auto hl = l[static_cast<std::size_t>(g)]->host();
    for (std::size_t i = 0; i < hf.size(); ++i) CHECK(hf[i] == gsum + static_cast<float>(n) * static_cast<float>(i));
    for (std::size_t i = 0; i < hl.size(); ++i) {
      CHECK(hl[i] == 1000 * n * (n - 1) / 2 + n * static_cast<std::int64_t>(i));
    }
  }

  // broadcast from the last rank.
  comm.broadcast(per_rank, n - 1);
  for (int g = 0; g < n; ++g) CHECK(f[static_cast<std::size_t>(g)]->host() == f.back()->host());

  // all_gather: rank g contributes 5 ints of value g.
  std::vector<std::unique_ptr<dev_vec<std::int32_t>>> gin, gout;
  std::vector<std::vector<dk::const_leaf_span>> ins;
  std::vector<std::vector<dk::leaf_span>> outs;
  for (int g = 0; g < n; ++g) {
    gin.push_back(std::make_unique<dev_vec<std::int32_t>>(g, 5, g));
    gout.push_back(std::make_unique<dev_vec<std::int32_t>>(g, 5 * static_cast<std::size_t>(n), -1));
    ins.push_back({gin.back()->cspan()});
    outs.push_back({gout.back()->span()});
  }
  comm.all_gather(ins, outs);
  for (int g = 0; g < n; ++g) {
    const auto h = gout[static_cast<std::size_t>(g)]->host();
    for (std::size_t k = 0; k < h.size(); ++k) CHECK(h[k] == static_cast<std::int32_t>(k / 5));
  }

  // scatter with unequal sizes from rank 0: rank g receives g + 1 doubles.
  std::size_t total = 0;
  for (int g = 0; g < n; ++g) total += static_cast<std::size_t>(g + 1);
  dev_vec<double> src(0, ramp<double>(total, 0.0, 1.0));
  std::vector<std::unique_ptr<dev_vec<double>>> parts;
  std::vector<std::vector<dk::const_leaf_span>> sin;
  std::vector<std::vector<dk::leaf_span>> sout;
  for (int g = 0; g < n; ++g) {
    parts.push_back(std::make_unique<dev_vec<double>>(g, static_cast<std::size_t>(g + 1), -1.0));
    sin.push_back(g == 0 ? std::vector<dk::const_leaf_span>{src.cspan()} : std::vector<dk::const_leaf_span>{});
    sout.push_back({parts.back()->span()});
  }
  comm.scatter(sin, sout, 0);
  std::size_t off = 0;
  for (int g = 0; g < n; ++g) {
    const auto h = parts[static_cast<std::size_t>(g)]->host();
    for (std::size_t k = 0; k < h.size(); ++k) CHECK(h[k] == static_cast<double>(off + k));
    off += h.size();
  }

  // Trees, one per local rank: a device_array per GPU.
  std::vector<std::tuple<dk::device_array<float>>> trees;
  for (int g = 0; g < n; ++g) {
    trees.emplace_back(dk::device_array<float>::view(static_cast<float*>(f[static_cast<std::size_t>(g)]->span().data),
                                                     33, dk::device::cuda(g)));
  }
  const auto before = f[0]->host();
  dk::all_reduce(comm, dk::one_per_device(trees), dk::reduce_op::sum);
  auto times_n = before;  // every rank held `before` (after the broadcast): small integers, exact
  for (auto& x : times_n) x *= static_cast<float>(n);
  for (int g = 0; g < n; ++g) CHECK(f[static_cast<std::size_t>(g)]->host() == times_n);

  // A local rank with a different tree: the mismatch is reported, nothing hangs.
  per_rank.back().pop_back();
  CHECK_THROWS_AS(comm.all_reduce(per_rank), dk::structure_mismatch_error);
}

namespace {

/// Rank g's value i of a reduced-precision leaf: multiples of 1/2 in [0, 1], so that sums over
/// up to 4 ranks are exact in float and in every format here (fp8 E5M2 included), on the
/// simulator (float, rounded once) and on NCCL (half-precision accumulation) alike.
float half_steps(int g, std::size_t i) { return 0.5f * static_cast<float>((g + static_cast<int>(i)) % 3); }

template <class T>
void check_reduced_all_reduce(int n, dk::reduce_op op) {
  std::vector<dk::device> devs;
  for (int g = 0; g < n; ++g) devs.push_back(dk::device::cuda(g));
  auto comm = dk::nccl_communicator::init_all(devs);
  comm.set_bucket_bytes(64);  // several buckets, and leaves packed together
  std::vector<std::unique_ptr<dev_vec<T>>> a, b;
  std::vector<std::vector<dk::leaf_span>> per_rank;
  for (int g = 0; g < n; ++g) {
    std::vector<T> ha, hb;
    for (std::size_t i = 0; i < 29; ++i) ha.push_back(dk::narrow_to<T>(half_steps(g, i)));
    for (std::size_t i = 0; i < 5; ++i) hb.push_back(dk::narrow_to<T>(half_steps(g, i + 1)));
    a.push_back(std::make_unique<dev_vec<T>>(g, ha));
    b.push_back(std::make_unique<dev_vec<T>>(g, hb));
    per_rank.push_back({a.back()->span(), b.back()->span()});
  }
  comm.all_reduce(per_rank, op);
  const auto expected = [&](std::size_t i) {
    float acc = 0;
    for (int g = 0; g < n; ++g) {
      const float x = half_steps(g, i);
      acc = op == dk::reduce_op::max ? (g == 0 ? x : std::max(acc, x)) : acc + x;
    }
    return dk::widen(dk::narrow_to<T>(acc));
  };
  for (int g = 0; g < n; ++g) {
    const auto ha = a[static_cast<std::size_t>(g)]->host();
    const auto hb = b[static_cast<std::size_t>(g)]->host();
    for (std::size_t i = 0; i < ha.size(); ++i) CHECK(dk::widen(ha[i]) == expected(i));
    for (std::size_t i = 0; i < hb.size(); ++i) CHECK(dk::widen(hb[i]) == expected(i + 1));
  }
}

}  // namespace

TEST_CASE("ncclCommInitAll: float16, bfloat16 and fp8 leaves all-reduce (sum, max)", "[nccl][gpu][multi]") {
  const int n = static_cast<int>(every_gpu().size());
  if (n < 2) return;
  for (const auto op : {dk::reduce_op::sum, dk::reduce_op::max}) {
    check_reduced_all_reduce<dk::float16_t>(n, op);
    check_reduced_all_reduce<dk::bfloat16_t>(n, op);
#  if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    check_reduced_all_reduce<dk::float8_e4m3_t>(n, op);
    check_reduced_all_reduce<dk::float8_e5m2_t>(n, op);
#  endif
  }
}

namespace {
/// A batched-copy hook that counts its calls and copies with one cudaMemcpyAsync per buffer (what
/// CUB's batched kernel does in one launch).
std::size_t hook_calls = 0;
std::size_t hook_buffers = 0;
bool counting_hook(const void* const* srcs, void* const* dsts, const std::size_t* sizes, std::size_t count,
                   dk::native_stream_handle s) {
  ++hook_calls;
  hook_buffers += count;
  for (std::size_t i = 0; i < count; ++i) {
    if (cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyDeviceToDevice, s) != cudaSuccess) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("NCCL packs and unpacks a bucket of many small leaves in one batched copy each", "[nccl][gpu]") {
  auto comm = dk::nccl_communicator::one_rank(dk::device::cuda(0));
  constexpr std::size_t leaves = 200;
  std::vector<std::unique_ptr<dev_vec<float>>> v;
  std::vector<dk::leaf_span> spans;
  for (std::size_t k = 0; k < leaves; ++k) {
    v.push_back(std::make_unique<dev_vec<float>>(0, ramp<float>(8, static_cast<float>(k), 0.5f)));
    spans.push_back(v.back()->span());
  }
  const auto previous = dk::detail::batched_copy_hook.exchange(&counting_hook);
  hook_calls = hook_buffers = 0;
  const auto launches = dk::detail::stats().batched_launches.load();
  comm.all_reduce(spans, dk::reduce_op::sum);  // one bucket (25 MiB): one pack, one unpack
  dk::detail::batched_copy_hook.store(previous);
  CHECK(hook_calls == 2);
  CHECK(hook_buffers == 2 * leaves);
  CHECK(dk::detail::stats().batched_launches.load() - launches == 2);
  for (std::size_t k = 0; k < leaves; ++k) CHECK(v[k]->host() == ramp<float>(8, static_cast<float>(k), 0.5f));
}

TEST_CASE("ncclCommInitAll: the façade checks the lists per local rank and each rank's memory", "[nccl][gpu][multi]") {
  const std::vector<dk::device> devs = every_gpu();
  if (devs.size() < 2) return;
  const int n = static_cast<int>(devs.size());
  auto comm = dk::nccl_communicator::init_all(devs);
  REQUIRE(comm.local_ranks() == n);
  for (int g = 0; g < n; ++g) {
    CHECK(comm.rank(g) == g);
    CHECK(comm.device_of(g) == dk::device::cuda(g));
    CHECK(comm.accepts(dk::device::cuda(g), g));
    CHECK_FALSE(comm.accepts(dk::device::cuda((g + 1) % n), g));
    CHECK_FALSE(comm.accepts(dk::device::cpu(), g));
  }
  CHECK(comm.memory_description(1) == "NCCL local rank 1 cannot use: it works on cuda:1");
  dev_vec<float> x(0, 4, 1.0f);
  // One leaf list for several local ranks, and one list too few: refused before any NCCL call.
  CHECK_THROWS_WITH(comm.all_reduce(std::vector<dk::leaf_span>{x.span()}),
                    Catch::Contains("nccl_communicator::all_reduce: this communicator drives " + std::to_string(n) +
                                    " local ranks; pass one leaf list per local rank"));
  const std::vector<std::vector<dk::leaf_span>> too_few(static_cast<std::size_t>(n - 1), {x.span()});
  CHECK_THROWS_WITH(comm.broadcast(too_few), Catch::Contains("nccl_communicator::broadcast: " + std::to_string(n - 1) +
                                                             " leaf lists for " + std::to_string(n) + " local ranks"));
  CHECK_FALSE(comm.aborted());  // argument errors leave the communicator usable
  CHECK(x.host() == std::vector<float>(4, 1.0f));
}

// The collective, captured, runs at each launch of the graph (NCCL docs, "Using NCCL with CUDA
// Graphs"); 50 launches, each on fresh values written before it. One GPU: NCCL's guide warns that
// capture with several GPUs driven by one process may deadlock in cudaGraphLaunch. The code below
// handles several (one capture nested in the previous one per device), as the simulator checks.
TEST_CASE("NCCL inside CUDA graphs: a captured all-reduce replays at every launch", "[nccl][gpu][graph]") {
  const std::vector<dk::device> devs{dk::device::cuda(0)};
  const std::size_t n = devs.size();
  std::vector<dk::stream> streams;
  for (const auto d : devs) streams.emplace_back(d);
  auto comm = dk::nccl_communicator::init_all(devs);
  std::vector<std::unique_ptr<dev_vec<float>>> a;
  std::vector<std::unique_ptr<dev_vec<double>>> b;
  std::vector<std::vector<dk::leaf_span>> per_rank;
  for (std::size_t g = 0; g < n; ++g) {
    comm.set_stream(static_cast<int>(g), dk::stream_ref(streams[g]));
    a.push_back(std::make_unique<dev_vec<float>>(devs[g].ordinal(), 33, 0.0f));
    b.push_back(std::make_unique<dev_vec<double>>(devs[g].ordinal(), 7, 0.0));
    per_rank.push_back({a.back()->span(), b.back()->span()});
  }
  comm.all_reduce(per_rank, dk::reduce_op::sum);  // eager, once: the staging buffers exist
  std::vector<dk::graph> graphs(n);
  std::function<void(std::size_t)> capture_from = [&](std::size_t g) {
    graphs[g] = dk::capture(streams[g], [&] {
      if (g + 1 < n) {
        capture_from(g + 1);
      } else {
        comm.all_reduce(per_rank, dk::reduce_op::sum);
      }
    });
  };
  capture_from(0);
  for (int k = 0; k < 50; ++k) {
    for (std::size_t g = 0; g < n; ++g) {
      const auto x = static_cast<float>(k + static_cast<int>(g));
      const std::vector<float> fa = ramp<float>(33, x, 1.0f);
      const std::vector<double> fb = ramp<double>(7, -x, 0.5);
      dk::scoped_device on(devs[g].ordinal());
      DEVICEKIT_CUDA_CHECK(cudaMemcpy(a[g]->span().data, fa.data(), 33 * sizeof(float), cudaMemcpyHostToDevice));
      DEVICEKIT_CUDA_CHECK(cudaMemcpy(b[g]->span().data, fb.data(), 7 * sizeof(double), cudaMemcpyHostToDevice));
    }
    for (std::size_t g = 0; g < n; ++g) graphs[g].launch(streams[g]);
    for (auto& s : streams) s.synchronize();
    const auto ranks = static_cast<float>(n);
    const auto base = static_cast<float>(k) * ranks + static_cast<float>(n * (n - 1) / 2);
    for (std::size_t g = 0; g < n; ++g) {
      CHECK(a[g]->host() == ramp<float>(33, base, ranks));
      CHECK(b[g]->host() == ramp<double>(7, -static_cast<double>(base), 0.5 * static_cast<double>(n)));
    }
  }
  comm.check_async_errors();
}

#else

TEST_CASE("NCCL is not available in this build", "[nccl][gpu]") {
  WARN("devicekit was built without NCCL (DEVICEKIT_HAS_NCCL is 0)");
}

#endif
