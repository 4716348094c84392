#pragma once
/// \file
/// The definitions behind transfer/detail/copy.hpp: copy_items and copy_runs.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/trace.hpp>
#include <devicekit/transfer/detail/copy.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/capture.hpp>
#  include <devicekit/transfer/detail/capture_copy.hpp>
#endif

#if !DEVICEKIT_HAS_CUDA
#  include <devicekit/core/error.hpp>

#  include <string>
#endif

namespace devicekit::detail {

DEVICEKIT_DECL void copy_host_items(std::span<const copy_item> items) {
  std::size_t total = 0;
  for (const auto& it : items) total += it.bytes;
  if (total < shared_host_copy_min_bytes) {
    for (const auto& it : items) bulk_copy(it.dst, it.src, it.bytes);
  } else {
    // The items laid end to end: for_each_part_shared slices that line into page-sized parts for
    // the copy threads, and each part copies its piece of one item straight to its destination.
    std::vector<staged_range> ranges;
    ranges.reserve(items.size());
    std::size_t at = 0;
    for (const auto& it : items) {
      ranges.push_back({at, it.bytes});
      at += it.bytes;
    }
    std::size_t cursor = 0;
    for_each_part_shared(ranges, cursor, 0, total, [&](std::size_t k, std::size_t from, std::size_t, std::size_t n) {
      bulk_copy_part(items[k].dst + from, items[k].src + from, n, items[k].bytes);
    });
  }
  stats().host_copies.fetch_add(items.size(), std::memory_order_relaxed);
}

/// Notes the copies of `items` to `dst` in a memory trace being recorded (memory/trace.hpp): one
/// record per source device (a tree's leaves come from one device, and host leaves may be mixed in).
inline void record_copies(std::span<const copy_item> items, device dst, const void* s) noexcept {
  if (!memory_trace_recording()) [[likely]]
    return;
  struct from_device {
    device d;
    std::uint64_t bytes = 0;
    std::uint64_t count = 0;
  };
  from_device seen[4];
  std::size_t n = 0;
  for (const copy_item& it : items) {
    std::size_t k = 0;
    while (k < n && seen[k].d != it.src_device) ++k;
    if (k == n) {
      if (n == std::size(seen))
        k = n - 1;  // more source devices than a tree has: counted with the last
      else
        seen[n++].d = it.src_device;
    }
    seen[k].bytes += it.bytes;
    ++seen[k].count;
  }
  for (std::size_t k = 0; k < n; ++k)
    record_transfer(transfer_kind::copy, seen[k].d, dst, seen[k].bytes, seen[k].count, s);
}

DEVICEKIT_DECL void copy_items(std::span<const copy_item> items, device dst, native_stream_handle s) {
#if DEVICEKIT_HAS_CUDA
  copy_items(items, dst, s, s != nullptr && capture_of(s).active);
#else
  copy_items(items, dst, s, false);
#endif
}

DEVICEKIT_DECL void copy_items(std::span<const copy_item> items, device dst, [[maybe_unused]] native_stream_handle s,
                               [[maybe_unused]] bool captured) {
  record_copies(items, dst, s);
#if DEVICEKIT_HAS_CUDA
  // A capture records what is queued on `s`: only the capture path can be replayed (capture_copy.hpp).
  if (s != nullptr && captured) return copy_items_in_capture(items, dst, s);
#endif
  const bool all_host =
      std::all_of(items.begin(), items.end(), [](const copy_item& it) { return it.src_device.is_cpu(); });
  if (dst.is_cpu() && all_host) {
    copy_host_items(items);  // the common host case, without sorting items by source
    return;
  }
  // Empty items are left out (their destinations need not lie in the span a staged copy covers);
  // a host tree without any (the common device case) is its own list of host items, not copied.
  const bool host_as_given =
      all_host && std::none_of(items.begin(), items.end(), [](const copy_item& it) { return it.bytes == 0; });
  std::vector<copy_item> host;
  std::vector<copy_item> on_device;
  if (!host_as_given) {
    for (const auto& it : items) {
      if (it.bytes == 0) continue;
      (it.src_device.is_cpu() ? host : on_device).push_back(it);
    }
  }
  const std::span<const copy_item> host_items = host_as_given ? items : std::span<const copy_item>(host);
  if (dst.is_cpu()) {
    copy_host_items(host_items);
#if DEVICEKIT_HAS_CUDA
    copy_device_items_to_host(on_device, s);
#endif
    return;
  }
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dst.ordinal());
  copy_host_items_to_device(host_items, s);  // first: its one copy may span regions the others fill
  // Grouped by source device, in order of first appearance.
  std::vector<device> sources;
  for (const auto& it : on_device) {
    if (std::find(sources.begin(), sources.end(), it.src_device) == sources.end()) sources.push_back(it.src_device);
  }
  for (const device from : sources) {
    std::vector<copy_item> group;
    for (const auto& it : on_device) {
      if (it.src_device == from) group.push_back(it);
    }
    const auto runs = coalesce(group);
    if (from == dst) {
      copy_same_device(runs, s);
    } else {
      copy_other_device(runs, from, dst, s);
    }
  }
#else
  throw config_error("cannot copy to " + dst.str() + ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)");
#endif
}

