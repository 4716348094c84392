// A fragment of a Catch2 test on the simulated GPUs (docs/simulated-gpus.md; see common.hpp):
// the GPUs, and one placed tree on each.
#pragma once
#include <catch2/catch.hpp>

#include "common.hpp"

using placed_tree = decltype(dk::place(std::declval<const host_tree&>(), std::declval<dk::device>()));
extern std::vector<placed_tree> trees;
