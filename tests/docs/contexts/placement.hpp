// docs/placement.md: the Hana struct `batch` is defined by a block of the page itself; these
// declare what its fragments use besides (see common.hpp).
#pragma once
#include "common.hpp"

using images_t = std::vector<float>;
extern struct batch b;
extern std::vector<batch> loader;  // a range of host trees, as prefetch takes
void step(const auto& placed);

#if DEVICEKIT_HAS_CUDA
cudaStream_t their_stream();  // a stream some other library owns

// Work of that library on its stream, device memory of cuda:0 it writes, and an event it records
// after writing it.
void their_kernel(const float* data, std::size_t count, cudaStream_t s);
float* their_data();
cudaEvent_t their_event();
#endif
