// Budgets on simulated GPUs of every size: the simulator charges a context what devicekit budgets
// for one (devicekit/memory/context_headroom.hpp), so the whole balanced budget of a small device
// can be allocated and placed; free memory never wraps; a budget never exceeds what the device had
// available when the manager measured it. The cases tagged [small_gpu] allocate a whole budget and
// run only under DEVICEKIT_SIM_GPU0=memory=256MiB, 512MiB and 1GiB (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include "sim_devicekit_support.hpp"

#include <devicekit/memory/context_headroom.hpp>
#include <devicekit/report/json.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

namespace {

using manager = dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, dk::balanced>;

std::uint64_t total_of(int device) {
  cudaDeviceProp p{};
  REQUIRE(cudaGetDeviceProperties(&p, device) == cudaSuccess);
  return p.totalGlobalMem;
}

std::uint64_t free_now() {
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  REQUIRE(free_bytes <= total);
  return free_bytes;
}

/// The cases run one after another in one process: each starts with the process's placement pool
/// empty, as if it were the first.
void start_clean() {
  dk::default_memory(dk::device::cuda(0)).clear();
  REQUIRE(sim::device_bytes_in_use(0) == 0u);
}

}  // namespace

TEST_CASE("free memory is total less the context and what is allocated, never below zero",
          "[.][sim][memory][budget][small_gpu]") {
  const std::uint64_t total = total_of(0);
  const std::uint64_t context = dk::cuda_context_headroom_bytes(total);
  REQUIRE(context < total);
  const std::uint64_t in_use = sim::device_bytes_in_use(0);
  CHECK(free_now() == total - context - in_use);

  // Everything that is free can be taken, and then nothing more.
  const std::uint64_t all = free_now();
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, static_cast<std::size_t>(all)) == cudaSuccess);
  CHECK(free_now() == 0);
  void* q = nullptr;
  CHECK(cudaMalloc(&q, 1) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK(free_now() == all);

  // A size that would wrap the simulator's sums is refused, not served.
  CHECK(cudaMalloc(&q, std::numeric_limits<std::size_t>::max() - 100) == cudaErrorMemoryAllocation);
  CHECK(q == nullptr);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CHECK(free_now() == all);
}

TEST_CASE("the whole balanced budget of a small GPU can be allocated and placed",
          "[.][sim][memory][budget][small_gpu]") {
  start_clean();
  manager dm{dk::settings::without_environment()};
  const dk::device gpu = dk::device::cuda(0);
  const std::uint64_t total = total_of(0);
  const dk::memory_budget b = dm.budget(gpu);
  CHECK(b.headroom_bytes == dk::cuda_context_headroom_bytes(total));
  CHECK(b.budget_bytes == static_cast<std::uint64_t>(0.75 * static_cast<double>(total)) - b.headroom_bytes);
  CHECK_FALSE(b.capped_to_available);  // nothing else holds memory here
  REQUIRE(b.available_bytes.has_value());
  CHECK(*b.available_bytes == free_now());
  const auto bytes = static_cast<std::size_t>(b.budget_bytes);

  dk::device_memory& m = dm.memory(gpu);
  void* p = m.allocate(bytes);
  REQUIRE(p != nullptr);
  CHECK(m.stats().reserved_bytes == bytes);
  m.deallocate(p, bytes);
  const std::vector<float> host(bytes / sizeof(float), 1.5f);
  {
    const auto placed = dm.place(host, gpu);  // one block of the whole budget, from the pool's cache
    CHECK(m.stats().allocated_bytes == bytes);
    CHECK(dk::to_host(placed) == host);
  }
  m.clear();  // hands the memory back, so that the process's placement pool can take as much
  CHECK(sim::device_bytes_in_use(0) == 0u);

  // The process's placement pool (dk::place without a manager) has the same balanced budget.
  const auto placed = dk::place(host, gpu);
  CHECK(dk::default_memory(gpu).stats().max_size == bytes);
  CHECK(dk::to_host(placed) == host);
}

