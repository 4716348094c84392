#pragma once
/// \file
/// The copy engine, the one door for the layers above: `copy_items` moves a list of leaves
/// (`copy_item`: source bytes and where they go in one destination block) from wherever they are
/// to the block's device; `copy_runs` does the same for a list of runs that is not laid out as
/// one block. No locks of its own: each call works on its own lists and staging; the pools, peer
/// access and counters it uses lock (or are atomic) themselves.
///
///   host -> host      one memcpy per leaf into the block
///   host -> cuda      packed into pinned staging (by the copy threads, copy_workers.hpp) and
///                     sent in one cudaMemcpyAsync up to `pipelined_stage_min_bytes`, in pieces
///                     up to `single_stage_limit`, in chunks above (staging_ring): the host packs
///                     chunk k+1 while the copy engine moves chunk k, taking fresh buffers rather
///                     than waiting for a busy stream; leaves
///                     of 1 MiB or more that are pinned already are copied directly (no host
///                     memcpy)
///   cuda -> same cuda device-to-device copies; leaves that lie in one allocation in the same order
///                     are one copy; many small ones go to `cub::DeviceMemcpy::Batched` when a .cu
///                     file of the program includes transfer/batched_copy.cuh, else several go in
///                     one cudaMemcpyBatchAsync (CUDA >= 12.8)
///   cuda -> other     peer copies where the pair supports peer access (enabled on first use, and
///                     granted by devicekit's driver pools): one cudaMemcpyBatchAsync, or one
///                     cudaMemcpyPeerAsync per run; else through pinned staging in chunks, the
///                     destination stream waiting for each chunk on an event
///   cuda -> host      into pinned staging in chunks through two buffers, then unpacked (by
///                     the copy threads)
///
/// Which of these a list of runs takes is the copy planner's decision (planner.hpp). The
/// machinery, one level per file beside this one: runs.hpp (items, runs, counters), planner.hpp,
/// streams.hpp (placement streams, events, ordering after the default stream), batch_api.hpp
/// (cudaMemcpyBatchAsync), cub_batched.hpp (the CUB hook's host side), staging_ring.hpp,
/// copy_workers.hpp, host_copy.hpp, host_to_device.hpp, device_to_host.hpp, device_to_device.hpp.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/transfer/detail/cub_batched.hpp>
#include <devicekit/transfer/detail/host_copy.hpp>
#include <devicekit/transfer/detail/planner.hpp>
#include <devicekit/transfer/detail/runs.hpp>
#include <devicekit/transfer/detail/staging_ring.hpp>

#include <cstddef>
#include <span>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/memory/device_memory.hpp>
#  include <devicekit/memory/registry.hpp>
#  include <devicekit/transfer/detail/batch_api.hpp>
#  include <devicekit/transfer/detail/device_to_device.hpp>
#  include <devicekit/transfer/detail/device_to_host.hpp>
#  include <devicekit/transfer/detail/host_to_device.hpp>
#  include <devicekit/transfer/detail/streams.hpp>
#endif

namespace devicekit::detail {

/// Host-to-host copies of this many bytes in all or more are shared over the copy threads
/// (copy_workers.hpp). One thread's copy is bound by what one core can keep in flight, well under
/// the socket's memory bandwidth (on an H200's host, 6.6-7.1 GB/s streamed by one thread against
/// 33-36 GB/s by eight); below about 1 MiB, waking the threads costs about what they save.
inline constexpr std::size_t shared_host_copy_min_bytes = std::size_t{1} << 20;

/// Host items -> host memory, one bulk_copy each, shared over the copy threads from
/// shared_host_copy_min_bytes in all; done on return.
DEVICEKIT_DECL void copy_host_items(std::span<const copy_item> items);

/// Copies `items` to their destinations on `dst`. For a cuda `dst` the copies are queued on `s`
/// (a stream of `dst`) and may still run when this returns; for a cpu `dst` they are done. For a
/// cuda `dst`, the destinations of host items must lie in one allocation
/// (copy_staged_host_items_to_device).
DEVICEKIT_DECL void copy_items(std::span<const copy_item> items, device dst, native_stream_handle s);
/// copy_items for a caller that has already asked whether `s` is capturing (capture_of, or a
/// stream of devicekit's own, which nothing captures): `captured` is the answer, not asked again.
DEVICEKIT_DECL void copy_items(std::span<const copy_item> items, device dst, native_stream_handle s, bool captured);

/// Copies a list of runs (each: `bytes` from `src` on `src_device` to `dst`) into memory of
/// `dst_device`, for runs that are not one block of a placed tree (shard copies each device's
/// runs of a source tree this way).
/// For a cuda `dst_device` the copies are queued on `s` (a stream of that device; its
/// destinations must not overlap each other or any source) and may still run when this returns;
/// device sources must be ready (work that writes them on other streams finished or waited for).
/// Runs are grouped by source device, and each group goes the planner's way (planner.hpp):
/// same device: CUB, cudaMemcpyBatchAsync or single copies; other devices: peer copies, batched
/// where several, else staged through host memory when the pair has no peer access; host
/// sources: packed into one pinned buffer (up to single_stage_limit) and scattered from it in one
/// batch, else one staged transfer per run. For a cpu `dst_device` the copies are done on return.
DEVICEKIT_DECL void copy_runs(std::span<const copy_run> runs, device dst_device, native_stream_handle s);

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/copy.ipp>
#endif
