#pragma once
/// \file
/// `pool_stream_registry`: stream-ordered reuse. One slot per stream that freed memory, holding its
/// pending frees (large blocks in a free list of their own, small slots per size class) and one
/// event. A block freed on stream s is reused at once by later allocations on s (stream order
/// makes that safe, as in PyTorch's caching allocator); other streams may take it once an event
/// recorded on s after the free has completed, and it then moves to the heap's ready list or back
/// to its slab. RMM's stream_ordered_memory_resource.hpp keeps per-stream free lists and an event
/// per stream the same way.
///
/// When that event is recorded: never after the stream may be gone. A program may destroy a stream
/// as soon as its work is queued (cudaStreamDestroy returns at once), so the pool records on s only
/// inside a call the program makes with s. With an upstream that has a device-wide fence
/// (cuda_device_resource: cudaDeviceSynchronize) and a stream it covers, nothing is recorded per
/// free: when another stream runs short, s's slot is marked, and s's next allocation or free
/// records the event; until then, and for streams never used again, the recovery ladder's last
/// step is the fence, which orders every stream of the device, destroyed ones included (as PyTorch
/// synchronises before it frees cached blocks). Other streams (another device's, or an upstream
/// without a fence) record at every free, as RMM does. So one stream allocating and freeing makes
/// no CUDA call here.
///
/// Streams that go away are drained: release() waits for the slot's event (never the stream,
/// which may be destroyed) and frees the slot for another stream; frees no event covers stay,
/// orphaned, until the next fence.
/// Not locked: device_memory calls it under its own lock.
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/detail/block_heap.hpp>
#include <devicekit/memory/detail/memory_trace.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/detail/pool_upstream.hpp>
#include <devicekit/memory/detail/slab_cache.hpp>
#include <devicekit/memory/errors.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace devicekit::detail {

class pool_stream_registry {
 public:
  /// Stream slots kept at once (block headers store the slot in 16 bits).
  static constexpr std::size_t max_stream_slots = 65535;

  /// `trace`: the pool's log in a memory trace (memory/trace.hpp), under the pool's lock as this is.
  void configure(pool_upstream* upstream, int class_count, pool_trace_log* trace) noexcept {
    upstream_ = upstream;
    class_count_ = class_count;
    trace_ = trace;
  }

  [[nodiscard]] stream_state& at(std::uint16_t sid) noexcept { return *streams_[sid - 1u]; }
  [[nodiscard]] const std::vector<std::unique_ptr<stream_state>>& slots() const noexcept { return streams_; }

  /// The free list of stream slot `sid`; the heap's ready list for 0.
  [[nodiscard]] free_index& index_of(std::uint16_t sid, block_heap& heap) noexcept {
    return sid == 0 ? heap.ready() : streams_[sid - 1u]->large;
  }

  /// The slot of stream `h` (1-based), made on first use. The stream of the previous call is
  /// checked inline: it is the common case, and the search and the making of a slot, out of line,
  /// would otherwise make every call save and restore the registers they need. With every slot
  /// taken, slots of released streams that wait for a fence are fenced free (`heap` and `slabs`
  /// take in their frees); invalid_request when none is.
  std::uint16_t id_of(native_stream_handle h, block_heap& heap, slab_cache& slabs) {
    if (last_sid_ != 0) {
      const stream_state& last = *streams_[last_sid_ - 1u];
      if (last.handle == h && !last.retired) return last_sid_;
    }
    return find_or_add(h, heap, slabs);
  }

  /// A small slot freed on stream `sid`'s slot: reusable on it at once, elsewhere after its event.
  void defer_slot(std::uint16_t sid, int cls, std::uintptr_t addr, pool_slab* owner) {
    stream_state& st = at(sid);
    st.small[static_cast<std::size_t>(cls)].push_back({addr, owner, st.next_seq++});
    ++st.small_pending;
  }

  /// A slot of class `cls` freed earlier on stream `sid` (stream order makes reuse safe), or
  /// addr 0.
  slab_cache::slot take_own_slot(std::uint16_t sid, int cls) noexcept;

  /// At a free on `st`, before it is made: records the event when every free must have one (a
  /// stream no fence covers) or when another stream asked for these frees. May throw (a CUDA
  /// error) with nothing changed.
  void before_free(stream_state& st) {
    if (!st.fenced || st.event_wanted) record_event(st, st.next_seq);
  }

  /// At an allocation on `st`: records the event another stream asked for, if frees need it.
  void before_allocate(stream_state& st) {
    if (st.event_wanted) {
      if (st.has_unrecorded_frees()) record_event(st, st.next_seq - 1);
      st.event_wanted = false;
    }
  }

  /// Asks every stream but `except` that holds frees no event covers to record one at its next use.
  void want_events(std::uint16_t except) noexcept;

  /// Frees only a fence can make ready: of fenced streams, made after their last event (orphans
  /// included).
  [[nodiscard]] bool need_fence() const noexcept;

  /// The upstream's fence, then every fenced stream's frees become ready. Returns whether anything
  /// did; false without fencing when no free needs it.
  bool fence(block_heap& heap, slab_cache& slabs);

  /// Fences taken so far (pool_stats::stream_fences).
  [[nodiscard]] std::uint64_t fences() const noexcept { return fences_; }

  /// Takes in the frees of every stream but `except` whose event has completed (or, with `wait`,
  /// waits for the events). Touches events only, never streams. Returns whether anything became
  /// ready.
  bool poll(std::uint16_t except, bool wait, block_heap& heap, slab_cache& slabs);

  /// Drains and forgets stream `h` (see device_memory::release_stream).
  void release(native_stream_handle h, block_heap& heap, slab_cache& slabs);

  /// Destroys every event (the pool is being destroyed).
  void destroy_events() noexcept;

  /// Frees waiting for an event, and the largest pending block (for pool_stats).
  [[nodiscard]] std::size_t pending() const noexcept {
    std::size_t n = 0;
    for (const auto& st : streams_) n += st->pending();
    return n;
  }
  [[nodiscard]] std::size_t largest_pending_block() const noexcept;

 private:
  /// id_of's search among the slots, and the slot it makes for a new stream.
  std::uint16_t find_or_add(native_stream_handle h, block_heap& heap, slab_cache& slabs);

  /// Records `st`'s event so that it covers frees up to sequence number `upto`.
  void record_event(stream_state& st, std::uint64_t upto);

  /// Makes the frees of `st` up to sequence number `upto` ready for every stream.
  bool migrate(stream_state& st, std::uint64_t upto, block_heap& heap, slab_cache& slabs);

  /// Makes a slot with no pending frees free for another stream; destroys its event.
  void retire(stream_state& st) noexcept;

  pool_upstream* upstream_ = nullptr;
  pool_trace_log* trace_ = nullptr;
  int class_count_ = 0;
  std::vector<std::unique_ptr<stream_state>> streams_;
  /// The slot of each stream not retired: a program may use thousands of streams (one per
  /// request), and a search through every slot for each new one would grow with their square.
  std::unordered_map<native_stream_handle, std::uint16_t> live_;
  /// Retired slots a new stream may take (not those of orphans: their frees wait for a fence).
  std::vector<std::uint16_t> reusable_;
  std::uint16_t last_sid_ = 0;
  std::uint64_t fences_ = 0;
  std::vector<pool_block*> scratch_;
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/pool_stream_registry.ipp>
#endif
