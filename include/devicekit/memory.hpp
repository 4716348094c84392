#pragma once
/// \file
/// Memory: the pools, their resources, strategies, statistics, buffers and allocators.
///
/// Each header also stands alone; this one is for translation units that use the whole layer.
#include <devicekit/memory/allocator.hpp>
#include <devicekit/memory/buffer.hpp>
#include <devicekit/memory/client_memory.hpp>
#include <devicekit/memory/clients.hpp>
#include <devicekit/memory/cub_temp_storage.hpp>
#include <devicekit/memory/context_headroom.hpp>
#include <devicekit/memory/cuda_resources.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/errors.hpp>
#include <devicekit/memory/host_resources.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/memory/pool_stats.hpp>
#include <devicekit/memory/profiler.hpp>
#include <devicekit/memory/registry.hpp>
#include <devicekit/memory/replay.hpp>
#include <devicekit/memory/resource_concepts.hpp>
#include <devicekit/memory/resources.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/memory/trace.hpp>
