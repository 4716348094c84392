// Fragments that run the tree algorithms on placed trees (see common.hpp): compiled by nvcc, which
// the algorithms need for cuda trees (docs/tree-algorithms.md).
#pragma once
#include <devicekit/compute.hpp>
#ifdef __CUDACC__
#  include <devicekit/compute/kernels.cuh>
#endif

#include "common.hpp"

using placed_tree = decltype(dk::place(std::declval<const host_tree&>(), std::declval<dk::device>()));
extern placed_tree w;
extern placed_tree w_grads;
extern dk::stream s;
