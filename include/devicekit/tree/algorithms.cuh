#pragma once
/// \file
/// Moved to compute/ (the algorithms in <devicekit/compute.hpp>, their kernels in
/// <devicekit/compute/kernels.cuh>); kept so existing includes work.
#include <devicekit/compute.hpp>
#include <devicekit/compute/kernels.cuh>
