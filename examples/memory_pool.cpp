// memory_pool: a custom memory strategy, a profiled workload written as a Perfetto trace, and what
// an out-of-memory error says. Runs on a GPU or, without one, on the host pool. It checks the
// budget, the profiler's figures and the out-of-memory error against what it asked for, and exits
// with status 1, saying what is wrong, when any differs.
//
// Build: cmake --preset default && cmake --build --preset default --target memory_pool
// Run:   ./build/examples/memory_pool [trace.json]     then open the trace at https://ui.perfetto.dev
//        DEVICEKIT_MEMORY_DEBUG=1 ./build/examples/memory_pool   (source locations in leak reports)
#include <devicekit/devicekit.hpp>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace dk = devicekit;

// A custom strategy is a plain struct: a name and a fraction of total memory are required; the
// context headroom and the pool's configuration are optional. This one suits a GPU shared with
// other jobs: 40% of it, 256 MiB left for the CUDA context, larger chunks, eager defragmentation.
struct shared_gpu {
  static constexpr std::string_view name() noexcept { return "shared-gpu"; }
  static constexpr double fraction() noexcept { return 0.40; }
  static constexpr std::uint64_t headroom_bytes() noexcept { return 256ull << 20; }
  void configure_pool(dk::pool_config& config, const dk::memory_budget&) const {
    config.min_chunk_size = 8u << 20;
    config.defrag_threshold = 0.3;
  }
};

namespace {
std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

/// A pool with a 64 MiB budget on the same kind of memory as `dev`, to show an out-of-memory error.
std::unique_ptr<dk::device_memory> small_pool(dk::device dev) {
  dk::pool_config config;
  config.max_size = 64u << 20;
  config.budget = dk::compute_budget(128u << 20, 0.5, 0);  // "0.50 of 128 MiB" in the message
  if (dev.is_cuda()) {
    return std::make_unique<dk::memory_pool<dk::cuda_device_resource>>(dk::cuda_device_resource(dev.ordinal()), config);
  }
  return std::make_unique<dk::memory_pool<dk::host_resource>>(dk::host_resource{}, config);
}
}  // namespace

int main(int argc, char** argv) try {
  const std::string trace_path = argc > 1 ? argv[1] : "memory_pool.trace.json";
  dk::device_manager<dk::first_available<dk::cuda_detector, dk::cpu_detector>, shared_gpu> dm;
  const dk::device dev = dm.default_device();
  dk::device_memory& memory = dm.memory(dev);  // made now, on first use
  const dk::memory_budget& b = memory.budget();
  std::cout << "Strategy " << dm.strategy().name() << " on " << dev << ": budget " << mib(b.budget_bytes) << " = "
            << b.fraction << " x " << mib(b.total_bytes) << " total - " << mib(b.headroom_bytes) << " headroom\n";

  int failures = 0;
  const auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::cout << "memory_pool: FAILED: " << what << "\n";
      ++failures;
    }
  };
  // The budget, worked out here: 40% of the device's memory less shared_gpu's 256 MiB of headroom
  // (and any reserve for collectives).
  const std::uint64_t total = dm.properties(dev).total_memory_bytes;
  const double expected_budget = std::max(0.0, std::floor(0.40 * static_cast<double>(total)) -
                                                   static_cast<double>((256ull << 20) + b.collective_reserve_bytes));
  expect(b.total_bytes == total && b.headroom_bytes == (256ull << 20) &&
             static_cast<double>(b.budget_bytes) == expected_budget,
         "budget " + std::to_string(b.budget_bytes) + " bytes with " + std::to_string(b.headroom_bytes) +
             " of headroom, of " + std::to_string(b.total_bytes) + "; expected " + std::to_string(expected_budget) +
             " with " + std::to_string(256ull << 20) + ", of " + std::to_string(total));

  // A "training step": each layer keeps an activation and uses a scratch buffer; the backward
  // pass frees the activations. Every layer is a nested profiler scope.
  {
    dk::memory_profiler step(memory, "training step", {.record_timeline = true});
    std::vector<dk::device_buffer<float>> activations;
    std::size_t activation_bytes = 0;
    constexpr std::size_t scratch_bytes = (std::size_t{1} << 18) * sizeof(float);
    for (int layer = 0; layer < 8; ++layer) {
      dk::memory_profiler scope(memory, "forward layer " + std::to_string(layer));
      activations.emplace_back(std::size_t{1} << (16 + layer % 4), memory);
      activation_bytes += activations.back().size() * sizeof(float);
      dk::device_buffer<float> scratch(scratch_bytes / sizeof(float), memory);
    }
    {
      dk::memory_profiler scope(memory, "backward");
      while (!activations.empty()) activations.pop_back();
    }
    step.stop();
    std::cout << "Training step: peak " << step.peak_increase_bytes() << " bytes above the start, "
              << step.allocation_count() << " allocations, " << step.free_count() << " frees\n";
    // The peak is the last layer's: every activation and one scratch buffer (their sizes are
    // multiples of the pool's alignment, so nothing is rounded up).
    expect(step.peak_increase_bytes() == activation_bytes + scratch_bytes,
           "peak " + std::to_string(step.peak_increase_bytes()) + " bytes, expected " +
               std::to_string(activation_bytes + scratch_bytes));
    expect(step.allocation_count() == 16 && step.free_count() == 16,
           std::to_string(step.allocation_count()) + " allocations and " + std::to_string(step.free_count()) +
               " frees, expected 16 and 16");
    step.write_chrome_trace(trace_path);
    std::cout << "Wrote " << trace_path << " (" << step.timeline().size()
              << " samples): open it at https://ui.perfetto.dev or chrome://tracing\n";
  }

  const dk::pool_stats s = memory.stats();
  std::cout << "Pool on " << dev << ": " << s.allocated_bytes << " bytes allocated (peak " << s.peak_allocated_bytes
            << "), " << mib(s.reserved_bytes) << " reserved in " << s.chunk_count << " chunk(s), " << s.allocation_count
            << " allocations served, fragmentation " << s.fragmentation << "\n";
  expect(s.allocated_bytes == 0,
         std::to_string(s.allocated_bytes) + " bytes still allocated after the step, expected 0");
  memory.trim();
  std::cout << "After trim(): " << mib(memory.stats().reserved_bytes) << " reserved\n";

  // Out of memory: the pool first releases what it caches and retries, then explains.
  auto pool = small_pool(dev);
  void* big = pool->allocate(48u << 20);
  try {
    void* more = pool->allocate(32u << 20);
    expect(false, "a 32 MiB allocation next to 48 MiB succeeded in a 64 MiB pool");
    pool->deallocate(more, 32u << 20);
  } catch (const dk::out_of_memory& e) {
    std::cout << "\nThe out-of-memory message:\n" << e.what() << "\n";
  }
  pool->deallocate(big, 48u << 20);
  return failures == 0 ? 0 : 1;
} catch (const dk::error& e) {
  std::cerr << "memory_pool: " << e.what() << "\n";
  return 2;
}
