#pragma once
/// \file
/// The copy engine: runs of bytes between host, pinned and device memory, the layer that place/ is
/// built on (see transfer/detail/copy.hpp). The engine declares nothing public, so all of it lives
/// under transfer/detail/; this umbrella includes it for translation units built on the engine.
/// transfer/batched_copy.cuh (CUB kernels, nvcc only) is included by .cu files that want it.
#include <devicekit/transfer/detail/copy.hpp>
