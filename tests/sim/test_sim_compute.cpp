// The host side of the tree algorithms (compute/detail/plan.hpp) on simulated GPUs: the
// chunk table that lets one launch cover every leaf (apex's multi_tensor_apply, PyTorch's
// _foreach kernels in aten/src/ATen/native/cuda/MultiTensorApply.cuh), its staging through the
// device's devicekit pool, and the errors a call gives before anything is queued. Kernels do not
// run on the simulator, so the launches here are stand-ins: the kernel_priority<1> overloads below
// are what compute/kernels.cuh provides under nvcc, found the same way (by argument-dependent
// lookup at instantiation, through the functor's namespace), and they do the kernel's work on the
// host from the chunk table read back from device memory. A wrong pointer or length in the table
// then shows as a wrong element of the output, not only as a wrong table.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>
#include <devicekit/devicekit.hpp>
#include <devicekit/compute.hpp>

#include "sim_test_support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <chrono>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

namespace dk = devicekit;
namespace sim = devicekit::cuda_sim;

namespace standin {

using chunk2 = dk::detail::tree_chunk<2>;

/// What one stand-in launch saw.
struct launch_record {
  const std::type_info* types = nullptr;  ///< the group's type_list
  const void* d_chunks = nullptr;         ///< where its part of the table is in device memory
  std::size_t count = 0;
  int device = -1;                 ///< the current device during the launch
  std::vector<chunk2> table;       ///< read back from device memory
  std::size_t pool_allocated = 0;  ///< the device's default pool during the launch
  std::size_t scratch_in_use = 0;  ///< scratch_memory_stats(device) during the launch
};
std::vector<launch_record>& records() {
  static std::vector<launch_record> r;
  return r;
}

/// out = in + 0.5. Declared in this namespace so that the overloads below are associated with
/// every transform_job built over it, and with nothing else.
struct plus_half {
  template <class V>
  V operator()(V x) const {
    return x + static_cast<V>(0.5);
  }
};

template <class Job>
constexpr bool tree_kernels_available(dk::detail::kernel_priority<1>, const Job*) {
  return true;
}

/// The stand-in kernel of one element-type group of a unary transform: reads the group's chunk
/// table back from the device (as the kernel's blocks would read it), then for every chunk copies
/// the input down, runs the job's element operation, and copies the output up.
template <class Job, class Eout, class Ein>
int tree_kernel_launch(dk::detail::kernel_priority<1>, const Job* job, dk::detail::type_list<Eout, Ein>*,
                       const chunk2* d_chunks, std::size_t count, double*, double, dk::native_stream_handle s) {
  launch_record r;
  r.types = &typeid(dk::detail::type_list<Eout, Ein>);
  r.d_chunks = d_chunks;
  r.count = count;
  r.table.resize(count);
  if (cudaGetDevice(&r.device) != cudaSuccess) return static_cast<int>(cudaErrorInvalidDevice);
  r.pool_allocated = dk::default_memory(dk::device::cuda(r.device)).stats().allocated_bytes;
  r.scratch_in_use = dk::scratch_memory_stats(dk::device::cuda(r.device)).in_use_bytes;
  cudaError_t e = cudaMemcpyAsync(r.table.data(), d_chunks, count * sizeof(chunk2), cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  for (std::size_t c = 0; c < count && e == cudaSuccess; ++c) {
    const chunk2& ch = r.table[c];
    std::vector<Ein> in(ch.n);
    std::vector<Eout> out(ch.n);
    e = cudaMemcpy(in.data(), ch.p[1], ch.n * sizeof(Ein), cudaMemcpyDeviceToHost);
    const dk::detail::slots<std::index_sequence<0>, const Ein*> ins{{in.data()}};
    for (std::size_t i = 0; i < ch.n; ++i) job->run(std::index_sequence<0>{}, out.data(), ins, i);
    if (e == cudaSuccess) e = cudaMemcpy(ch.p[0], out.data(), ch.n * sizeof(Eout), cudaMemcpyHostToDevice);
  }
  records().push_back(std::move(r));
  return static_cast<int>(e);
}

/// What one stand-in whole-leaf launch saw.
struct leaf_launch_record {
  chunk2 leaf{};
  int device = -1;
};
std::vector<leaf_launch_record>& leaf_records() {
  static std::vector<leaf_launch_record> r;
  return r;
}
/// The error the next whole-leaf launch returns (cudaSuccess: it runs).
cudaError_t& next_leaf_error() {
  static cudaError_t e = cudaSuccess;
  return e;
}

/// What compute/kernels.cuh provides for transforms over arithmetic elements: a kernel per whole
/// leaf (there, cub::DeviceTransform).
template <class Job, class Eout, class Ein>
constexpr bool tree_leaf_kernel_available(dk::detail::kernel_priority<1>, const Job*,
                                          dk::detail::type_list<Eout, Ein>*) {
  return true;
}

/// The stand-in whole-leaf kernel: the leaf's input down, the job's element operation, the output
/// up, through the pointers and length the plan gave it.
template <class Job, class Eout, class Ein>
int tree_kernel_launch_leaf(dk::detail::kernel_priority<1>, const Job* job, dk::detail::type_list<Eout, Ein>*,
                            const chunk2& leaf, dk::native_stream_handle s) {
  leaf_launch_record r{leaf, -1};
  if (cudaGetDevice(&r.device) != cudaSuccess) return static_cast<int>(cudaErrorInvalidDevice);
  leaf_records().push_back(r);
  if (const cudaError_t e = std::exchange(next_leaf_error(), cudaSuccess); e != cudaSuccess) return static_cast<int>(e);
  std::vector<Ein> in(leaf.n);
  std::vector<Eout> out(leaf.n);
  cudaError_t e = cudaStreamSynchronize(s);  // the work queued before it (placement) has run
  if (e == cudaSuccess) e = cudaMemcpy(in.data(), leaf.p[1], leaf.n * sizeof(Ein), cudaMemcpyDeviceToHost);
  const dk::detail::slots<std::index_sequence<0>, const Ein*> ins{{in.data()}};
  for (std::size_t i = 0; i < leaf.n; ++i) job->run(std::index_sequence<0>{}, out.data(), ins, i);
  if (e == cudaSuccess) e = cudaMemcpy(leaf.p[0], out.data(), leaf.n * sizeof(Eout), cudaMemcpyHostToDevice);
  return static_cast<int>(e);
}

}  // namespace standin

namespace {

/// A functor of a namespace with no stand-in: what a .cpp file compiled by g++ has.
struct negate {
  float operator()(float x) const { return -x; }
};

std::vector<float> ramp(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i % 1000);
  return v;
}

constexpr std::size_t chunk = dk::detail::tree_chunk_elements;

/// Leaf l's length in the 1,000-leaf tree: every fifth empty, three longer than one chunk (one of
/// them an exact multiple), the rest short.
std::size_t leaf_length(std::size_t l) {
  if (l == 7) return 3 * chunk + 5;
  if (l == 500) return chunk;
  if (l == 998) return 2 * chunk;
  if (l % 5 == 0) return 0;
  return 1 + l % 300;
}

dk::device last_gpu() { return dk::device::cuda(sim::device_count() - 1); }

}  // namespace

