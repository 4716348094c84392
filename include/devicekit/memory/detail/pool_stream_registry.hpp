#pragma once
/// \file
/// `pool_stream_registry`: stream-ordered reuse. One slot per stream that freed memory, holding its
/// pending frees (large blocks in a free list of their own, small slots per size class) and one
/// event, re-recorded at every free so that it covers that free and all earlier ones. A block
/// freed on stream s is reused at once by later allocations on s, and by other streams once the
/// event has completed; then it moves to the heap's ready list or back to its slab. RMM's
/// stream_ordered_memory_resource.hpp keeps per-stream free lists and an event per stream the same
/// way. Streams that go away are drained: release() waits for the slot's event (never the stream,
/// which may be destroyed) and frees the slot for another stream.
/// Not locked: device_memory calls it under its own lock.
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/detail/block_heap.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/detail/pool_upstream.hpp>
#include <devicekit/memory/detail/slab_cache.hpp>
#include <devicekit/memory/errors.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace devicekit::detail {

class pool_stream_registry {
 public:
  /// Stream slots kept at once (block headers store the slot in 16 bits).
  static constexpr std::size_t max_stream_slots = 65535;

  void configure(pool_upstream* upstream, int class_count) noexcept {
    upstream_ = upstream;
    class_count_ = class_count;
  }

  [[nodiscard]] stream_state& at(std::uint16_t sid) noexcept { return *streams_[sid - 1u]; }
  [[nodiscard]] const std::vector<std::unique_ptr<stream_state>>& slots() const noexcept { return streams_; }

  /// The free list of stream slot `sid`; the heap's ready list for 0.
  [[nodiscard]] free_index& index_of(std::uint16_t sid, block_heap& heap) noexcept {
    return sid == 0 ? heap.ready() : streams_[sid - 1u]->large;
  }