DEVICEKIT_DECL void copy_runs(std::span<const copy_run> runs, device dst_device,
                              [[maybe_unused]] native_stream_handle s) {
  std::vector<copy_item> items;
  items.reserve(runs.size());
  for (const auto& r : runs) {
    if (r.bytes != 0) items.push_back({r.src, r.src_device, nullptr, r.dst, r.bytes});
  }
  if (dst_device.is_cpu()) return copy_items(items, dst_device, s);
#if DEVICEKIT_HAS_CUDA
  if (s != nullptr && capture_of(s).active) {
    record_copies(items, dst_device, s);
    return copy_items_in_capture(items, dst_device, s);
  }
  scoped_device on(dst_device.ordinal());
  std::vector<copy_item> on_device;
  std::vector<copy_item> host;
  std::size_t host_bytes = 0;
  for (const auto& it : items) {
    if (it.src_device.is_cpu()) {
      host.push_back(it);
      host_bytes += it.bytes;
    } else {
      on_device.push_back(it);
    }
  }
  if (!host.empty() && host_bytes <= single_stage_limit && host.size() > 1) {
    // One pack, one submission: the pieces go from pinned staging to their places, freed in
    // stream order after them.
    device_memory& staging = staging_memory();
    auto* buf = static_cast<std::byte*>(staging.allocate(host_bytes));
    std::vector<copy_run> pieces;
    std::vector<staged_range> ranges;
    std::size_t at = 0;
    for (const auto& it : host) {
      ranges.push_back({at, it.bytes});
      pieces.push_back({buf + at, device::cpu(), it.dst, it.bytes});
      at += it.bytes;
    }
    std::size_t cursor = 0;
    for_each_part_shared(ranges, cursor, 0, host_bytes,
                         [&](std::size_t k, std::size_t from, std::size_t to, std::size_t n) {
                           bulk_copy_part(buf + to, host[k].src + from, n, host[k].bytes);
                         });
    try {
      copy_runs_batch_or_single(pieces, cudaMemcpyHostToDevice, s);
      staging.deallocate_async(buf, host_bytes, 256, s);
    } catch (...) {
      (void)cudaStreamSynchronize(s);  // queued pieces still read the buffer
      staging.deallocate(buf, host_bytes);
      throw;
    }
    stats().host_to_device_transfers.fetch_add(1, std::memory_order_relaxed);
  } else {
    for (const auto& it : host) copy_host_items_to_device(std::span<const copy_item>(&it, 1), s);
  }
  record_copies(host, dst_device, s);  // the device runs are noted by copy_items
  copy_items(on_device, dst_device, s);
#else
  throw config_error("cannot copy to " + dst_device.str() +
                     ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)");
#endif
}

}  // namespace devicekit::detail
