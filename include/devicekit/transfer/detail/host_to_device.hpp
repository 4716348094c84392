#pragma once
/// \file
/// Host -> device copies: large leaves already in pinned memory go directly, the rest are packed
/// into pinned staging (staging_ring) and sent one chunk per copy while the host packs the next.
/// No locks: each call works on its own ring; the staging pool locks itself.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/transfer/detail/planner.hpp>
#  include <devicekit/transfer/detail/runs.hpp>

#  include <cstddef>
#  include <span>

namespace devicekit::detail {

/// Host leaves at least this large are checked for being pinned already; those are read by the
/// copy engine directly instead of being staged (a host memcpy would cost more than the copy).
inline constexpr std::size_t pinned_source_min_bytes = direct_pinned_min_average_bytes;

[[nodiscard]] DEVICEKIT_DECL bool is_pinned_host(const void* p) noexcept;

/// Host items -> device memory on stream `s`. Large leaves in pinned memory go directly (the
/// copy engine reads them after this returns: keep them unchanged until `s` gets there); the
/// rest through pinned staging.
DEVICEKIT_DECL void copy_host_items_to_device(std::span<const copy_item> items, cudaStream_t s);

/// Host items -> device memory on stream `s`, through pinned staging (see transfer/detail/copy.hpp). The
/// destinations lie in one block in increasing order (placement lays them out so); the range they
/// span goes in one copy per chunk, gaps included. The host packs chunk k+1 while the copy engine
/// moves chunk k, and does not wait for `s` (see staging_ring).
DEVICEKIT_DECL void copy_staged_host_items_to_device(std::span<const copy_item> items, cudaStream_t s);

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/host_to_device.ipp>
#endif