  /// The slot of stream `h` (1-based), made on first use.
  std::uint16_t id_of(native_stream_handle h) {
    if (last_sid_ != 0 && streams_[last_sid_ - 1u]->handle == h && !streams_[last_sid_ - 1u]->retired) return last_sid_;
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      if (!streams_[i]->retired && streams_[i]->handle == h) return last_sid_ = static_cast<std::uint16_t>(i + 1);
    }
    // A new stream takes a slot that release() freed, if there is one.
    std::size_t slot = streams_.size();
    for (std::size_t i = 0; i < streams_.size() && slot == streams_.size(); ++i) {
      if (streams_[i]->retired) slot = i;
    }
    if (slot == streams_.size() && streams_.size() >= max_stream_slots) {
      throw invalid_request("a memory pool serves at most " + std::to_string(max_stream_slots) +
                            " streams at once: call release_stream(s) for streams that are done");
    }
    if (slot == streams_.size()) streams_.push_back(std::make_unique<stream_state>());
    stream_state& st = *streams_[slot];
    st.handle = h;
    st.retired = false;
    st.small.resize(static_cast<std::size_t>(class_count_));
    return last_sid_ = static_cast<std::uint16_t>(slot + 1);
  }

  /// A small slot freed on stream `sid`'s slot: reusable on it at once, elsewhere after its event.
  void defer_slot(std::uint16_t sid, int cls, std::uintptr_t addr, pool_slab* owner) {
    stream_state& st = at(sid);
    st.small[static_cast<std::size_t>(cls)].push_back({addr, owner, st.next_seq++});
    ++st.small_pending;
  }

  /// A slot of class `cls` freed earlier on stream `sid` (stream order makes reuse safe), or
  /// addr 0.
  slab_cache::slot take_own_slot(std::uint16_t sid, int cls) noexcept {
    stream_state& st = at(sid);
    auto& pending = st.small[static_cast<std::size_t>(cls)];
    if (pending.empty()) return {};
    const pending_slot p = pending.back();
    pending.pop_back();
    --st.small_pending;
    return {p.addr, p.slab};
  }

  /// Records the stream's event at a free, so that it covers that free and every earlier one.
  void record_free_event(stream_state& st) {
    // The event is recorded now, at the free, while the stream certainly exists, never later: a
    // stream may be destroyed once its work is queued (cudaStreamDestroy returns at once and the
    // work still completes), and recording on a destroyed stream is undefined behaviour. RMM's
    // stream_ordered_memory_resource records at every deallocation for the same reason. One event
    // per stream, re-recorded: it then covers every free made on the stream so far.
    if (st.event == nullptr) st.event = upstream_->create_event(st.handle);
    upstream_->record_event(st.event, st.handle);
    st.recorded_seq = st.next_seq;  // the sequence number the free being made will take
    st.event_in_flight = true;
  }

  /// Takes in the frees of every stream but `except` whose event has completed (or, with `wait`,
  /// waits for the events). Touches events only, never streams. Returns whether anything became
  /// ready.
  bool poll(std::uint16_t except, bool wait, block_heap& heap, slab_cache& slabs) {
    bool any = false;
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      if (i + 1 == except) continue;
      stream_state& st = *streams_[i];
      // Only events are touched here, never the stream: it may be gone (see record_free_event).
      if (st.pending() == 0 || !st.event_in_flight) continue;
      if (wait) {
        upstream_->wait_event(st.event);
      } else if (!upstream_->event_complete(st.event)) {
        continue;
      }
      st.event_in_flight = false;
      any = migrate(st, st.recorded_seq, heap, slabs) || any;
    }
    return any;
  }

  /// Drains and forgets stream `h` (see device_memory::release_stream).
  void release(native_stream_handle h, block_heap& heap, slab_cache& slabs) {
    for (auto& st : streams_) {
      if (st->retired || st->handle != h) continue;
      if (st->pending() != 0) {
        upstream_->wait_event(st->event);
        migrate(*st, st->recorded_seq, heap, slabs);
      }
      retire(*st);
    }
  }

  /// Destroys every event (the pool is being destroyed).
  void destroy_events() noexcept {
    for (auto& st : streams_) {
      if (st->event != nullptr) upstream_->destroy_event(st->event);
      st->event = nullptr;
    }
  }

  /// Frees waiting for an event, and the largest pending block (for pool_stats).
  [[nodiscard]] std::size_t pending() const noexcept {
    std::size_t n = 0;
    for (const auto& st : streams_) n += st->pending();
    return n;
  }
  [[nodiscard]] std::size_t largest_pending_block() const noexcept {
    std::size_t largest = 0;
    for (const auto& st : streams_) {
      if (const pool_block* b = st->large.largest()) largest = std::max(largest, b->size);
    }
    return largest;
  }

 private:
  /// Makes the frees of `st` up to sequence number `upto` ready for every stream.
  bool migrate(stream_state& st, std::uint64_t upto, block_heap& heap, slab_cache& slabs) {
    bool any = false;
    scratch_.clear();
    st.large.for_each([&](pool_block* b) {
      if (b->seq <= upto) scratch_.push_back(b);
    });
    for (pool_block* b : scratch_) {
      st.large.erase(b);
      heap.insert_ready(b);
      any = true;
    }
    for (auto& pending : st.small) {
      std::size_t keep = 0;
      for (std::size_t j = 0; j < pending.size(); ++j) {
        if (pending[j].seq <= upto) {
          slabs.release_slot(pending[j].slab, pending[j].addr, heap);
          --st.small_pending;
          any = true;
        } else {
          pending[keep++] = pending[j];
        }
      }
      pending.resize(keep);
    }
    return any;
  }

  /// Makes a slot with no pending frees free for another stream; destroys its event.
  void retire(stream_state& st) noexcept {
    if (st.event != nullptr) upstream_->destroy_event(st.event);
    st.event = nullptr;
    st.event_in_flight = false;
    st.recorded_seq = 0;
    st.retired = true;
    if (last_sid_ != 0 && streams_[last_sid_ - 1u].get() == &st) last_sid_ = 0;
  }

  pool_upstream* upstream_ = nullptr;
  int class_count_ = 0;
  std::vector<std::unique_ptr<stream_state>> streams_;
  std::uint16_t last_sid_ = 0;
  std::vector<pool_block*> scratch_;
};

}  // namespace devicekit::detail
