#pragma once
/// \file
/// The copy engine: runs of bytes between host, pinned and device memory (see transfer/copy.hpp).
///
/// Each header also stands alone; this one is for translation units that use the whole layer.
/// transfer/batched_copy.cuh (CUB kernels, nvcc only) is included by .cu files that want it.
#include <devicekit/transfer/copy.hpp>
