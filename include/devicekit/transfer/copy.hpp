#pragma once
/// \file
/// The copy engine, the one door for the layers above: `copy_items` moves a list of leaves
/// (`copy_item`: source bytes and where they go in one destination block) from wherever they are
/// to the block's device; `copy_runs` does the same for a list of runs that is not laid out as
/// one block. No locks of its own: each call works on its own lists and staging; the pools, peer
/// access and counters it uses lock (or are atomic) themselves.
///
///   host -> host      one memcpy per leaf into the block
///   host -> cuda      packed into pinned staging and sent in one cudaMemcpyAsync; above
///                     `single_stage_limit` in chunks (staging_ring): the host packs chunk k+1
///                     while the copy engine moves chunk k, taking fresh buffers rather than
///                     waiting for a busy stream; leaves of 1 MiB or more that are pinned already
///                     are copied directly (no host memcpy)
///   cuda -> same cuda device-to-device copies; leaves that lie in one allocation in the same order
///                     are one copy; many small ones go to `cub::DeviceMemcpy::Batched` when a .cu
///                     file of the program includes transfer/batched_copy.cuh, else several go in
///                     one cudaMemcpyBatchAsync (CUDA >= 12.8)
///   cuda -> other     peer copies where the pair supports peer access (enabled on first use, and
///                     granted by devicekit's driver pools): one cudaMemcpyBatchAsync, or one
///                     cudaMemcpyPeerAsync per run; else through pinned staging in chunks, the
///                     destination stream waiting for each chunk on an event
///   cuda -> host      into pinned staging in chunks through two buffers, then unpacked
///
/// Which of these a list of runs takes is the copy planner's decision (detail/planner.hpp). The
/// machinery, one level per file in detail/: runs.hpp (items, runs, counters), planner.hpp,
/// streams.hpp (placement streams, events, ordering after the default stream), batch_api.hpp
/// (cudaMemcpyBatchAsync), cub_batched.hpp (the CUB hook's host side), staging_ring.hpp,
/// host_copy.hpp, host_to_device.hpp, device_to_host.hpp, device_to_device.hpp.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/transfer/detail/cub_batched.hpp>
#include <devicekit/transfer/detail/host_copy.hpp>
#include <devicekit/transfer/detail/planner.hpp>
#include <devicekit/transfer/detail/runs.hpp>
#include <devicekit/transfer/detail/staging_ring.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/memory/device_memory.hpp>
#  include <devicekit/memory/registry.hpp>
#  include <devicekit/transfer/detail/batch_api.hpp>
#  include <devicekit/transfer/detail/device_to_device.hpp>
#  include <devicekit/transfer/detail/device_to_host.hpp>
#  include <devicekit/transfer/detail/host_to_device.hpp>
#  include <devicekit/transfer/detail/streams.hpp>
#else
#  include <devicekit/core/error.hpp>

#  include <string>
#endif

namespace devicekit::detail {

/// Host items -> host memory, one bulk_copy each; done on return.
inline void copy_host_items(std::span<const copy_item> items) {
  for (const auto& it : items) {
    bulk_copy(it.dst, it.src, it.bytes);
  }
  stats().host_copies.fetch_add(items.size(), std::memory_order_relaxed);
}

/// Copies `items` to their destinations on `dst`. For a cuda `dst` the copies are queued on `s`
/// (a stream of `dst`) and may still run when this returns; for a cpu `dst` they are done. For a
/// cuda `dst`, the destinations of host items must lie in one allocation
/// (copy_staged_host_items_to_device).
inline void copy_items(std::span<const copy_item> items, device dst, [[maybe_unused]] native_stream_handle s) {
  const bool all_host =
      std::all_of(items.begin(), items.end(), [](const copy_item& it) { return it.src_device.is_cpu(); });
  if (dst.is_cpu() && all_host) {
    copy_host_items(items);  // the common host case, without sorting items by source
    return;
  }
  std::vector<copy_item> host;
  std::vector<copy_item> on_device;
  for (const auto& it : items) {
    if (it.bytes == 0) continue;
    (it.src_device.is_cpu() ? host : on_device).push_back(it);
  }
  if (dst.is_cpu()) {
    copy_host_items(host);
#if DEVICEKIT_HAS_CUDA
    copy_device_items_to_host(on_device);
#endif
    return;
  }
#if DEVICEKIT_HAS_CUDA
  scoped_device on(dst.ordinal());
  copy_host_items_to_device(host, s);  // first: its one copy may span regions the others fill
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

/// Copies a list of runs (each: `bytes` from `src` on `src_device` to `dst`) into memory of
/// `dst_device`, for runs that are not one block of a placed tree (shard copies each device's
/// runs of a source tree this way).
/// For a cuda `dst_device` the copies are queued on `s` (a stream of that device; its
/// destinations must not overlap each other or any source) and may still run when this returns;
/// device sources must be ready (work that writes them on other streams finished or waited for).
/// Runs are grouped by source device, and each group goes the planner's way (detail/planner.hpp):
/// same device: CUB, cudaMemcpyBatchAsync or single copies; other devices: peer copies, batched
/// where several, else staged through host memory when the pair has no peer access; host
/// sources: packed into one pinned buffer (up to single_stage_limit) and scattered from it in one
/// batch, else one staged transfer per run. For a cpu `dst_device` the copies are done on return.
inline void copy_runs(std::span<const copy_run> runs, device dst_device, [[maybe_unused]] native_stream_handle s) {
  std::vector<copy_item> items;
  items.reserve(runs.size());
  for (const auto& r : runs) {
    if (r.bytes != 0) items.push_back({r.src, r.src_device, nullptr, r.dst, r.bytes});
  }
  if (dst_device.is_cpu()) return copy_items(items, dst_device, s);
#if DEVICEKIT_HAS_CUDA
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
    std::size_t at = 0;
    for (const auto& it : host) {
      bulk_copy(buf + at, it.src, it.bytes);
      pieces.push_back({buf + at, device::cpu(), it.dst, it.bytes});
      at += it.bytes;
    }
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
  copy_items(on_device, dst_device, s);
#else
  throw config_error("cannot copy to " + dst_device.str() +
                     ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)");
#endif
}

}  // namespace devicekit::detail
