#pragma once
/// \file
/// Upstream resources: where a pool gets its chunks. Each has the shape of CCCL's synchronous
/// resource (`allocate(bytes, alignment)`, `deallocate(p, bytes, alignment)`, `==`) and says
/// which device it serves (`get_device()`). What they share (the concepts, the alignment check) is
/// in resource_concepts.hpp, which each resource's header includes; the resources are in
/// host_resources.hpp and cuda_resources.hpp. This header includes all three:
///   host_resource          aligned operator new: lets the whole pool run, be tested and be
///                          benchmarked on a machine without a GPU
///   pinned_host_resource   cudaMallocHost (page-locked host memory, reachable by copies on any
///                          stream)
///   cuda_device_resource   device memory, by cudaMallocFromPoolAsync from a driver pool whose
///                          release threshold is set explicitly (its default, 0, hands memory
///                          back at every synchronisation), by cudaMallocAsync from the device's
///                          own pool, or by plain cudaMalloc
///
/// A resource that serves streams also provides events (`create_event`, `record_event`,
/// `event_complete`, `wait_event`, `destroy_event`): the pool uses them to learn when a block
/// freed on one stream may be reused on another (the concept `stream_event_source`). One that
/// also has a device-wide fence (`fence_covers(s)`, `fence()`: cuda_device_resource) spares the
/// pool an event per free: frees on a stream the fence covers record an event only when another
/// stream needs them (memory/detail/pool_stream_registry.hpp). Such a
/// resource may also say whether one of its streams is being captured into a CUDA graph
/// (`capture_of(s)`, returning capture_state); without it the pool asks CUDA
/// (devicekit::capture_of: the driver's cuStreamIsCapturing, then cudaStreamGetCaptureInfo for a
/// capture's id), so a resource whose stream handles are not CUDA streams must provide it: CUDA
/// may crash on a handle it did not make.
///
/// Exit safety: no CUDA call is made once the process is exiting (cuda_calls_allowed()); memory
/// is then left to the process's end.
///
/// CCCL interop: with LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE defined before the first
/// include, the resources carry the properties `cuda::mr::host_accessible` /
/// `cuda::mr::device_accessible` (found by ADL through get_property).
#include <devicekit/memory/cuda_resources.hpp>     // IWYU pragma: export
#include <devicekit/memory/host_resources.hpp>     // IWYU pragma: export
#include <devicekit/memory/resource_concepts.hpp>  // IWYU pragma: export
