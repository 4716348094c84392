#pragma once
/// \file
/// The copy engine on a stream being captured into a CUDA graph: every item is one copy the
/// capture records as a memcpy node, read and written by the copy engine at each launch.
///
/// None of the engine's other paths can be replayed. Staging packs host bytes into pinned
/// buffers at call time (a replay would send the bytes of the first call again), the device ->
/// host path unpacks on the host after waiting, cudaMemcpyBatchAsync is refused during capture
/// (cudaErrorStreamCaptureUnsupported), and the CUB batch uploads its pointer tables from staging.
/// So host ends must be page-locked already, and devices without peer access cannot be crossed;
/// either is refused with capture_error before anything is queued. A graph pays its copies'
/// submission once, at instantiation, which is what staging and batching save eagerly.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/device.hpp>
#  include <devicekit/transfer/detail/runs.hpp>

#  include <span>

namespace devicekit::detail {

/// Copies `items` into `dst` (a cpu destination: pinned host memory) on the capturing stream `s`.
/// Throws capture_error, queuing nothing, for a pageable host end or devices without peer access.
DEVICEKIT_DECL void copy_items_in_capture(std::span<const copy_item> items, device dst, cudaStream_t s);

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/capture_copy.ipp>
#endif
