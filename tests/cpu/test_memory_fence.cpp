// Stream-ordered frees over an upstream with a device-wide fence (fenced_upstream, standing in for
// cuda_device_resource): one stream allocating and freeing records no event; an event is recorded
// on a stream only at its own next allocation or free after another stream asked for its memory;
// the fence takes in frees no event covers, destroyed streams' included; streams the fence does
// not cover keep an event per free.
#include "memory_test_support.hpp"

#include <catch2/catch.hpp>

#include <vector>

namespace dk = devicekit;
using namespace dk_test;

namespace {
constexpr std::size_t MiB = 1u << 20;
}  // namespace

TEST_CASE("one stream allocating and freeing records no event over a fenced upstream", "[memory][pool][stream]") {
  fenced_upstream up;
  dk::memory_pool<fenced_upstream> pool(up, test_config());
  const auto s1 = fake_stream(1);
  std::vector<void*> live;
  for (int round = 0; round < 50; ++round) {
    for (std::size_t bytes : {100u, 3000u, 70000u, 1u << 20}) live.push_back(pool.allocate_async(bytes, 256, s1));
    std::size_t i = 0;
    for (std::size_t bytes : {100u, 3000u, 70000u, 1u << 20}) pool.deallocate_async(live[i++], bytes, 256, s1);
    live.clear();
  }
  CHECK(up.state().records == 0);
  CHECK(up.state().waits == 0);
  CHECK(up.state().fences == 0);
  CHECK(up.state().capture_queries == 400);  // the one upstream call per operation
  // The same stream reuses its frees at once: the pool did not grow past its first chunks.
  CHECK(pool.stats().upstream_allocations <= 2);
  pool.check_consistency();
}

TEST_CASE("another stream that runs short makes the owner record its event at its next use", "[memory][pool][stream]") {
  fenced_upstream up;
  dk::memory_pool<fenced_upstream> pool(up, exact_config(6 * MiB));
  const auto s1 = fake_stream(1);
  const auto s2 = fake_stream(2);
  void* p = pool.allocate_async(2 * MiB, 256, s1);
  void* other = pool.allocate_async(1 * MiB, 256, s1);
  pool.deallocate_async(p, 2 * MiB, 256, s1);
  CHECK(up.state().records == 0);

  // s2 finds nothing ready and nothing recorded: it grows, and asks s1 for an event.
  void* q = pool.allocate_async(2 * MiB, 256, s2);
  CHECK(q != p);
  CHECK(up.state().records == 0);
  CHECK(up.state().fences == 0);

  // s1's next use records it (s1 exists: the program is calling with it); later uses do not.
  pool.deallocate_async(other, 1 * MiB, 256, s1);
  CHECK(up.state().records == 1);
  other = pool.allocate_async(1 * MiB, 256, s1);
  pool.deallocate_async(other, 1 * MiB, 256, s1);
  CHECK(up.state().records == 1);

  // Once s1's work has finished, s2's free and a third stream take p without any wait.
  pool.deallocate_async(q, 2 * MiB, 256, s2);
  up.complete_events(s1);
  void* r = pool.allocate_async(2 * MiB, 256, fake_stream(3));
  CHECK(r == p);
  CHECK(up.state().waits == 0);
  CHECK(up.state().fences == 0);
  pool.deallocate_async(r, 2 * MiB, 256, fake_stream(3));
  pool.check_consistency();
}

TEST_CASE("at the budget the fence takes in frees of a destroyed stream without touching it",
          "[memory][pool][stream]") {
  fenced_upstream up;
  {
    dk::memory_pool<fenced_upstream> pool(up, exact_config(4 * MiB));
    const auto s1 = fake_stream(1);
    const auto s2 = fake_stream(2);
    void* p = pool.allocate_async(2 * MiB, 256, s1);
    void* p2 = pool.allocate_async(2 * MiB, 256, s1);
    pool.deallocate_async(p, 2 * MiB, 256, s1);
    pool.deallocate_async(p2, 2 * MiB, 256, s1);
    up.destroy_stream(s1);  // as cudaStreamDestroy: queued work still completes
    // The budget is full and s1 will never record: the fence orders its work.
    void* q = pool.allocate_async(2 * MiB, 256, s2);
    CHECK((q == p || q == p2));
    CHECK(up.state().fences == 1);
    CHECK(pool.stats().stream_fences == 1);
    CHECK(pool.stats().pending_stream_frees == 0);
    CHECK(up.state().records == 0);
    pool.deallocate_async(q, 2 * MiB, 256, s2);
    up.destroy_stream(s2);
    pool.check_consistency();
  }  // the destructor fences for s2's free: again without naming the stream
  CHECK(up.state().records_on_destroyed_streams == 0);
  CHECK(up.state().fences == 2);
  CHECK(up.outstanding() == 0);
}