TEST_CASE("a 1,000-leaf tree is one chunk table and one launch, leaves split at the chunk length",
          "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);  // the plumbing must switch to the tree's device itself
  std::vector<std::vector<float>> h;
  std::size_t expected_chunks = 0;
  for (std::size_t l = 0; l < 1000; ++l) {
    h.push_back(ramp(leaf_length(l), static_cast<float>(l)));
    expected_chunks += (leaf_length(l) + chunk - 1) / chunk;
  }
  // 800 leaves not a multiple of 5 (leaves 7 and 998 among them, in 4 and 2 chunks), and leaf 500.
  REQUIRE(expected_chunks == 800 - 2 + 4 + 2 + 1);
  auto in = dk::place(h, gpu);
  auto out = dk::zeros_like(in, gpu);
  dk::device_memory& pool = dk::default_memory(gpu);
  const auto pool_before = pool.stats();
  const auto scratch_before = dk::scratch_memory_stats(gpu);
  const auto bytes_before = sim::device_bytes_in_use(gpu.ordinal());
  auto& counters = dk::detail::tree_counters();
  const auto launches = counters.launches.load();
  const auto tables = counters.tables.load();
  const auto table_bytes = counters.table_bytes.load();
  standin::records().clear();

  dk::tree_transform(out, standin::plus_half{}, in);

  CHECK(counters.launches.load() == launches + 1);
  CHECK(counters.tables.load() == tables + 1);
  CHECK(counters.table_bytes.load() == table_bytes + expected_chunks * sizeof(standin::chunk2));
  REQUIRE(standin::records().size() == 1);
  const auto& r = standin::records()[0];
  CHECK(*r.types == typeid(dk::detail::type_list<float, float>));
  CHECK(r.device == gpu.ordinal());
  REQUIRE(r.count == expected_chunks);
  // The table, entry by entry: each non-empty leaf in tree order, split every `chunk` elements.
  std::size_t at = 0;
  for (std::size_t l = 0; l < 1000; ++l) {
    const std::size_t n = leaf_length(l);
    for (std::size_t from = 0; from < n; from += chunk, ++at) {
      REQUIRE(at < r.table.size());
      CHECK(r.table[at].p[0] == out[l].data() + from);
      CHECK(r.table[at].p[1] == in[l].data() + from);
      CHECK(r.table[at].n == std::min(chunk, n - from));
    }
  }
  CHECK(at == r.table.size());
  // The table came from the device's devicekit pool, one scratch block, and went back in stream
  // order (the call waited for its stream): nothing of it is left.
  CHECK(r.pool_allocated >= pool_before.allocated_bytes + expected_chunks * sizeof(standin::chunk2));
  CHECK(r.scratch_in_use >= expected_chunks * sizeof(standin::chunk2));
  const auto pool_after = pool.stats();
  CHECK(pool_after.allocated_bytes == pool_before.allocated_bytes);
  CHECK(pool_after.allocation_count == pool_before.allocation_count + 1);
  CHECK(dk::scratch_memory_stats(gpu).allocations == scratch_before.allocations + 1);
  CHECK(dk::scratch_memory_stats(gpu).in_use_bytes == scratch_before.in_use_bytes);
  CHECK(sim::device_bytes_in_use(gpu.ordinal()) == bytes_before);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
  // Every element went through the stand-in, through the table's pointers and lengths.
  const auto back = dk::to_host(out);
  for (std::size_t l = 0; l < 1000; ++l) {
    REQUIRE(back[l].size() == h[l].size());
    for (std::size_t i = 0; i < h[l].size(); ++i) {
      if (back[l][i] != h[l][i] + 0.5f) {
        FAIL("leaf " << l << " element " << i << ": " << back[l][i] << ", expected " << h[l][i] + 0.5f);
      }
    }
  }
}

