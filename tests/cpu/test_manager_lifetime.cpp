// What a manager's pools hand out may outlive the manager: a placed tree, a buffer. The registry
// keeps each pool that still has live allocations when its manager goes, and destroys it with the
// last of them; pools with nothing live go with the manager.
#include <catch2/catch.hpp>

#include <devicekit/manager.hpp>
#include <devicekit/memory/buffer.hpp>
#include <devicekit/memory/registry.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace dk = devicekit;

namespace {

using host_manager = dk::device_manager<dk::cpu_detector>;

/// The host pools the process's registry keeps for managers that are gone while something
/// allocated from them lives.
std::size_t host_pools_held() {
  std::size_t n = 0;
  dk::detail::process_memory::instance().visit_kept(dk::device::cpu(), dk::memory_kind::host,
                                                    [&](const dk::device_memory&) { ++n; });
  return n;
}

/// A common pattern: a function makes a manager of its own and returns what it placed.
auto placed_by_a_local_manager(const std::vector<float>& values) {
  host_manager dm{dk::settings::without_environment()};
  return dm.place(values);
}

}  // namespace

TEST_CASE("a tree a manager placed may outlive the manager; the pool goes with the tree", "[manager][lifetime]") {
  const std::vector<float> values(4096, 2.5f);
  const std::size_t held = host_pools_held();
  {
    const auto placed = placed_by_a_local_manager(values);
    CHECK(host_pools_held() == held + 1);  // kept for the tree
    CHECK(dk::to_host(placed) == values);  // its memory is still the tree's
    // Another manager's figures of the host count the tree, as they count the process's pools.
    host_manager other{dk::settings::without_environment()};
    CHECK(other.memory_stats(dk::device::cpu()).bytes_in_use >= values.size() * sizeof(float));
    CHECK(other.live_buffers(dk::device::cpu()).size() >= 1);
  }
  CHECK(host_pools_held() == held);  // destroyed with the tree's block

  // Nothing live when the manager goes: its pools go with it, as they always did.
  {
    host_manager dm{dk::settings::without_environment()};
    { const auto gone = dm.place(values); }
    void* p = dm.memory().allocate(1000);
    dm.memory().deallocate(p, 1000);
  }
  CHECK(host_pools_held() == held);
}

TEST_CASE("a buffer of a manager's pool may outlive the manager", "[manager][lifetime]") {
  const std::size_t held = host_pools_held();
  // A unique_ptr, not std::optional: GCC 12 at -O2 takes optional's payload for uninitialised
  // in the destructor's inlined reset (-Wmaybe-uninitialized, a false positive).
  std::unique_ptr<dk::device_buffer<int>> buffer;
  dk::device_memory* pool = nullptr;
  {
    host_manager dm{dk::settings::without_environment()};
    pool = &dm.memory();
    void* cached = pool->allocate(std::size_t{8} << 20);  // a chunk of its own, freed: cached
    buffer = std::make_unique<dk::device_buffer<int>>(1000, *pool);
    pool->deallocate(cached, std::size_t{8} << 20);
  }
  REQUIRE(host_pools_held() == held + 1);
  // The kept pool gave its cache back: it holds only the chunk of the live buffer.
  CHECK(pool->stats().reserved_bytes < (std::size_t{8} << 20));
  CHECK(pool->stats().active_blocks == 1);
  for (std::size_t i = 0; i < buffer->size(); ++i) buffer->host_span()[i] = static_cast<int>(i);
  CHECK(buffer->host_span()[999] == 999);
  buffer.reset();
  CHECK(host_pools_held() == held);
}

TEST_CASE("trees that outlive their manager may be dropped on several threads at once", "[manager][lifetime]") {
  const std::size_t held = host_pools_held();
  constexpr int threads = 4;
  constexpr int per_thread = 16;
  using tree = decltype(placed_by_a_local_manager(std::vector<float>{}));
  std::vector<std::vector<tree>> trees(threads);
  {
    host_manager dm{dk::settings::without_environment()};
    for (int t = 0; t < threads; ++t) {
      for (int i = 0; i < per_thread; ++i) trees[t].push_back(dm.place(std::vector<float>(256 + 64 * i, 1.0f)));
    }
  }
  CHECK(host_pools_held() == held + 1);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&trees, t] {
      while (!trees[t].empty()) trees[t].pop_back();
    });
  }
  for (auto& w : workers) w.join();
  CHECK(host_pools_held() == held);  // destroyed once, by whichever thread freed last
}
