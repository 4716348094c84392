#pragma once
/// \file
/// The definitions behind transfer/detail/device_to_host.hpp: staged device -> host copies.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/device_to_host.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/capture.hpp>
#  include <devicekit/memory/device_memory.hpp>
#  include <devicekit/memory/registry.hpp>
#  include <devicekit/transfer/detail/batch_api.hpp>
#  include <devicekit/transfer/detail/capture_copy.hpp>
#  include <devicekit/transfer/detail/host_copy.hpp>
#  include <devicekit/transfer/detail/staging_ring.hpp>
#  include <devicekit/transfer/detail/streams.hpp>

#  include <algorithm>
#  include <cstddef>
#  include <utility>
#  include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL void copy_device_group_to_host(std::span<const copy_item> items, device dev, const stream_ref* s,
                                              bool uncaptured) {
  if (s != nullptr && !uncaptured && capture_of(*s).active) {
    scoped_device on(dev.ordinal());
    return copy_items_in_capture(items, device::cpu(), s->native_handle());
  }
  struct run {
    const std::byte* src;
    std::size_t bytes;
  };
  std::vector<run> runs;
  std::vector<staged_range> run_ranges;   // where each run lies in the staging space
  std::vector<staged_range> item_ranges;  // where each item lies in it
  std::size_t total = 0;
  const copy_item* prev = nullptr;
  for (const auto& it : items) {
    // Merge with the previous run when in the same allocation, after it, with a gap below 64 KiB.
    if (prev != nullptr && it.src_owner != nullptr && it.src_owner == prev->src_owner &&
        it.src >= prev->src + prev->bytes && it.src - (prev->src + prev->bytes) <= (std::ptrdiff_t{64} << 10)) {
      const auto grown = static_cast<std::size_t>(it.src + it.bytes - runs.back().src);
      total += grown - runs.back().bytes;
      runs.back().bytes = grown;
      run_ranges.back().bytes = grown;
    } else {
      runs.push_back({it.src, it.bytes});
      run_ranges.push_back({total, it.bytes});
      total += it.bytes;
    }
    item_ranges.push_back({run_ranges.back().at + static_cast<std::size_t>(it.src - runs.back().src), it.bytes});
    prev = &it;
  }
  if (total == 0) return;
  const std::size_t chunk = staging_buffer_bytes(total);
  const std::size_t chunks = (total + chunk - 1) / chunk;
  scoped_device on(dev.ordinal());
  const stream_ref st = s != nullptr ? *s : stream_ref(default_ordered_stream(dev));
  // Two buffers: a buffer is free again once the host has unpacked it (its copy had completed), so
  // both go back with synchronous frees. Each has this thread's event of `dev` in its own slot
  // (thread_event), recorded after its copy and waited for before it is recorded again.
  device_memory& pool = staging_memory();
  std::byte* buf[2] = {static_cast<std::byte*>(pool.allocate(chunk)), nullptr};
  cudaEvent_t arrived[2] = {nullptr, nullptr};
  std::size_t run_cursor = 0;
  std::size_t item_cursor = 0;
  auto bring = [&](std::size_t c) {
    const std::size_t lo = c * chunk;
    const std::size_t hi = std::min(total, lo + chunk);
    if (buf[c % 2] == nullptr) buf[c % 2] = static_cast<std::byte*>(pool.allocate(chunk));
    std::byte* b = buf[c % 2];
    std::vector<copy_run> pieces;
    for_each_part(run_ranges, run_cursor, lo, hi, [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
      pieces.push_back({runs[k].src + from, dev, b + to, n});
    });
    copy_runs_batch_or_single(pieces, cudaMemcpyDeviceToHost, st.native_handle());
    const cudaEvent_t ev = thread_event(dev.ordinal(), 1 + static_cast<unsigned>(c % 2));
    DEVICEKIT_CUDA_CHECK(cudaEventRecord(ev, st.native_handle()));
    arrived[c % 2] = ev;
  };
  auto give_back = [&] {
    for (std::byte* b : buf) {
      if (b != nullptr) pool.deallocate(b, chunk);
    }
  };
  try {
    bring(0);
    for (std::size_t c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) bring(c + 1);
      DEVICEKIT_CUDA_CHECK(cudaEventSynchronize(std::exchange(arrived[c % 2], nullptr)));
      const std::size_t lo = c * chunk;
      for_each_part_shared(item_ranges, item_cursor, lo, std::min(total, lo + chunk),
                           [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
                             bulk_copy_part(items[k].dst + from, buf[c % 2] + to, n, items[k].bytes);
                           });
    }
  } catch (...) {
    // Copies queued before the failure still write into the staging: it goes back to the cache
    // only once they are done, or the next user's data would be overwritten.
    (void)cudaStreamSynchronize(st.native_handle());
    give_back();
    throw;
  }
  give_back();
  stats().device_to_host_transfers.fetch_add(runs.size(), std::memory_order_relaxed);
}

DEVICEKIT_DECL void copy_device_items_to_host(std::span<const copy_item> items, cudaStream_t s) {
  // The group of the stream's own device goes on that stream, after the caller's work queued there
  // before (a kernel or a memset that wrote the source); the others on their devices' streams.
  int stream_device = -1;
  if (s != nullptr && cudaStreamGetDevice(s, &stream_device) != cudaSuccess) {
    (void)cudaGetLastError();
    stream_device = -1;
  }
  std::vector<device> sources;
  for (const auto& it : items) {
    if (std::find(sources.begin(), sources.end(), it.src_device) == sources.end()) sources.push_back(it.src_device);
  }
  for (const device from : sources) {
    std::vector<copy_item> group;
    for (const auto& it : items) {
      if (it.src_device == from) group.push_back(it);
    }
    if (from.ordinal() == stream_device) {
      const stream_ref on(from, s);
      copy_device_group_to_host(group, from, &on);
    } else {
      copy_device_group_to_host(group, from);
    }
  }
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
