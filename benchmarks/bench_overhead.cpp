// Zero overhead, measured against the program an expert writes by hand. Every row is named
// overhead.<operation>.vs_hand_written; ratio = hand-written time / devicekit time, both measured
// in this run, interleaved (bench::interleaved_medians), the median of N samples, each sample a
// batch of calls so that sub-microsecond operations are timed above the clock's resolution. The
// goal is ratio >= 0.95 (no slower within 5%). Each many-leaf row's note gives the host
// nanoseconds per leaf of both sides.
//
// cpu (always):
//   overhead.place.vs_hand_written.<shape>     dk::place(tree, cpu, stream, pool) (warm pool) vs
//                                              one malloc of the total and a memcpy per leaf, the
//                                              result owning its memory (freed after, as the
//                                              placed tree's is) with a list of the leaves' spans
//   overhead.to_host.vs_hand_written.<shape>   dk::to_host(placed) vs a std::vector<float> per leaf
//                                              built from the hand-written placement's spans
//   overhead.transform.vs_hand_written.<shape> tree_transform(t, x -> 2x + 1, t) on the placed
//                                              tree vs a loop over the leaves' elements
//   overhead.pool_churn.vs_hand_written        memory_pool allocate/deallocate of mixed sizes vs
//                                              a hand-rolled power-of-two size-class free list
//   overhead.manager_place.vs_hand_written.<shape>  dm.place(x, cpu) vs dk::place(x, cpu, pool)
//                                              on the manager's own pool
//   shapes: 1x16f, 100x16f, 10000x16f (leaves of 16 floats) and 1024x4KiB
// cuda (with a GPU at run time):
//   overhead.place.vs_hand_written.<shape>     dk::place(tree, gpu, s, pool) + synchronize (warm
//                                              pool) vs pack into a pinned buffer, one
//                                              cudaMemcpyAsync, one cudaStreamSynchronize (buffers
//                                              made once, as an expert's loop would)
//   overhead.to_host.vs_hand_written.<shape>   dk::to_host(placed, s) vs one cudaMemcpyAsync into
//                                              a pinned buffer, one synchronize, unpack per leaf
#include "bench_common.hpp"

#include <devicekit/compute/transform.hpp>
#include <devicekit/devicekit.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dk = devicekit;

namespace {

using tree_type = std::vector<std::vector<float>>;

struct shape {
  const char* name;
  std::size_t leaves;
  std::size_t floats_each;
};
constexpr shape shapes[] = {
    {"1x16f", 1, 16}, {"100x16f", 100, 16}, {"10000x16f", 10000, 16}, {"1024x4KiB", 1024, 1024}};

tree_type make_tree(const shape& sh) {
  tree_type t(sh.leaves, std::vector<float>(sh.floats_each));
  float x = 1.f;
  for (auto& l : t) {
    for (auto& v : l) v = (x += 0.25f);
  }
  return t;
}

/// What the hand-written placement on the host produces: one block that it owns, and where each
/// leaf is in it.
struct hand_placed {
  std::unique_ptr<std::byte, decltype(&std::free)> block{nullptr, &std::free};
  std::vector<std::span<float>> leaves;
};

[[gnu::noinline]] hand_placed hand_place_host(const tree_type& t) {
  std::size_t total = 0;
  for (const auto& l : t) total += l.size() * sizeof(float);
  hand_placed out;
  out.block.reset(static_cast<std::byte*>(std::malloc(total)));
  if (out.block == nullptr) std::abort();
  out.leaves.reserve(t.size());
  std::size_t at = 0;
  for (const auto& l : t) {
    auto* dst = reinterpret_cast<float*>(out.block.get() + at);
    std::memcpy(dst, l.data(), l.size() * sizeof(float));
    out.leaves.emplace_back(dst, l.size());
    at += l.size() * sizeof(float);
  }
  return out;
}

/// The hand-written placement again, giving each leaf a shared owner of the block as a placed
/// leaf has (device_array: a std::shared_ptr, the data, the size, the device): the part of
/// devicekit's per-leaf cost that its result type asks for.
struct owned_leaf {
  std::shared_ptr<void> owner;
  float* data;
  std::size_t size;
  dk::device device;
};
[[gnu::noinline]] std::vector<owned_leaf> hand_place_host_owned(const tree_type& t) {
  std::size_t total = 0;
  for (const auto& l : t) total += l.size() * sizeof(float);
  std::shared_ptr<void> block(std::malloc(total), &std::free);
  if (block == nullptr) std::abort();
  std::vector<owned_leaf> out;
  out.reserve(t.size());
  std::size_t at = 0;
  for (const auto& l : t) {
    auto* dst = reinterpret_cast<float*>(static_cast<std::byte*>(block.get()) + at);
    std::memcpy(dst, l.data(), l.size() * sizeof(float));
    out.push_back({block, dst, l.size(), dk::device::cpu()});
    at += l.size() * sizeof(float);
  }
  return out;
}

[[gnu::noinline]] tree_type hand_to_host(const hand_placed& p) {
  tree_type out;
  out.reserve(p.leaves.size());
  for (const auto& l : p.leaves) out.emplace_back(l.begin(), l.end());
  return out;
}

/// Calls per sample: about a millisecond of work (a guess from the bytes and leaves), so that each
/// sample is well above the clock's resolution whatever the shape.
int reps_for(const shape& sh) {
  const std::size_t bytes = sh.leaves * sh.floats_each * sizeof(float);
  const std::size_t r = 2'000'000 / (bytes + 64 * sh.leaves + 500);
  return static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(r, 20000)));
}

