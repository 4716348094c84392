#pragma once
/// \file
/// The core vocabulary: devices, streams, errors, settings, device lists and topology, the
/// CUDA runtime guard. Every other layer builds on it.
///
/// Each header also stands alone; this one is for translation units that use the whole layer.
#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/core/capture.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/config_error.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/device_list.hpp>
#include <devicekit/core/device_ops.hpp>
#include <devicekit/core/element_type.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/float_types.hpp>
#include <devicekit/core/graph.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/core/topology.hpp>
