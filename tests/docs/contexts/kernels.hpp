// Fragments compiled by nvcc that launch a kernel of the reader's (see common.hpp).
#pragma once
#include "common.hpp"

extern std::vector<std::vector<float>> batches;  // a range of host trees, as prefetch takes
__global__ void kernel(const float* data);
extern dim3 grid;
extern dim3 block;
