#pragma once
/// \file
/// What a CUDA context costs in device memory, as devicekit counts it: one rule, used by the
/// memory strategies (the default headroom of a budget, memory/strategy.hpp) and by the simulated
/// GPUs (sim/), which charge each device exactly this for its primary context. A budget worked
/// out here therefore fits on a simulated GPU of any size, as it should on a real one.
///
/// The figure is 512 MiB, and at most an eighth of the device's memory:
/// - A context holds the modules it loaded (the program's kernels and its libraries'), the local
///   memory reserved for every thread that can be resident (cudaLimitStackSize per thread, CUDA
///   runtime API, cudaDeviceSetLimit), the device heaps for printf and malloc, and the driver's
///   tables. Measured on one GPU by PyTorch: 636 MiB with every module loaded at start, 274 MiB
///   with lazy loading (https://github.com/pytorch/pytorch/pull/86509). Lazy loading is the
///   default since CUDA 12.2 (CUDA C++ Programming Guide, "Lazy Loading"); 512 MiB covers such a
///   context with room for the modules libraries load later (cuBLAS, NCCL).
/// - The reserved local memory grows with the number of SMs, and small devices (an embedded GPU, a
///   small MIG slice, a small simulated GPU) have few: a fixed 512 MiB would take most or all of
///   a device of 1 GiB or less. Below 4 GiB the headroom is an eighth of the device instead.
/// Nothing here is measured at run time: a budget must not depend on when it is asked. A program
/// whose context costs more states its own headroom (a strategy's headroom_bytes()).
/// Depends on nothing, so that the simulator can include it.
#include <cstdint>

namespace devicekit {

/// The device memory counted for a CUDA context on a GPU of `total_bytes`: 512 MiB, at most an
/// eighth of `total_bytes` (see the file comment for why).
[[nodiscard]] constexpr std::uint64_t cuda_context_headroom_bytes(std::uint64_t total_bytes) noexcept {
  constexpr std::uint64_t typical = std::uint64_t{512} << 20;
  return total_bytes / 8 < typical ? total_bytes / 8 : typical;
}

static_assert(cuda_context_headroom_bytes(std::uint64_t{80} << 30) == std::uint64_t{512} << 20);
static_assert(cuda_context_headroom_bytes(std::uint64_t{1} << 30) == std::uint64_t{128} << 20);
static_assert(cuda_context_headroom_bytes(0) == 0);

}  // namespace devicekit
