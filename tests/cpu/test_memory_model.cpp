// The randomized model check of the pool on host memory with simulated streams (the body, shared
// with the GPU test, is in memory_model_check.hpp): long random sequences of allocate / deallocate
// (synchronous and on simulated streams) / trim / defragment / clear / event completion / bad
// frees, against a reference model that knows every live allocation. After every step: no two live
// allocations overlap, every alignment is honoured, the bytes written into each allocation survive
// until it is freed, and the stats equal the model's; reserved bytes equal what the upstream handed
// out; every few thousand steps the pool's own invariants are walked (check_consistency).
//
// Steps: DEVICEKIT_MODEL_CHECK_OPS if set; otherwise 1,200,000 under AddressSanitizer (the
// sanitizer suite), 200,000 in an optimised build, 50,000 in other builds (ThreadSanitizer).
// DEVICEKIT_MODEL_CHECK_SEED picks the random sequence (the failing seed is printed).
#include "memory_model_check.hpp"
#include "memory_test_support.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <optional>

namespace dk = devicekit;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t default_ops = 1'200'000;
#elif defined(NDEBUG)
constexpr std::size_t default_ops = 200'000;
#else
constexpr std::size_t default_ops = 50'000;
#endif

/// Host memory from a counting upstream with simulated streams and events (memory_test_support.hpp):
/// event_upstream records an event at every stream-ordered free; fenced_upstream has a device-wide
/// fence, so that events are recorded only when another stream needs the frees.
template <class Upstream = dk_test::event_upstream>
struct host_backend {
  Upstream up;
  dk::memory_pool<Upstream> pool_;

  explicit host_backend(dk::pool_config cfg) : pool_(up, std::move(cfg)) {}

  dk::memory_pool<Upstream>& pool() { return pool_; }
  static std::size_t stream_count() { return 3; }
  static dk::native_stream_handle stream(std::size_t i) { return dk_test::fake_stream(i + 1); }

  static void write_tag(std::uintptr_t a, std::size_t bytes, std::uint64_t tag) {
    auto* p = reinterpret_cast<unsigned char*>(a);
    if (bytes >= 16) {
      std::memcpy(p, &tag, 8);
      std::memcpy(p + bytes - 8, &tag, 8);
    } else {
      p[bytes - 1] = static_cast<unsigned char>(tag >> 8);
      p[0] = static_cast<unsigned char>(tag);  // last: for 1 byte, the first byte is the tag
    }
  }
  static bool tag_intact(std::uintptr_t a, std::size_t bytes, std::uint64_t tag) {
    const auto* p = reinterpret_cast<const unsigned char*>(a);
    if (bytes >= 16) {
      std::uint64_t x = 0;
      std::uint64_t y = 0;
      std::memcpy(&x, p, 8);
      std::memcpy(&y, p + bytes - 8, 8);
      return x == tag && y == tag;
    }
    return p[0] == static_cast<unsigned char>(tag) &&
           (bytes == 1 || p[bytes - 1] == static_cast<unsigned char>(tag >> 8));
  }

  void complete_events() { up.complete_events(); }
  void complete_events(dk::native_stream_handle s) { up.complete_events(s); }
  std::optional<std::size_t> upstream_outstanding() const { return up.outstanding(); }
};

template <class Upstream = dk_test::event_upstream>
void run(dk::pool_config cfg, std::size_t ops, std::size_t target_live) {
  host_backend<Upstream> backend(std::move(cfg));
  dk_test::model_options options;
  options.ops = ops;
  options.target_live = target_live;
  dk_test::run_model_check(backend, options);
}

}  // namespace

TEST_CASE("model check: random operations against a reference model", "[memory][pool][model]") {
  const std::size_t ops = dk_test::env_number("DEVICEKIT_MODEL_CHECK_OPS", default_ops);
  auto cfg = dk_test::test_config(64u << 20);
  run(cfg, ops, 32u << 20);
}

TEST_CASE("model check: no size classes, doubling growth, a tight budget", "[memory][pool][model]") {
  const std::size_t ops = dk_test::env_number("DEVICEKIT_MODEL_CHECK_OPS", default_ops) / 4;
  auto cfg = dk_test::test_config(24u << 20);
  cfg.small_size_limit = 0;
  cfg.growth_factor = 2.0;
  cfg.max_chunk_size = 8u << 20;
  cfg.initial_size = 4u << 20;
  run(cfg, ops, 20u << 20);
}

TEST_CASE("model check: an upstream with a fence, events only when another stream needs them",
          "[memory][pool][model]") {
  const std::size_t ops = dk_test::env_number("DEVICEKIT_MODEL_CHECK_OPS", default_ops) / 2;
  auto cfg = dk_test::test_config(24u << 20);  // tight: the fence is reached
  cfg.growth_factor = 2.0;
  cfg.max_chunk_size = 8u << 20;
  host_backend<dk_test::fenced_upstream> backend(cfg);
  dk_test::model_options options;
  options.ops = ops;
  options.target_live = 20u << 20;
  dk_test::run_model_check(backend, options);
  // Both ways of handing frees to another stream were taken: an event asked for, and the fence.
  CHECK(backend.up.state().records > 0);
  CHECK(backend.up.state().fences > 0);
}
