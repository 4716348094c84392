#pragma once
/// \file
/// Everything devicekit offers. Each facility header also stands alone.
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/runtime.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/detect/host.hpp>
#include <devicekit/detect/properties.hpp>
#include <devicekit/distribute/scheme.hpp>
#include <devicekit/manager.hpp>
#include <devicekit/memory/allocator.hpp>
#include <devicekit/memory/buffer.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/profiler.hpp>
#include <devicekit/memory/resources.hpp>
#include <devicekit/memory/stats.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/report/report.hpp>
#if __has_include(<nlohmann/json.hpp>)
#  include <devicekit/report/json.hpp>
#endif