template <class F>
auto repeated(int reps, F f) {
  return [reps, f]() mutable {
    for (int r = 0; r < reps; ++r) f();
  };
}

void add_row(bench::report& report, const std::string& name, const char* device, const shape& sh, double ours,
             double hand, const std::string& what, const std::string& baseline, const std::string& extra = "") {
  char note[256];
  std::snprintf(note, sizeof note, "goal >= 0.95; per leaf: devicekit %.1f ns, hand-written %.1f ns%s%s",
                ours * 1e9 / static_cast<double>(sh.leaves), hand * 1e9 / static_cast<double>(sh.leaves),
                extra.empty() ? "" : "; ", extra.c_str());
  report.add(
      {name + "." + sh.name, device, what + " " + sh.name, ours * 1e6, "us", baseline, hand * 1e6, hand / ours, note});
}

void cpu_entries(const bench::options& opt, bench::report& report) {
  const dk::stream host_stream;
  auto& pool = dk::default_memory(dk::device::cpu());
  const int samples = opt.quick ? 15 : 61;
  for (const shape& sh : shapes) {
    const tree_type t = make_tree(sh);
    const int reps = reps_for(sh);
    volatile std::size_t sink = 0;

    // place
    auto ours_place = [&] {
      auto placed = dk::place(t, dk::device::cpu(), host_stream, pool);
      sink = sink + placed.size();
    };
    auto hand_place = [&] {
      auto placed = hand_place_host(t);
      sink = sink + placed.leaves.size();
    };
    auto hand_place_owned = [&] {
      auto placed = hand_place_host_owned(t);
      sink = sink + placed.size();
    };
    {
      const auto [o, h, ho] = bench::interleaved_medians(samples, repeated(reps, ours_place),
                                                         repeated(reps, hand_place), repeated(reps, hand_place_owned));
      char owned[96];
      std::snprintf(owned, sizeof owned, "hand-written with a shared owner per leaf: %.1f ns",
                    ho / reps * 1e9 / static_cast<double>(sh.leaves));
      add_row(report, "overhead.place.vs_hand_written", "cpu", sh, o / reps, h / reps, "time to place",
              "one malloc + a memcpy per leaf (owned, freed)", owned);
    }

    // to_host
    {
      const auto placed = dk::place(t, dk::device::cpu(), host_stream, pool);
      const auto hand = hand_place_host(t);
      if (dk::to_host(placed) != t || hand_to_host(hand) != t) std::abort();
      auto ours_back = [&] {
        auto back = dk::to_host(placed);
        sink = sink + back.size();
      };
      auto hand_back = [&] {
        auto back = hand_to_host(hand);
        sink = sink + back.size();
      };
      const auto [o, h] = bench::interleaved_medians(samples, repeated(reps, ours_back), repeated(reps, hand_back));
      add_row(report, "overhead.to_host.vs_hand_written", "cpu", sh, o / reps, h / reps, "time to bring back",
              "a std::vector<float> per leaf from the spans");
    }

    // transform: x -> 2x + 1 in place, on both sides' placed trees.
    {
      auto placed = dk::place(t, dk::device::cpu(), host_stream, pool);
      auto hand = hand_place_host(t);
      auto ours_tf = [&] {
        dk::tree_transform(
            placed, [](float x) { return 0.5f * x + 1.f; }, placed);
      };
      auto hand_tf = [&] {
        for (auto& l : hand.leaves) {
          for (float& x : l) x = 0.5f * x + 1.f;
        }
      };
      // What the hand-written loop skips: before writing any element, tree_transform checks that
      // every leaf of its trees is on one device (device_of's walk), so that a mixed tree is
      // refused with nothing changed. Timed alone, for the note.
      auto check_only = [&] {
        const auto d = dk::device_of(placed);
        sink = sink + static_cast<std::size_t>(d.has_value());
      };
      const auto [o, h, c] = bench::interleaved_medians(samples, repeated(reps, ours_tf), repeated(reps, hand_tf),
                                                        repeated(reps, check_only));
      // Both sides ran the same number of steps from the same values: they must agree.
      if (dk::to_host(placed) != hand_to_host(hand)) std::abort();
      char check[112];
      std::snprintf(check, sizeof check, "of which the check that all leaves share a device (device_of): %.1f ns",
                    c / reps * 1e9 / static_cast<double>(sh.leaves));
      add_row(report, "overhead.transform.vs_hand_written", "cpu", sh, o / reps, h / reps,
              "time of tree_transform(x -> x/2 + 1) on", "a loop over each leaf's elements", check);
    }

    // The manager adds nothing.
    {
      dk::device_manager<dk::cpu_detector, dk::balanced, dk::single_device> dm;
      auto& mpool = dm.memory(dk::device::cpu());
      auto via_manager = [&] {
        auto placed = dm.place(t, dk::device::cpu());
        sink = sink + placed.size();
      };
      auto direct = [&] {
        auto placed = dk::place(t, dk::device::cpu(), mpool);
        sink = sink + placed.size();
      };
      const auto [o, h] = bench::interleaved_medians(samples, repeated(reps, via_manager), repeated(reps, direct));
      add_row(report, "overhead.manager_place.vs_hand_written", "cpu", sh, o / reps, h / reps, "time of dm.place",
              "dk::place(x, cpu, pool) on the manager's pool");
    }
  }

  // Pool churn: a fixed random sequence of allocations (64 B to 64 KiB) and frees, at most 256 live.
  {
    std::vector<std::size_t> sizes;
    std::uint32_t rng = 12345;
    for (int i = 0; i < 4096; ++i) {
      rng = rng * 1664525u + 1013904223u;
      sizes.push_back(std::size_t{64} << ((rng >> 16) % 11));
    }
    dk::memory_pool<dk::host_resource> mp{dk::host_resource{}};
    std::vector<std::pair<void*, std::size_t>> live(256, {nullptr, 0});
    auto ours = [&] {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto& slot = live[i % live.size()];
        if (slot.first != nullptr) mp.deallocate(slot.first, slot.second);
        slot = {mp.allocate(sizes[i]), sizes[i]};
      }
    };
    // The hand-rolled pool: power-of-two size classes, each a stack of freed blocks, blocks from
    // malloc and kept (what CUB's CachingDeviceAllocator does with its bins).
    struct free_lists {
      std::vector<void*> bins[32];
      static unsigned bin_of(std::size_t n) {
        return n <= 1 ? 0u : 64u - static_cast<unsigned>(__builtin_clzll(n - 1));
      }
      void* allocate(std::size_t n) {
        auto& b = bins[bin_of(n)];
        if (!b.empty()) {
          void* p = b.back();
          b.pop_back();
          return p;
        }
        void* p = std::aligned_alloc(256, std::size_t{1} << bin_of(n));
        if (p == nullptr) std::abort();
        return p;
      }
      void deallocate(void* p, std::size_t n) { bins[bin_of(n)].push_back(p); }
      ~free_lists() {
        for (auto& b : bins) {
          for (void* p : b) std::free(p);
        }
      }
    } fl;
    std::vector<std::pair<void*, std::size_t>> live2(256, {nullptr, 0});
    auto hand = [&] {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto& slot = live2[i % live2.size()];
        if (slot.first != nullptr) fl.deallocate(slot.first, slot.second);
        slot = {fl.allocate(sizes[i]), sizes[i]};
      }
    };
    // The same free lists shared between threads, as a pool is: each call under a lock.
    free_lists fl_locked;
    std::mutex fl_mutex;
    std::vector<std::pair<void*, std::size_t>> live3(256, {nullptr, 0});
    auto hand_locked = [&] {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto& slot = live3[i % live3.size()];
        if (slot.first != nullptr) {
          const std::lock_guard lock(fl_mutex);
          fl_locked.deallocate(slot.first, slot.second);
        }
        const std::lock_guard lock(fl_mutex);
        slot = {fl_locked.allocate(sizes[i]), sizes[i]};
      }
    };
    const auto [o, h, hl] = bench::interleaved_medians(opt.quick ? 15 : 61, ours, hand, hand_locked);
    char note[256];
    const auto n = static_cast<double>(sizes.size());
    std::snprintf(note, sizeof note,
                  "goal >= 0.95; per allocate+deallocate: devicekit %.1f ns, hand-written %.1f ns; "
                  "hand-written behind a std::mutex: %.1f ns",
                  o * 1e9 / n, h * 1e9 / n, hl * 1e9 / n);
    report.add({"overhead.pool_churn.vs_hand_written", "cpu", "time of 4096 allocate/deallocate pairs, 64 B to 64 KiB",
                o * 1e6, "us", "power-of-two size-class free lists over aligned_alloc", h * 1e6, h / o, note});
    for (auto& s : live) {
      if (s.first != nullptr) mp.deallocate(s.first, s.second);
    }
    for (auto& s : live2) {
      if (s.first != nullptr) fl.deallocate(s.first, s.second);
    }
  }
}