TEST_CASE("a budget is at most what the device had available when it was measured",
          "[.][sim][memory][budget][small_gpu]") {
  start_clean();
  const dk::device gpu = dk::device::cuda(0);
  const std::uint64_t share = dk::budget_for(dk::balanced{}, dk::device_kind::cuda, total_of(0)).budget_bytes;
  // Another library (or process) takes memory before the manager measures: half the share is left.
  const std::uint64_t left = share / 2;
  void* raw = nullptr;
  REQUIRE(cudaMalloc(&raw, static_cast<std::size_t>(free_now() - left)) == cudaSuccess);
  REQUIRE(free_now() == left);

  manager dm{dk::settings::without_environment()};
  const dk::memory_budget b = dm.budget(gpu);
  CHECK(b.budget_bytes == left);
  CHECK(b.capped_to_available);
  CHECK(b.available_bytes == std::optional<std::uint64_t>(left));
  CHECK(dm.memory_stats(gpu).bytes_limit == left);
  const auto bytes = static_cast<std::size_t>(b.budget_bytes);

  // All of it can be used; past it the pool says the budget is spent, not that CUDA refused.
  dk::device_memory& m = dm.memory(gpu);
  CHECK(m.stats().max_size == bytes);
  void* p = m.allocate(bytes);
  REQUIRE(p != nullptr);
  try {
    (void)m.allocate(4096);
    FAIL("allocated past the budget");
  } catch (const dk::out_of_memory& e) {
    CHECK_THAT(e.what(), Catch::Contains("would pass the budget") && Catch::Contains("available"));
  }
  m.deallocate(p, bytes);

  // The report shows the cap: in the text as a minimum, in JSON as two fields.
  const dk::device_report r = dm.report();
  std::ostringstream text;
  dk::write_text(text, r);
  CHECK_THAT(text.str(), Catch::Contains("available)"));
  const auto j = dk::to_json(r).at("devices").at(0).at("memory");
  CHECK(j.at("capped_to_available") == true);
  CHECK(j.at("available_bytes") == left);
  CHECK(j.at("budget_bytes") == left);

  // Measured once: memory freed later does not change the budget of this manager, a new one sees it.
  REQUIRE(cudaFree(raw) == cudaSuccess);
  CHECK(dm.budget(gpu).budget_bytes == left);
  manager later{dk::settings::without_environment()};
  CHECK(later.budget(gpu).budget_bytes == share);
  CHECK_FALSE(later.budget(gpu).capped_to_available);
}

TEST_CASE("memory this process's devicekit pools hold does not shrink a new budget",
          "[.][sim][memory][budget][small_gpu]") {
  start_clean();
  const dk::device gpu = dk::device::cuda(0);
  const std::uint64_t share = dk::budget_for(dk::balanced{}, dk::device_kind::cuda, total_of(0)).budget_bytes;
  const auto half = static_cast<std::size_t>(share / 2);
  manager first{dk::settings::without_environment()};
  dk::device_memory& m = first.memory(gpu);
  void* p = m.allocate(half);                                                             // live in one manager's pool
  const auto placed = dk::place(std::vector<float>(half / 2 / sizeof(float), 2.f), gpu);  // the process's pool
  CHECK(dk::pool_held_bytes(gpu) >= half + half / 2);
  CHECK(free_now() < share);  // the device itself has less free than a whole share

  manager second{dk::settings::without_environment()};
  const dk::memory_budget b = second.budget(gpu);
  CHECK(b.budget_bytes == share);
  CHECK_FALSE(b.capped_to_available);
  REQUIRE(b.available_bytes.has_value());
  CHECK(*b.available_bytes == free_now() + dk::pool_held_bytes(gpu));
  m.deallocate(p, half);
}

TEST_CASE("making a manager and its report creates no CUDA context; asking a budget does",
          "[sim][multi][budget][contexts]") {
  // Run alone in its process with 2 GPUs (tests/CMakeLists.txt); cuda:0 must stay untouched there.
  const int last = sim::device_count() - 1;
  REQUIRE(last > 0);
  const int before = sim::contexts_created(last);
  manager dm{dk::settings::without_environment()};
  const dk::device_report r = dm.report();
  CHECK(sim::contexts_created(last) == before);
  CHECK_FALSE(r.memory.at(static_cast<std::size_t>(last)).budget.available_bytes.has_value());
  CHECK(dm.budget(dk::device::cuda(last)).available_bytes.has_value());
  CHECK(sim::contexts_created(last) == 1);
  CHECK(sim::contexts_created(0) == 0);
}
