#pragma once
/// \file
/// Everything devicekit offers. Each facility header also stands alone.
#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/device_list.hpp>
#include <devicekit/core/device_ops.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/pool_access.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/core/topology.hpp>
#include <devicekit/detect/batch_size.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/detect/host.hpp>
#include <devicekit/detect/nvml.hpp>
#include <devicekit/detect/properties.hpp>
#include <devicekit/distribute/assignment.hpp>
#include <devicekit/distribute/bucket.hpp>
#include <devicekit/distribute/collectives.hpp>
#include <devicekit/distribute/leaf_span.hpp>
#include <devicekit/distribute/mpi.hpp>   // empty without MPI (DEVICEKIT_HAS_MPI 0)
#include <devicekit/distribute/nccl.hpp>  // empty without NCCL (DEVICEKIT_HAS_NCCL 0)
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/distribute/self.hpp>
#include <devicekit/distribute/summary.hpp>
#include <devicekit/distribute/tree_collectives.hpp>
#include <devicekit/manager.hpp>
#include <devicekit/memory/allocator.hpp>
#include <devicekit/memory/buffer.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/profiler.hpp>
#include <devicekit/memory/resources.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/place/copy.hpp>
#include <devicekit/place/default_device.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/place/prefetch.hpp>
#include <devicekit/place/shard.hpp>
#include <devicekit/place/split.hpp>
#include <devicekit/report/engines.hpp>
#include <devicekit/report/report.hpp>
#include <devicekit/tree/tree.hpp>
// Hana structs as tree nodes: host code only (Hana does not support nvcc).
#if !defined(__CUDACC__) && __has_include(<boost/hana/accessors.hpp>)
#  include <devicekit/tree/hana.hpp>
#endif
#if __has_include(<nlohmann/json.hpp>)
#  include <devicekit/report/json.hpp>
#endif