TEST_CASE("release_stream keeps unrecorded frees apart until a fence", "[memory][pool][stream]") {
  fenced_upstream up;
  dk::memory_pool<fenced_upstream> pool(up, exact_config(8 * MiB));
  const auto s1 = fake_stream(1);
  void* p = pool.allocate_async(2 * MiB, 256, s1);
  pool.deallocate_async(p, 2 * MiB, 256, s1);
  pool.release_stream(s1);
  CHECK(up.state().records == 0);
  CHECK(up.state().waits == 0);
  CHECK(pool.stats().pending_stream_frees == 1);  // orphaned: no stream may take it yet
  // A new stream with s1's handle starts afresh: it does not inherit the old stream's free.
  void* q = pool.allocate_async(2 * MiB, 256, s1);
  CHECK(q != p);
  pool.deallocate_async(q, 2 * MiB, 256, s1);
  pool.release_stream(s1);
  CHECK(pool.stats().pending_stream_frees == 2);
  pool.clear();  // waits for everything: one fence for both orphans
  CHECK(up.state().fences == 1);
  CHECK(pool.stats().pending_stream_frees == 0);
  CHECK(pool.stats().reserved_bytes == 0);
  pool.check_consistency();
}

TEST_CASE("a stream the fence does not cover records an event at every free", "[memory][pool][stream]") {
  fenced_upstream up;
  dk::memory_pool<fenced_upstream> pool(up, exact_config(4 * MiB));
  const auto other_device = fake_stream(9);
  up.mark_foreign(other_device);
  void* p = pool.allocate_async(1 * MiB, 256, other_device);
  pool.deallocate_async(p, 1 * MiB, 256, other_device);
  CHECK(up.state().records == 1);
  p = pool.allocate_async(1 * MiB, 256, other_device);
  pool.deallocate_async(p, 1 * MiB, 256, other_device);
  CHECK(up.state().records == 2);
  // The fence does not stand for its event: at the budget the pool waits on the event.
  void* a = pool.allocate_async(2 * MiB, 256, fake_stream(1));
  void* b = pool.allocate_async(2 * MiB, 256, fake_stream(1));
  CHECK(up.state().fences == 0);
  CHECK(up.state().waits == 1);
  pool.deallocate_async(a, 2 * MiB, 256, fake_stream(1));
  pool.deallocate_async(b, 2 * MiB, 256, fake_stream(1));
  pool.check_consistency();
}

// A pool keeps a slot per stream that freed memory, numbered in 16 bits in its blocks' headers, so
// it serves at most 65,535 streams it has not been told to forget (docs/memory.md): one more is an
// invalid_request that says what to do, with nothing changed, and release_stream makes room. Over a
// fenced upstream a released stream's frees wait for a fence, so making room takes one.
TEST_CASE("a pool serves 65,535 streams; one more is refused until release_stream", "[memory][pool][stream]") {
  fenced_upstream up;
  dk::memory_pool<fenced_upstream> pool(up, test_config());
  constexpr std::uintptr_t limit = 65535;
  for (std::uintptr_t i = 1; i <= limit; ++i) {
    void* p = pool.allocate_async(256, 256, fake_stream(i));
    pool.deallocate_async(p, 256, 256, fake_stream(i));
  }
  const auto before = pool.stats();
  try {
    (void)pool.allocate_async(256, 256, fake_stream(limit + 1));
    FAIL("the 65,536th stream was served");
  } catch (const dk::invalid_request& e) {
    CHECK_THAT(e.what(), Catch::Contains("65535 streams") && Catch::Contains("release_stream"));
  }
  CHECK(pool.stats().allocated_bytes == before.allocated_bytes);
  CHECK(pool.stats().allocation_count == before.allocation_count);
  pool.check_consistency();
  pool.release_stream(fake_stream(1));
  const auto fences_before = up.state().fences;
  void* p = pool.allocate_async(256, 256, fake_stream(limit + 1));
  CHECK(up.state().fences == fences_before + 1);
  pool.deallocate_async(p, 256, 256, fake_stream(limit + 1));
  pool.check_consistency();
  // The slot is the released stream's: the stream after it finds none.
  CHECK_THROWS_AS(pool.allocate_async(256, 256, fake_stream(limit + 2)), dk::invalid_request);
}