TEST_CASE("one launch per element-type group, each over its part of one table", "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  using tree_t = std::tuple<std::vector<float>, std::vector<double>, std::vector<float>, std::vector<double>>;
  const tree_t h{ramp(chunk + 1, 1.f), std::vector<double>(10, 2.0), ramp(3, 7.f), std::vector<double>{}};
  auto in = dk::place(h, gpu);
  auto out = dk::zeros_like(in, gpu);
  const dk::stream s(gpu);
  auto& counters = dk::detail::tree_counters();
  const auto launches = counters.launches.load();
  const auto tables = counters.tables.load();
  standin::records().clear();

  dk::tree_transform(s, out, standin::plus_half{}, in);
  s.synchronize();

  CHECK(counters.launches.load() == launches + 2);  // float and double; the empty leaf adds nothing
  CHECK(counters.tables.load() == tables + 1);
  REQUIRE(standin::records().size() == 2);
  const auto& f = standin::records()[0];
  const auto& d = standin::records()[1];
  CHECK(*f.types == typeid(dk::detail::type_list<float, float>));
  CHECK(*d.types == typeid(dk::detail::type_list<double, double>));
  REQUIRE(f.count == 3);  // leaf 0 in two chunks, leaf 2 in one
  REQUIRE(d.count == 1);
  CHECK(d.d_chunks == static_cast<const standin::chunk2*>(f.d_chunks) + 3);  // the same table, next part
  CHECK(f.table[0].p[0] == std::get<0>(out).data());
  CHECK(f.table[1].p[1] == std::get<0>(in).data() + chunk);
  CHECK(f.table[1].n == 1);
  CHECK(f.table[2].p[0] == std::get<2>(out).data());
  CHECK(f.table[2].n == 3);
  CHECK(d.table[0].p[1] == std::get<1>(in).data());
  CHECK(d.table[0].n == 10);
  const auto back = dk::to_host(out);
  CHECK(std::get<0>(back).back() == std::get<0>(h).back() + 0.5f);
  CHECK(std::get<1>(back) == std::vector<double>(10, 2.5));
  CHECK(std::get<2>(back) == std::vector<float>{7.5f, 8.5f, 9.5f});
}