#if DEVICEKIT_HAS_CUDA
void cuda_entries(const bench::options& opt, bench::report& report, dk::device gpu) {
  const dk::scoped_device on(gpu.ordinal());
  const dk::stream s(gpu);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(gpu.ordinal())};
  const int samples = opt.quick ? 15 : 41;
  for (const shape& sh : shapes) {
    const tree_type t = make_tree(sh);
    const std::size_t bytes = sh.leaves * sh.floats_each * sizeof(float);
    std::byte* staging = nullptr;
    std::byte* dev = nullptr;
    DEVICEKIT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging), bytes));
    DEVICEKIT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dev), bytes));
    const int reps = std::max(1, reps_for(sh) / 8);
    auto ours = [&] {
      auto placed = dk::place(t, gpu, s, pool);
      s.synchronize();
    };
    auto hand = [&] {
      std::size_t at = 0;
      for (const auto& l : t) {
        std::memcpy(staging + at, l.data(), l.size() * sizeof(float));
        at += l.size() * sizeof(float);
      }
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(dev, staging, at, cudaMemcpyHostToDevice, s.native_handle()));
      s.synchronize();
    };
    {
      const auto [o, h] = bench::interleaved_medians(samples, repeated(reps, ours), repeated(reps, hand));
      add_row(report, "overhead.place.vs_hand_written", "cuda", sh, o / reps, h / reps, "time to place (pageable)",
              "pack into pinned staging, one cudaMemcpyAsync, one sync");
    }
    {
      const auto placed = dk::place(t, gpu, s, pool);
      s.synchronize();
      auto ours_back = [&] {
        auto back = dk::to_host(placed, s);
        if (back.size() != t.size()) std::abort();
      };
      auto hand_back = [&] {
        DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(staging, dev, bytes, cudaMemcpyDeviceToHost, s.native_handle()));
        s.synchronize();
        tree_type back;
        back.reserve(t.size());
        std::size_t at = 0;
        for (const auto& l : t) {
          const auto* p = reinterpret_cast<const float*>(staging + at);
          back.emplace_back(p, p + l.size());
          at += l.size() * sizeof(float);
        }
        if (back.size() != t.size()) std::abort();
      };
      const auto [o, h] = bench::interleaved_medians(samples, repeated(reps, ours_back), repeated(reps, hand_back));
      add_row(report, "overhead.to_host.vs_hand_written", "cuda", sh, o / reps, h / reps, "time to bring back",
              "one cudaMemcpyAsync into pinned staging, one sync, unpack");
    }
    DEVICEKIT_CUDA_CHECK(cudaFreeHost(staging));
    DEVICEKIT_CUDA_CHECK(cudaFree(dev));
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  cpu_entries(opt, report);
#if DEVICEKIT_HAS_CUDA
  if (dk::cuda_detector{}.detect(dk::settings{}).gpu_count > 0) cuda_entries(opt, report, dk::device::cuda(0));
#endif
  report.write(opt.json_path);
  return 0;
}
