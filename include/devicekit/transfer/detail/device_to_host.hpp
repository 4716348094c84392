#pragma once
/// \file
/// Device -> host copies: runs that lie close together in one allocation come down in one copy,
/// through pinned staging in chunks (two buffers: the host unpacks one while the other fills).
/// Returns when the bytes are there. No locks: each call owns its buffers; the staging pool
/// locks itself.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/transfer/detail/runs.hpp>

#  include <span>

namespace devicekit::detail {

/// Device items of one device -> host memory (any host destinations), through pinned staging:
/// items that lie close together in one allocation come down in one copy. Above
/// pipelined_stage_min_bytes in pieces or chunks (staging_buffer_bytes) through two buffers: the
/// host unpacks chunk k while the copy engine brings chunk k+1. The copies are queued on `*s` (a
/// stream of `dev`), or, for nullptr, on dev's stream for calls without a stream
/// (default_ordered_stream). Returns when the bytes are there. `uncaptured`: the caller has found
/// that `*s` is not capturing (capture_of), so it is not asked again.
DEVICEKIT_DECL void copy_device_group_to_host(std::span<const copy_item> items, device dev,
                                              const stream_ref* s = nullptr, bool uncaptured = false);

/// Device items -> host memory, grouped by source device: the group of `s`'s device on `s` (after
/// the work queued there before), each other group on its device's stream for calls without a
/// stream. Returns when the bytes are there.
DEVICEKIT_DECL void copy_device_items_to_host(std::span<const copy_item> items, cudaStream_t s = nullptr);

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/device_to_host.ipp>
#endif