TEST_CASE("the launch plumbing stages the table through the pool and gives it back in stream order",
          "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const dk::stream s(gpu);
  std::vector<standin::chunk2> table(37);
  for (std::size_t i = 0; i < table.size(); ++i) {
    table[i].p[0] = reinterpret_cast<void*>(std::uintptr_t{0x1000} * (i + 1));
    table[i].p[1] = nullptr;
    table[i].n = 3 * i + 1;
  }
  const std::size_t bytes = table.size() * sizeof(standin::chunk2);
  const std::size_t span = (bytes + 255) / 256 * 256;
  dk::device_memory& pool = dk::default_memory(gpu);
  const auto before = pool.stats();
  const auto scratch_before = dk::scratch_memory_stats(gpu);
  // The stand-in copies the table into a buffer of its own, in stream order: a copy to pageable
  // host memory would return only once done (CUDA runtime API, "API synchronization behavior"),
  // which would wait for the held stream below.
  void* copy = nullptr;
  REQUIRE(cudaSetDevice(gpu.ordinal()) == cudaSuccess);
  REQUIRE(cudaMalloc(&copy, bytes) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  std::byte* seen_table = nullptr;
  std::byte* seen_extra = nullptr;
  int device_in_launch = -1;
  std::size_t allocated_in_launch = 0;
  // A gate holds the stream: neither the upload nor the release after the launch may wait for it
  // on the host.
  sim_test::gate g;
  REQUIRE(cudaLaunchHostFunc(s.native_handle(), sim_test::gate::hold, &g) == cudaSuccess);
  dk::detail::tree_launch_plumbing(
      gpu, s.native_handle(), table.data(), bytes, 1000, [&](std::byte* d_table, std::byte* d_extra) {
        seen_table = d_table;
        seen_extra = d_extra;
        (void)cudaGetDevice(&device_in_launch);
        allocated_in_launch = pool.stats().allocated_bytes;
        return cudaMemcpyAsync(copy, d_table, bytes, cudaMemcpyDeviceToDevice, s.native_handle());
      });
  CHECK(cudaStreamQuery(s.native_handle()) == cudaErrorNotReady);  // returned with the stream still held
  g.open = true;
  s.synchronize();
  std::vector<standin::chunk2> back(table.size());
  REQUIRE(cudaMemcpy(back.data(), copy, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaFree(copy) == cudaSuccess);
  for (std::size_t i = 0; i < table.size(); ++i) {
    CHECK(back[i].p[0] == table[i].p[0]);
    CHECK(back[i].p[1] == nullptr);
    CHECK(back[i].n == table[i].n);
  }
  CHECK(device_in_launch == gpu.ordinal());
  REQUIRE(seen_table != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(seen_table) % 256 == 0);
  CHECK(seen_extra == seen_table + span);  // the scratch after the table, 256-byte aligned
  CHECK(allocated_in_launch >= before.allocated_bytes + span + 1000);
  const auto after = pool.stats();
  CHECK(after.allocation_count == before.allocation_count + 1);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(dk::scratch_memory_stats(gpu).allocations == scratch_before.allocations + 1);
  CHECK(dk::scratch_memory_stats(gpu).in_use_bytes == scratch_before.in_use_bytes);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
}

TEST_CASE("a failed or throwing launch still gives the table back", "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  const dk::stream s(gpu);
  const standin::chunk2 one{{nullptr, nullptr}, 1};
  dk::device_memory& pool = dk::default_memory(gpu);
  const auto before = pool.stats().allocated_bytes;
  try {
    dk::detail::tree_launch_plumbing(gpu, s.native_handle(), &one, sizeof(one), 0,
                                     [](std::byte*, std::byte*) { return cudaErrorLaunchOutOfResources; });
    FAIL("a launch error must throw");
  } catch (const dk::cuda_error& e) {
    CHECK(e.code() == static_cast<int>(cudaErrorLaunchOutOfResources));
  }
  CHECK_THROWS_AS(dk::detail::tree_launch_plumbing(
                      gpu, s.native_handle(), &one, sizeof(one), 0,
                      [](std::byte*, std::byte*) -> cudaError_t { throw std::runtime_error("launch refused"); }),
                  std::runtime_error);
  s.synchronize();
  CHECK(pool.stats().allocated_bytes == before);
  CHECK(dk::scratch_memory_stats(gpu).in_use_bytes == 0);
}

TEST_CASE("leaves of the whole-leaf length get a launch of their own, shorter ones share the table",
          "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);  // the whole-leaf launches too must run on the tree's device
  constexpr std::size_t whole = dk::detail::tree_whole_leaf_elements;
  const std::vector<std::size_t> lengths{5, whole, whole - 1, 0, whole + 7};
  std::vector<std::vector<float>> h;
  for (std::size_t l = 0; l < lengths.size(); ++l) h.push_back(ramp(lengths[l], static_cast<float>(l)));
  auto in = dk::place(h, gpu);
  auto out = dk::zeros_like(in, gpu);
  auto& counters = dk::detail::tree_counters();
  auto launches = counters.launches.load();
  const auto tables = counters.tables.load();
  standin::records().clear();
  standin::leaf_records().clear();

  dk::tree_transform(out, standin::plus_half{}, in);

  CHECK(counters.launches.load() == launches + 3);  // leaves 1 and 4 alone, leaves 0 and 2 in one table
  CHECK(counters.tables.load() == tables + 1);
  REQUIRE(standin::leaf_records().size() == 2);
  for (const auto& [k, l] : {std::pair<std::size_t, std::size_t>{0, 1}, {1, 4}}) {
    const auto& r = standin::leaf_records()[k];
    CHECK(r.leaf.p[0] == out[l].data());
    CHECK(r.leaf.p[1] == in[l].data());
    CHECK(r.leaf.n == lengths[l]);
    CHECK(r.device == gpu.ordinal());
  }
  REQUIRE(standin::records().size() == 1);
  const auto& table = standin::records()[0].table;
  REQUIRE(table.size() == 1 + (whole - 1 + chunk - 1) / chunk);
  CHECK(table.front().p[1] == in[0].data());
  CHECK(table.front().n == 5);
  CHECK(table[1].p[1] == in[2].data());
  CHECK(table.back().p[1] == in[2].data() + (table.size() - 2) * chunk);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
  auto check_values = [&] {
    const auto back = dk::to_host(out);
    std::size_t wrong = 0;
    for (std::size_t l = 0; l < h.size(); ++l) {
      REQUIRE(back[l].size() == h[l].size());
      for (std::size_t i = 0; i < h[l].size(); ++i) wrong += back[l][i] != h[l][i] + 0.5f ? 1 : 0;
    }
    CHECK(wrong == 0);
  };
  check_values();

  SECTION("turned off, every leaf goes into the table") {
    out = dk::zeros_like(in, gpu);
    dk::detail::tree_whole_leaf_threshold() = SIZE_MAX;
    launches = counters.launches.load();
    dk::tree_transform(out, standin::plus_half{}, in);
    dk::detail::tree_whole_leaf_threshold() = whole;
    CHECK(counters.launches.load() == launches + 1);
    CHECK(standin::leaf_records().size() == 2);
    // Leaf 0 in one chunk, leaves 1 and 2 in whole / chunk each (2 just short), leaf 4 in one more.
    CHECK(standin::records().back().table.size() == 1 + 2 * (whole / chunk) + (whole / chunk + 1));
    check_values();
  }
  SECTION("with the threshold lowered to 5 elements, every non-empty leaf is launched on its own") {
    out = dk::zeros_like(in, gpu);
    dk::detail::tree_whole_leaf_threshold() = 5;
    launches = counters.launches.load();
    const std::size_t group_launches = standin::records().size();
    dk::tree_transform(out, standin::plus_half{}, in);
    dk::detail::tree_whole_leaf_threshold() = whole;
    CHECK(counters.launches.load() == launches + 4);
    CHECK(standin::records().size() == group_launches);  // no table
    REQUIRE(standin::leaf_records().size() == 6);
    CHECK(standin::leaf_records()[2].leaf.n == 5);
    check_values();
  }
  // What can fail without a launch (staging the table, taking its scratch) comes first: such a
  // failure leaves every leaf as it was. A failed launch gives the table back.
  auto all_zero = [&] {
    const auto back = dk::to_host(out);
    std::size_t nonzero = 0;
    for (const auto& leaf : back)
      nonzero += static_cast<std::size_t>(std::count_if(leaf.begin(), leaf.end(), [](float v) { return v != 0.f; }));
    return nonzero == 0;
  };
  dk::device_memory& pool = dk::default_memory(gpu);
  SECTION("a failed whole-leaf launch throws, launches no group, and gives the table back") {
    out = dk::zeros_like(in, gpu);
    const auto pool_before = pool.stats();
    const auto bytes_before = sim::device_bytes_in_use(gpu.ordinal());
    const std::size_t group_launches = standin::records().size();
    const std::size_t leaf_launches = standin::leaf_records().size();
    standin::next_leaf_error() = cudaErrorLaunchOutOfResources;
    try {
      dk::tree_transform(out, standin::plus_half{}, in);
      FAIL("a launch error must throw");
    } catch (const dk::cuda_error& e) {
      CHECK(e.code() == static_cast<int>(cudaErrorLaunchOutOfResources));
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(standin::leaf_records().size() == leaf_launches + 1);  // the first one, which failed
    CHECK(standin::records().size() == group_launches);
    CHECK(all_zero());
    CHECK(pool.stats().allocated_bytes == pool_before.allocated_bytes);
    CHECK(dk::scratch_memory_stats(gpu).in_use_bytes == 0);
    CHECK(sim::device_bytes_in_use(gpu.ordinal()) == bytes_before);
  }
  SECTION("a failed table upload throws before any leaf is launched") {
    out = dk::zeros_like(in, gpu);
    const auto pool_before = pool.stats();
    const std::size_t group_launches = standin::records().size();
    const std::size_t leaf_launches = standin::leaf_records().size();
    sim::fail_call("cudaMemcpyAsync", 1, cudaErrorMemoryAllocation);
    CHECK_THROWS_AS(dk::tree_transform(out, standin::plus_half{}, in), dk::cuda_error);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(standin::leaf_records().size() == leaf_launches);
    CHECK(standin::records().size() == group_launches);
    CHECK(all_zero());
    CHECK(pool.stats().allocated_bytes == pool_before.allocated_bytes);
    CHECK(dk::scratch_memory_stats(gpu).in_use_bytes == 0);
  }
}

TEST_CASE("a cuda tree in a translation unit without the kernels: config_error, nothing taken",
          "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  auto t = dk::place(std::make_tuple(ramp(100, 0.f), ramp(chunk + 1, 3.f)), gpu);
  auto out = dk::zeros_like(t, gpu);
  dk::device_memory& pool = dk::default_memory(gpu);
  const auto before = pool.stats();
  const auto bytes_before = sim::device_bytes_in_use(gpu.ordinal());
  const auto launches = dk::detail::tree_counters().launches.load();
  const auto tables = dk::detail::tree_counters().tables.load();
  // The message names the device and both remedies' parts: nvcc, and the header with the kernels.
  const auto says_how = [&](const std::string& what) {
    CHECK_THAT(what, Catch::Contains("nvcc") && Catch::Contains("<devicekit/compute/kernels.cuh>") &&
                         Catch::Contains("cuda:" + std::to_string(gpu.ordinal())));
    CHECK_THAT(what, !Catch::Contains("tree/algorithms.cuh"));  // no path but the documented one
  };
  try {
    dk::tree_transform(out, negate{}, t);
    FAIL("tree_transform on a cuda tree without the kernels must throw");
  } catch (const dk::config_error& e) {
    says_how(e.what());
    CHECK_THAT(e.what(), Catch::StartsWith("tree_transform"));
  }
  try {
    (void)dk::tree_global_norm(t);
    FAIL("tree_global_norm on a cuda tree without the kernels must throw");
  } catch (const dk::config_error& e) {
    says_how(e.what());
    CHECK_THAT(e.what(), Catch::StartsWith("tree_reduce"));
  }
  CHECK_THROWS_AS(dk::tree_fill(out, 1.f), dk::config_error);
  CHECK_THROWS_AS(dk::tree_all_finite(t), dk::config_error);
  CHECK(dk::detail::tree_counters().launches.load() == launches);
  CHECK(dk::detail::tree_counters().tables.load() == tables);
  const auto after = pool.stats();
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.allocation_count == before.allocation_count);
  CHECK(sim::device_bytes_in_use(gpu.ordinal()) == bytes_before);
  // The tree is untouched.
  CHECK(std::get<0>(dk::to_host(out)) == std::vector<float>(100, 0.f));
}

TEST_CASE("leaves on two simulated GPUs: device_mismatch before anything is queued", "[sim][multi][tree_algorithms]") {
  const dk::device a = dk::device::cuda(0);
  const dk::device b = dk::device::cuda(1);
  auto mixed = std::make_tuple(dk::place(ramp(16, 0.f), a), dk::place(ramp(16, 1.f), b));
  auto on_a = dk::place(std::make_tuple(ramp(16, 0.f), ramp(16, 0.f)), a);
  auto on_b = dk::place(std::make_tuple(ramp(16, 0.f), ramp(16, 0.f)), b);
  const dk::stream sb(b);
  const auto launches = dk::detail::tree_counters().launches.load();
  const auto tables = dk::detail::tree_counters().tables.load();
  const auto in_use_a = dk::default_memory(a).stats().allocated_bytes;
  const auto in_use_b = dk::default_memory(b).stats().allocated_bytes;
  standin::records().clear();
  // One tree's leaves on both (the stand-in kernels are available: the device check comes first).
  CHECK_THROWS_WITH(dk::tree_transform(mixed, standin::plus_half{}, mixed),
                    Catch::Contains("different devices") && Catch::Contains("cuda:0") && Catch::Contains("cuda:1"));
  CHECK_THROWS_AS(dk::tree_transform(mixed, standin::plus_half{}, mixed), dk::device_mismatch);
  CHECK_THROWS_AS(dk::tree_reduce(mixed, dk::reduce::sum), dk::device_mismatch);
  // Output on one, input on the other; a stream of the other device.
  CHECK_THROWS_AS(dk::tree_transform(on_a, standin::plus_half{}, on_b), dk::device_mismatch);
  CHECK_THROWS_AS(dk::tree_transform(sb, on_a, standin::plus_half{}, on_a), dk::device_mismatch);
  CHECK(standin::records().empty());
  CHECK(dk::detail::tree_counters().launches.load() == launches);
  CHECK(dk::detail::tree_counters().tables.load() == tables);
  CHECK(dk::default_memory(a).stats().allocated_bytes == in_use_a);
  CHECK(dk::default_memory(b).stats().allocated_bytes == in_use_b);
  // The same call on one device goes through.
  dk::tree_transform(sb, on_b, standin::plus_half{}, on_b);
  sb.synchronize();
  CHECK(standin::records().size() == 1);
  CHECK(std::get<1>(dk::to_host(on_b))[3] == 3.5f);
}

// Found by the cases above (a zeros_like tree that read back the previous test's values): the
// block was zeroed with cudaMemset, which for device memory is asynchronous and runs on the
// legacy default stream, and the placement stream (non-blocking) did not wait for it. Calls
// without a stream are now ordered after the legacy default stream as cudaMemcpy is (docs/placement.md,
// "Calls without a stream"): with that stream held, zeros_like returns only once it is released,
// and the tree is zero.
TEST_CASE("zeros_like is zeroed on return, after the work queued on the legacy default stream",
          "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  const auto t = dk::place(std::make_tuple(ramp(1000, 1.f), ramp(10, 2.f)), gpu);
  REQUIRE(cudaSetDevice(gpu.ordinal()) == cudaSuccess);
  sim_test::gate g;
  REQUIRE(cudaLaunchHostFunc(nullptr, sim_test::gate::hold, &g) == cudaSuccess);
  std::thread opener([&g] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    g.open = true;
  });
  const auto z = dk::zeros_like(t, gpu);
  const bool waited = g.open.load();
  const auto back = dk::to_host(z);
  opener.join();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(waited);  // zeros_like waited for the held legacy stream
  CHECK(std::get<0>(back) == std::vector<float>(1000, 0.f));
  CHECK(std::get<1>(back) == std::vector<float>(10, 0.f));
}

// Chunks in the launch's parameters (compute/kernels.cuh: up to 4 KiB, or 32,764 bytes with a
// CUDA 12.1 driver, as PyTorch's multi-tensor kernels carry their tensor lists): where a call's
// groups fit, no table is staged and no scratch is taken, so the call is one launch per group.
// These stand-ins say a launch holds `capacity` chunks, so that both sides of the cut are cheap
// to reach; they record what each launch saw and then do the kernel's work on the host.
namespace standin_args {

using chunk2 = dk::detail::tree_chunk<2>;
inline constexpr std::size_t capacity = 4;

struct launch_record {
  bool in_args = false;
  const std::type_info* types = nullptr;
  std::vector<chunk2> chunks;           ///< as the kernel would see them
  int device = -1;                      ///< the current device during the launch
  std::size_t memcpy_calls = 0;         ///< cudaMemcpyAsync calls so far, at the launch
  std::size_t pool_allocations = 0;     ///< the device's default pool, at the launch
  std::size_t scratch_allocations = 0;  ///< scratch_memory_stats(device), at the launch
  dk::native_stream_handle stream = nullptr;
};
std::vector<launch_record>& records() {
  static std::vector<launch_record> r;
  return r;
}

struct times_two {
  template <class V>
  V operator()(V x) const {
    return x * static_cast<V>(2);
  }
};

template <class Job>
constexpr bool tree_kernels_available(dk::detail::kernel_priority<1>, const Job*) {
  return true;
}

template <class Job, std::size_t K>
std::size_t tree_kernel_args_capacity(dk::detail::kernel_priority<1>, const Job*, dk::detail::tree_chunk<K>*) {
  return capacity;
}

template <class Eout, class Ein>
launch_record record_of(bool in_args, dk::native_stream_handle s) {
  launch_record r;
  r.in_args = in_args;
  r.types = &typeid(dk::detail::type_list<Eout, Ein>);
  r.stream = s;
  (void)cudaGetDevice(&r.device);
  r.memcpy_calls = sim::api_calls("cudaMemcpyAsync");
  r.pool_allocations = dk::default_memory(dk::device::cuda(r.device)).stats().allocation_count;
  r.scratch_allocations = dk::scratch_memory_stats(dk::device::cuda(r.device)).allocations;
  return r;
}

/// The kernel's work, on the host, after the work queued on `s` before it.
template <class Job, class Eout, class Ein>
cudaError_t run_chunks(const Job& job, const std::vector<chunk2>& chunks, dk::native_stream_handle s) {
  cudaError_t e = cudaStreamSynchronize(s);
  for (const chunk2& ch : chunks) {
    if (e != cudaSuccess) break;
    std::vector<Ein> in(ch.n);
    std::vector<Eout> out(ch.n);
    e = cudaMemcpy(in.data(), ch.p[1], ch.n * sizeof(Ein), cudaMemcpyDeviceToHost);
    const dk::detail::slots<std::index_sequence<0>, const Ein*> ins{{in.data()}};
    for (std::size_t i = 0; i < ch.n; ++i) job.run(std::index_sequence<0>{}, out.data(), ins, i);
    if (e == cudaSuccess) e = cudaMemcpy(ch.p[0], out.data(), ch.n * sizeof(Eout), cudaMemcpyHostToDevice);
  }
  return e;
}

template <class Job, class Eout, class Ein>
int tree_kernel_launch_args(dk::detail::kernel_priority<1>, const Job* job, dk::detail::type_list<Eout, Ein>*,
                            const chunk2* chunks, std::size_t count, dk::native_stream_handle s) {
  launch_record r = record_of<Eout, Ein>(true, s);
  if (count > capacity) return static_cast<int>(cudaErrorInvalidValue);  // what the real launcher answers
  r.chunks.assign(chunks, chunks + count);                               // the launch copies its parameters
  const cudaError_t e = run_chunks<Job, Eout, Ein>(*job, r.chunks, s);
  records().push_back(std::move(r));
  return static_cast<int>(e);
}

template <class Job, class Eout, class Ein>
int tree_kernel_launch(dk::detail::kernel_priority<1>, const Job* job, dk::detail::type_list<Eout, Ein>*,
                       const chunk2* d_chunks, std::size_t count, double*, double, dk::native_stream_handle s) {
  launch_record r = record_of<Eout, Ein>(false, s);
  r.chunks.resize(count);
  cudaError_t e = cudaStreamSynchronize(s);
  if (e == cudaSuccess) e = cudaMemcpy(r.chunks.data(), d_chunks, count * sizeof(chunk2), cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = run_chunks<Job, Eout, Ein>(*job, r.chunks, s);
  records().push_back(std::move(r));
  return static_cast<int>(e);
}

}  // namespace standin_args

TEST_CASE("chunks that fit the launch's parameters: no table, no scratch, one launch per group",
          "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);  // the call must switch to the tree's device itself
  // Four float chunks (the first leaf is two) and one double chunk: two groups within the capacity.
  using tree_t = std::tuple<std::vector<float>, std::vector<double>, std::vector<float>, std::vector<float>>;
  const tree_t h{ramp(chunk + 3, 1.f), std::vector<double>(9, 1.5), ramp(5, 2.f), ramp(7, 3.f)};
  auto in = dk::place(h, gpu);
  auto out = dk::zeros_like(in, gpu);
  const dk::stream s(gpu);
  dk::device_memory& pool = dk::default_memory(gpu);
  auto& counters = dk::detail::tree_counters();
  const auto launches = counters.launches.load();
  const auto tables = counters.tables.load();
  const auto memcpys = sim::api_calls("cudaMemcpyAsync");
  const auto allocations = pool.stats().allocation_count;
  const auto scratch = dk::scratch_memory_stats(gpu).allocations;
  standin_args::records().clear();

  dk::tree_transform(s, out, standin_args::times_two{}, in);
  s.synchronize();

  CHECK(counters.launches.load() == launches + 2);
  CHECK(counters.tables.load() == tables);
  CHECK(pool.stats().allocation_count == allocations);
  CHECK(dk::scratch_memory_stats(gpu).allocations == scratch);
  REQUIRE(standin_args::records().size() == 2);
  const auto& f = standin_args::records()[0];
  const auto& d = standin_args::records()[1];
  for (const auto* r : {&f, &d}) {
    CHECK(r->in_args);
    CHECK(r->device == gpu.ordinal());
    CHECK(r->stream == s.native_handle());
    CHECK(r->memcpy_calls == memcpys);  // nothing was copied to the device before the launch
    CHECK(r->pool_allocations == allocations);
    CHECK(r->scratch_allocations == scratch);
  }
  CHECK(*f.types == typeid(dk::detail::type_list<float, float>));
  CHECK(*d.types == typeid(dk::detail::type_list<double, double>));
  REQUIRE(f.chunks.size() == 4);
  CHECK(f.chunks[0].p[0] == std::get<0>(out).data());
  CHECK(f.chunks[0].n == chunk);
  CHECK(f.chunks[1].p[1] == std::get<0>(in).data() + chunk);
  CHECK(f.chunks[1].n == 3);
  CHECK(f.chunks[2].p[0] == std::get<2>(out).data());
  CHECK(f.chunks[3].p[1] == std::get<3>(in).data());
  CHECK(f.chunks[3].n == 7);
  REQUIRE(d.chunks.size() == 1);
  CHECK(d.chunks[0].p[0] == std::get<1>(out).data());
  CHECK(d.chunks[0].n == 9);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
  const auto back = dk::to_host(out);
  CHECK(std::get<0>(back).back() == 2.f * std::get<0>(h).back());
  CHECK(std::get<0>(back)[chunk] == 2.f * std::get<0>(h)[chunk]);
  CHECK(std::get<1>(back) == std::vector<double>(9, 3.0));
  CHECK(std::get<2>(back)[4] == 2.f * std::get<2>(h)[4]);
  CHECK(std::get<3>(back)[6] == 2.f * std::get<3>(h)[6]);

  // Without a stream the call returns with the work done, as on the table path.
  standin_args::records().clear();
  dk::tree_transform(out, standin_args::times_two{}, out);
  REQUIRE(standin_args::records().size() == 2);
  CHECK(standin_args::records()[0].in_args);
  CHECK(std::get<1>(dk::to_host(out)) == std::vector<double>(9, 6.0));
  CHECK(counters.tables.load() == tables);

  // Turned off (as bench_tree_cuda does to compare), the same call stages its table.
  standin_args::records().clear();
  dk::detail::tree_args_enabled() = false;
  dk::tree_transform(s, out, standin_args::times_two{}, out);
  s.synchronize();
  dk::detail::tree_args_enabled() = true;
  REQUIRE(standin_args::records().size() == 2);
  CHECK_FALSE(standin_args::records()[0].in_args);
  CHECK_FALSE(standin_args::records()[1].in_args);
  CHECK(counters.tables.load() == tables + 1);
  CHECK(std::get<1>(dk::to_host(out)) == std::vector<double>(9, 12.0));
}

TEST_CASE("a group with more chunks than a launch's parameters hold: every group goes through the table",
          "[sim][tree_algorithms]") {
  const dk::device gpu = last_gpu();
  // Five float chunks, one double: the float group does not fit, so one table serves both.
  std::tuple<std::vector<float>, std::vector<double>, std::vector<float>> h{ramp(2 * chunk + 1, 1.f),
                                                                            std::vector<double>(4, 0.25), ramp(3, 5.f)};
  std::get<2>(h).resize(chunk + 1, 4.f);
  auto in = dk::place(h, gpu);
  auto out = dk::zeros_like(in, gpu);
  const dk::stream s(gpu);
  auto& counters = dk::detail::tree_counters();
  const auto tables = counters.tables.load();
  const auto launches = counters.launches.load();
  standin_args::records().clear();

  dk::tree_transform(s, out, standin_args::times_two{}, in);
  s.synchronize();

  CHECK(counters.tables.load() == tables + 1);
  CHECK(counters.launches.load() == launches + 2);
  REQUIRE(standin_args::records().size() == 2);
  CHECK_FALSE(standin_args::records()[0].in_args);
  CHECK_FALSE(standin_args::records()[1].in_args);
  CHECK(standin_args::records()[0].chunks.size() == 5);
  CHECK(standin_args::records()[1].chunks.size() == 1);
  CHECK(dk::scratch_memory_stats(gpu).in_use_bytes == 0);
  const auto back = dk::to_host(out);
  CHECK(std::get<0>(back)[2 * chunk] == 2.f * std::get<0>(h)[2 * chunk]);
  CHECK(std::get<1>(back) == std::vector<double>(4, 0.5));
  CHECK(std::get<2>(back)[chunk] == 8.f);

  // Four float chunks fit again: the same call shape takes the parameters.
  auto small_in = dk::place(std::make_tuple(ramp(chunk + 1, 0.f), ramp(2, 1.f), ramp(3, 2.f)), gpu);
  auto small_out = dk::zeros_like(small_in, gpu);
  standin_args::records().clear();
  dk::tree_transform(s, small_out, standin_args::times_two{}, small_in);
  s.synchronize();
  REQUIRE(standin_args::records().size() == 1);
  CHECK(standin_args::records()[0].in_args);
  CHECK(standin_args::records()[0].chunks.size() == 4);
  CHECK(counters.tables.load() == tables + 1);
  CHECK(std::get<2>(dk::to_host(small_out))[2] == 2.f * (2.f + 2.f));
}
