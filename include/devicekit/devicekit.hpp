#pragma once
/// \file
/// Everything devicekit offers, layer by layer, and the device manager that composes them.
/// Each layer has its own umbrella (<devicekit/core.hpp>, detect, tree, memory, transfer, place,
/// compute, distribute, report, manager) and each facility header also stands alone: a translation unit that
/// needs one layer pays for that layer only (scripts/compile-times measures each).
///
/// Not included here: <devicekit/report/json.hpp> (nlohmann-json, the most expensive header to
/// compile; include it where JSON is written), <devicekit/compute.hpp> (the tree algorithms, a
/// layer above placement; include it where trees are computed on) and the CUDA-only headers (.cuh:
/// the kernels of compute/ are in <devicekit/compute/kernels.cuh>, for files that nvcc
/// compiles).
#include <devicekit/core.hpp>
#include <devicekit/detect.hpp>
#include <devicekit/distribute.hpp>
#include <devicekit/manager.hpp>
#include <devicekit/memory.hpp>
#include <devicekit/place.hpp>
#include <devicekit/report.hpp>
#include <devicekit/transfer.hpp>
#include <devicekit/tree.hpp>
