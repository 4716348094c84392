#pragma once
// The randomized model check of a pool, one body for every upstream: long random sequences of
// allocate / deallocate (synchronous and on streams) / trim / defragment / clear / event
// completion / bad frees, against a reference model that knows every live allocation. After every
// step: no two live allocations overlap, every alignment is honoured, the bytes written into each
// allocation survive until it is freed, and the stats equal the model's; where the upstream can
// tell, reserved bytes equal what it handed out; every `check_every` steps the pool's own
// invariants are walked (check_consistency). The host test (tests/cpu/test_memory_model.cpp) runs
// it on host memory with simulated streams, the GPU test (tests/gpu/test_memory_gpu.cu, compiled
// by nvcc) on device memory with real streams: Kokkos's way of one test body per backend.
//
// A backend provides:
//   Pool& pool();                                 the pool under test
//   std::size_t stream_count();                   streams to use, stream(0) .. stream(n - 1)
//   devicekit::native_stream_handle stream(std::size_t i);
//   void write_tag(std::uintptr_t a, std::size_t bytes, std::uint64_t tag);   mark an allocation
//   bool tag_intact(std::uintptr_t a, std::size_t bytes, std::uint64_t tag);  the mark survived
//   void complete_events();                        work queued so far on every stream finished
//   void complete_events(devicekit::native_stream_handle s);                   ... on stream s
//   std::optional<std::size_t> upstream_outstanding();   bytes the upstream handed out, if known
#include <devicekit/memory/pool.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

