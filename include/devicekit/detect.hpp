#pragma once
/// \file
/// Detection: what hardware this process can use (detectors, properties, capabilities,
/// NVML, host facts, batch sizes from the hardware).
///
/// Each header also stands alone; this one is for translation units that use the whole layer.
#include <devicekit/detect/batch_size.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/detect/compile_only.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/detect/host.hpp>
#include <devicekit/detect/nvml.hpp>
#include <devicekit/detect/properties.hpp>
#include <devicekit/detect/start_environment.hpp>
