#pragma once
/// \file
/// The definitions behind transfer/detail/host_to_device.hpp: direct and staged host -> device copies.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/host_to_device.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/error.hpp>
#  include <devicekit/memory/device_memory.hpp>
#  include <devicekit/memory/registry.hpp>
#  include <devicekit/transfer/detail/batch_api.hpp>
#  include <devicekit/transfer/detail/host_copy.hpp>
#  include <devicekit/transfer/detail/staging_ring.hpp>
#  include <devicekit/transfer/detail/streams.hpp>

#  include <algorithm>
#  include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL bool is_pinned_host(const void* p) noexcept {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

DEVICEKIT_DECL void copy_host_items_to_device(std::span<const copy_item> items, cudaStream_t s) {
  // Leaves below pinned_source_min_bytes are packed whatever memory they are in: with no larger
  // one, all of them are staged, as they come.
  if (std::none_of(items.begin(), items.end(),
                   [](const copy_item& it) { return it.bytes >= pinned_source_min_bytes; })) {
    return copy_staged_host_items_to_device(items, s);
  }
  std::vector<copy_item> staged;
  std::vector<copy_item> direct;
  staged.reserve(items.size());
  for (const auto& it : items) {
    (it.bytes >= pinned_source_min_bytes && is_pinned_host(it.src) ? direct : staged).push_back(it);
  }
  // Staged first: its one copy spans the gaps between its leaves, which may hold direct ones.
  copy_staged_host_items_to_device(staged, s);
  std::vector<copy_run> pinned;
  pinned.reserve(direct.size());
  for (const auto& it : direct) pinned.push_back({it.src, it.src_device, it.dst, it.bytes});
  copy_runs_batch_or_single(pinned, cudaMemcpyHostToDevice, s);
  stats().host_to_device_transfers.fetch_add(direct.size(), std::memory_order_relaxed);
}

DEVICEKIT_DECL void copy_staged_host_items_to_device(std::span<const copy_item> items, cudaStream_t s) {
  std::byte* begin = nullptr;
  std::byte* end = nullptr;
  for (const auto& it : items) {
    if (it.bytes == 0) continue;
    if (begin == nullptr || it.dst < begin) begin = it.dst;
    if (end == nullptr || it.dst + it.bytes > end) end = it.dst + it.bytes;
  }
  if (begin == nullptr) return;
  const auto len = static_cast<std::size_t>(end - begin);
  std::vector<staged_range> ranges;
  ranges.reserve(items.size());
  for (const auto& it : items) ranges.push_back({static_cast<std::size_t>(it.dst - begin), it.bytes});
  const std::size_t chunk = staging_buffer_bytes(len);
  if (chunk >= len) {
    // One buffer, one copy: no ring, so no event of its own (a ring's events order the reuse of
    // its buffers within one transfer). The block goes back in stream order after the copy, or
    // after the caller's host wait (staging_freed_after_wait).
    device_memory& pool = staging_memory();
    auto* buf = static_cast<std::byte*>(pool.allocate(len));
    try {
      std::size_t cursor = 0;
      for_each_part_shared(ranges, cursor, 0, len, [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
        bulk_copy_part(buf + to, items[k].src + from, n, items[k].bytes);
      });
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(begin, buf, len, cudaMemcpyHostToDevice, s));
      if (staging_freed_after_wait* later = staging_freed_after_wait::of(s)) {
        later->keep(buf, len);
      } else {
        pool.deallocate_async(buf, len, 256, s);
      }
    } catch (...) {
      // The copy may have been queued: let it finish before the buffer goes back.
      (void)cudaStreamSynchronize(s);
      pool.deallocate(buf, len);
      throw;
    }
    stats().host_to_device_transfers.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  staging_ring ring(chunk, max_staging_in_flight);
  std::size_t cursor = 0;
  std::size_t chunks = 0;
  try {
    for (std::size_t lo = 0; lo < len; lo += chunk, ++chunks) {
      const std::size_t hi = std::min(len, lo + chunk);
      std::byte* buf = ring.next();
      for_each_part_shared(ranges, cursor, lo, hi, [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
        bulk_copy_part(buf + to, items[k].src + from, n, items[k].bytes);
      });
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(begin + lo, buf, hi - lo, cudaMemcpyHostToDevice, s));
      ring.used(buf, record_event(s), s);
    }
  } catch (...) {
    // Copies queued before the failure still read their buffers (the one whose event was not
    // recorded would otherwise go back at once): let them finish first.
    (void)cudaStreamSynchronize(s);
    ring.abandon_taken();
    throw;
  }
  stats().host_to_device_transfers.fetch_add(chunks, std::memory_order_relaxed);
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