namespace dk_test {

namespace dk = devicekit;

inline std::size_t env_number(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

struct model_options {
  std::size_t ops = 0;               ///< steps
  std::size_t target_live = 0;       ///< allocate more often while fewer bytes are live
  std::size_t max_bytes = 4u << 20;  ///< the largest request
  int max_alignment_log2 = 16;       ///< alignments up to 2^this
  std::size_t check_every = 4096;    ///< steps between full checks
  std::uint64_t seed = 20240611;     ///< DEVICEKIT_MODEL_CHECK_SEED overrides it
};

template <class Backend>
class pool_model_check {
 public:
  pool_model_check(Backend& backend, model_options options)
      : be_(backend), opt_(options), rng_(env_number("DEVICEKIT_MODEL_CHECK_SEED", options.seed)) {}

  /// Runs every step, frees what is left, and checks the pool is empty.
  void run() {
    INFO("seed " << env_number("DEVICEKIT_MODEL_CHECK_SEED", opt_.seed)
                 << " (set DEVICEKIT_MODEL_CHECK_SEED to replay), " << opt_.ops << " steps");
    for (std::size_t i = 0; i < opt_.ops; ++i) step(i);
    finish();
    CHECK(allocations_ > opt_.ops / 4);
    CHECK(frees_ == allocations_);
  }

 private:
  struct live_entry {
    std::size_t bytes;
    std::size_t alignment;
    std::uint64_t tag;
  };

  std::size_t pick(std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng_); }

  dk::native_stream_handle some_stream() { return be_.stream(pick(0, be_.stream_count() - 1)); }

  std::size_t random_size() {
    const std::size_t r = pick(0, 99);
    if (r == 0) return 0;
    if (r < 50) return pick(1, 16 * 1024);
    if (r < 85) return pick(16 * 1024 + 1, 256 * 1024);
    return pick(256 * 1024 + 1, opt_.max_bytes);
  }

  void allocate() {
    auto& pool = be_.pool();
    const std::size_t bytes = random_size();
    const std::size_t alignment =
        pick(0, 4) == 0 ? std::size_t{1} << pick(0, static_cast<std::size_t>(opt_.max_alignment_log2)) : 256;
    const bool ordered = pick(0, 1) == 1;
    void* p = nullptr;
    try {
      p = ordered ? pool.allocate_async(bytes, alignment, some_stream()) : pool.allocate(bytes, alignment);
    } catch (const dk::out_of_memory& e) {
      ++ooms_;
      REQUIRE(e.requested_bytes() == bytes);
      REQUIRE(e.stats().allocated_bytes == allocated_);
      return;
    }
    if (bytes == 0) {
      REQUIRE(p == nullptr);
      return;
    }
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    REQUIRE(p != nullptr);
    REQUIRE(a % std::max<std::size_t>(alignment, 256) == 0);
    auto next = live_.lower_bound(a);
    if (next != live_.end()) REQUIRE(a + bytes <= next->first);
    if (next != live_.begin()) {
      const auto prev = std::prev(next);
      REQUIRE(prev->first + prev->second.bytes <= a);
    }
    const std::uint64_t tag = next_tag_++ * 0x9E3779B97F4A7C15ull;
    be_.write_tag(a, bytes, tag);
    live_.emplace(a, live_entry{bytes, alignment, tag});
    allocated_ += bytes;
    peak_ = std::max(peak_, allocated_);
    ++allocations_;
  }

  typename std::map<std::uintptr_t, live_entry>::iterator random_live() {
    auto it = live_.lower_bound(static_cast<std::uintptr_t>(rng_()));
    return it == live_.end() ? live_.begin() : it;
  }

  void deallocate() {
    if (live_.empty()) return;
    auto& pool = be_.pool();
    const auto it = random_live();
    const auto [a, e] = *it;
    REQUIRE(be_.tag_intact(a, e.bytes, e.tag));
    if (pick(0, 1) == 0) {
      pool.deallocate(reinterpret_cast<void*>(a), e.bytes, e.alignment);
    } else {
      pool.deallocate_async(reinterpret_cast<void*>(a), e.bytes, e.alignment, some_stream());
    }
    live_.erase(it);
    allocated_ -= e.bytes;
    ++frees_;
    recently_freed_.push_back(a);
    if (recently_freed_.size() > 64) recently_freed_.erase(recently_freed_.begin());
  }

  void bad_free() {
    auto& pool = be_.pool();
    const dk::pool_stats before = pool.stats();
    switch (pick(0, 2)) {
      case 0: {  // double free of an address that is not live now
        if (recently_freed_.empty()) return;
        const std::uintptr_t a = recently_freed_[pick(0, recently_freed_.size() - 1)];
        if (live_.count(a) != 0) return;
        REQUIRE_THROWS_AS(pool.deallocate(reinterpret_cast<void*>(a), 256), dk::invalid_free);
        break;
      }
      case 1: {  // wrong size
        if (live_.empty()) return;
        const auto it = random_live();
        REQUIRE_THROWS_AS(pool.deallocate(reinterpret_cast<void*>(it->first), it->second.bytes + 1), dk::invalid_free);
        break;
      }
      default: REQUIRE_THROWS_AS((void)pool.allocate(64, 3 * 256), dk::invalid_request); break;
    }
    REQUIRE(pool.stats() == before);
  }

  void check_stats() {
    const auto s = be_.pool().stats();
    REQUIRE(s.allocated_bytes == allocated_);
    REQUIRE(s.peak_allocated_bytes == peak_);
    REQUIRE(s.active_blocks == live_.size());
    REQUIRE(s.allocation_count == allocations_);
    REQUIRE(s.free_count == frees_);
    REQUIRE(s.oom_count == ooms_);
    if (const std::optional<std::size_t> outstanding = be_.upstream_outstanding()) {
      REQUIRE(s.reserved_bytes == *outstanding);
    }
    REQUIRE(s.in_use_bytes >= s.allocated_bytes);
    REQUIRE(s.reserved_bytes >= s.in_use_bytes);
    REQUIRE(s.reserved_bytes <= s.max_size);
    REQUIRE(s.free_bytes == s.reserved_bytes - s.in_use_bytes);
    REQUIRE(s.largest_free_block <= s.free_bytes);
    REQUIRE(s.fragmentation >= 0.0);
    REQUIRE(s.fragmentation <= 1.0);
  }

  void step(std::size_t i) {
    auto& pool = be_.pool();
    const std::size_t r = pick(0, 999);
    const bool below = allocated_ < opt_.target_live;
    if (r < (below ? 560u : 380u)) {
      allocate();
    } else if (r < 950) {
      deallocate();
    } else if (r < 975) {
      if (pick(0, 1) == 0) {
        be_.complete_events();
      } else {
        be_.complete_events(some_stream());
      }
    } else if (r < 985) {
      pool.trim();
    } else if (r < 990) {
      (void)pool.defragment(pick(0, 1) == 1);
    } else if (r < 991) {
      pool.clear();
    } else if (r < 995) {
      bad_free();
    } else {
      check_stats();
    }
    if (i % opt_.check_every == 0) {
      check_stats();
      pool.check_consistency();
    }
  }

  void finish() {
    auto& pool = be_.pool();
    while (!live_.empty()) deallocate();
    check_stats();
    pool.check_consistency();
    pool.clear();
    if (const std::optional<std::size_t> outstanding = be_.upstream_outstanding()) REQUIRE(*outstanding == 0);
    REQUIRE(pool.stats().reserved_bytes == 0);
    REQUIRE(pool.stats().pending_stream_frees == 0);
  }

  Backend& be_;
  model_options opt_;
  std::mt19937_64 rng_;
  std::map<std::uintptr_t, live_entry> live_;
  std::vector<std::uintptr_t> recently_freed_;
  std::size_t allocated_ = 0;
  std::size_t peak_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t frees_ = 0;
  std::uint64_t ooms_ = 0;
  std::uint64_t next_tag_ = 1;
};

/// Runs the model check on `backend` with `options`.
template <class Backend>
void run_model_check(Backend& backend, model_options options) {
  pool_model_check<Backend>(backend, options).run();
}

}  // namespace dk_test
