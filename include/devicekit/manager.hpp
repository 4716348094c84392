#pragma once
/// \file
/// The device manager: `device_manager<Detector, Strategy, Scheme>` (manager/device_manager.hpp,
/// the façade over detection, placement, distribution and pools) and the global manager with its
/// free functions (manager/global.hpp: `default_manager()`, `has_gpu()`, `default_device()`,
/// `print_device_info()`) and a device's memories as jaxlib lists them (manager/memories.hpp). The
/// public path; its parts live under manager/, one job per header, the façade's own under
/// manager/detail/.
#include <devicekit/manager/device_manager.hpp>
#include <devicekit/manager/global.hpp>
#include <devicekit/manager/memories.hpp>
#include <devicekit/manager/strategy.hpp>
