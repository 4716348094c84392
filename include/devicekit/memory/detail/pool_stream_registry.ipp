#pragma once
/// \file
/// The definitions behind memory/detail/pool_stream_registry.hpp: stream slots, free events,
/// polling and migration of pending frees.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/pool_stream_registry.hpp>

#include <algorithm>
#include <memory>
#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL std::uint16_t pool_stream_registry::find_or_add(native_stream_handle h, block_heap& heap,
                                                               slab_cache& slabs) {
  if (const auto it = live_.find(h); it != live_.end()) return last_sid_ = it->second;
  if (reusable_.empty() && streams_.size() >= max_stream_slots) {
    // Released streams whose frees no event covers keep their slots until a fence (release()).
    // A program that releases its streams has made room: fence now rather than refuse it.
    const bool orphans = std::any_of(streams_.begin(), streams_.end(), [](const auto& st) { return st->orphaned; });
    if (orphans) fence(heap, slabs);  // may throw (a CUDA error): nothing has changed
    if (reusable_.empty()) {
      throw invalid_request("a memory pool serves at most " + std::to_string(max_stream_slots) +
                            " streams at once: call release_stream(s) for streams that are done");
    }
  }
  // Asked now, while the caller's use of h shows that it exists; may throw, before any change.
  const bool fenced = upstream_->fence_covers(h);
  const bool reuse = !reusable_.empty();
  const auto sid = static_cast<std::uint16_t>(reuse ? reusable_.back() : streams_.size() + 1);
  live_.emplace(h, sid);  // may throw: nothing else has changed
  if (reuse) {
    reusable_.pop_back();
  } else {
    try {
      auto fresh = std::make_unique<stream_state>();
      fresh->small.resize(static_cast<std::size_t>(class_count_));
      streams_.push_back(std::move(fresh));
    } catch (...) {
      live_.erase(h);
      throw;
    }
  }
  stream_state& st = at(sid);
  st.handle = h;
  st.retired = false;
  st.fenced = fenced;
  st.event_wanted = false;
  return last_sid_ = sid;
}

DEVICEKIT_DECL slab_cache::slot pool_stream_registry::take_own_slot(std::uint16_t sid, int cls) noexcept {
  stream_state& st = at(sid);
  auto& pending = st.small[static_cast<std::size_t>(cls)];
  if (pending.empty()) return {};
  const pending_slot p = pending.back();
  pending.pop_back();
  --st.small_pending;
  return {p.addr, p.slab};
}

DEVICEKIT_DECL void pool_stream_registry::record_event(stream_state& st, std::uint64_t upto) {
  // Only from a call the program makes with this stream (before_free, before_allocate): it exists
  // then. One event per stream, re-recorded: it covers every free made on the stream so far.
  if (st.event == nullptr) st.event = upstream_->create_event(st.handle);
  upstream_->record_event(st.event, st.handle);
  st.recorded_seq = upto;
  if (active_memory_trace.load(std::memory_order_relaxed) != nullptr) [[unlikely]] {
    st.trace_cover = trace_->cover_mark();
  }
  st.event_in_flight = true;
  st.event_wanted = false;
}

DEVICEKIT_DECL void pool_stream_registry::want_events(std::uint16_t except) noexcept {
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    stream_state& st = *streams_[i];
    if (i + 1 != except && !st.retired && st.fenced && st.has_unrecorded_frees()) st.event_wanted = true;
  }
}

DEVICEKIT_DECL bool pool_stream_registry::need_fence() const noexcept {
  for (const auto& st : streams_) {
    if (st->fenced && (!st->retired || st->orphaned) && st->has_unrecorded_frees()) return true;
  }
  return false;
}

DEVICEKIT_DECL bool pool_stream_registry::fence(block_heap& heap, slab_cache& slabs) {
  if (!need_fence()) return false;
  upstream_->fence();  // may throw (a CUDA error): nothing has changed yet
  ++fences_;
  bool any = false;
  for (auto& st : streams_) {
    if (!st->fenced || st->pending() == 0) continue;
    // Every operation queued on the device before the fence has finished, this stream's event
    // included.
    st->event_in_flight = false;
    any = migrate(*st, UINT64_MAX, heap, slabs) || any;
  }
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    if (!streams_[i]->orphaned) continue;
    streams_[i]->orphaned = false;
    reusable_.push_back(static_cast<std::uint16_t>(i + 1));
  }
  return any;
}

DEVICEKIT_DECL bool pool_stream_registry::poll(std::uint16_t except, bool wait, block_heap& heap, slab_cache& slabs) {
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
    } else if (memory_trace_writer* w = active_memory_trace.load(std::memory_order_relaxed)) [[unlikely]] {
      // What only the device's progress decided: a replay answers the same query from this record.
      if (trace_->joined(w->epoch())) trace_->ready(st.handle, st.trace_cover);
    }
    st.event_in_flight = false;
    any = migrate(st, st.recorded_seq, heap, slabs) || any;
  }
  return any;
}

DEVICEKIT_DECL void pool_stream_registry::release(native_stream_handle h, block_heap& heap, slab_cache& slabs) {
  const auto it = live_.find(h);
  if (it == live_.end()) return;
  const std::uint16_t sid = it->second;
  stream_state& st = at(sid);
  if (st.pending() != 0 && st.event != nullptr && st.recorded_seq != 0) {
    upstream_->wait_event(st.event);
    st.event_in_flight = false;
    migrate(st, st.recorded_seq, heap, slabs);
  }
  // Frees made after the last event (a fenced stream) cannot be waited for without naming the
  // stream, which may be gone: they stay with the slot until a fence, under no handle.
  const bool orphan = st.pending() != 0;
  reusable_.reserve(streams_.size());  // may throw: before any change
  retire(st);
  live_.erase(it);
  st.orphaned = orphan;
  st.handle = {};
  if (!orphan) reusable_.push_back(sid);
}

DEVICEKIT_DECL void pool_stream_registry::destroy_events() noexcept {
  for (auto& st : streams_) {
    if (st->event != nullptr) upstream_->destroy_event(st->event);
    st->event = nullptr;
  }
}

DEVICEKIT_DECL std::size_t pool_stream_registry::largest_pending_block() const noexcept {
  std::size_t largest = 0;
  for (const auto& st : streams_) {
    if (const pool_block* b = st->large.largest()) largest = std::max(largest, b->size);
  }
  return largest;
}

DEVICEKIT_DECL bool pool_stream_registry::migrate(stream_state& st, std::uint64_t upto, block_heap& heap,
                                                  slab_cache& slabs) {
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

DEVICEKIT_DECL void pool_stream_registry::retire(stream_state& st) noexcept {
  if (st.event != nullptr) upstream_->destroy_event(st.event);
  st.event = nullptr;
  st.event_in_flight = false;
  st.event_wanted = false;
  st.recorded_seq = 0;
  st.retired = true;
  if (last_sid_ != 0 && streams_[last_sid_ - 1u].get() == &st) last_sid_ = 0;
}

}  // namespace devicekit::detail
