#pragma once
// The names the simulator counts calls under: what an entry point passes to injected() (through
// SIM_ENTER, SIM_ENTER_STREAM, `entry`, or NCCL's collective and point_to_point). They are what
// api_calls(name) counts and what fault injection (DEVICEKIT_SIM_FAIL, fail_call) can pick; a name
// not here would never fire, so both refuse it. tests/sim/expect_api_names.cmake keeps the list
// equal to the names the sources pass.
// Locking: none (constant).
#include <algorithm>
#include <string>
#include <string_view>

namespace devicekit::cuda_sim::detail {

/// Sorted (byte order), for a binary search. Functions that forward to another entry point are
/// counted under that one's name: cudaStreamCreate and cudaStreamCreateWithPriority as
/// cudaStreamCreateWithFlags, cudaEventCreate as cudaEventCreateWithFlags, cudaGraphInstantiate
/// as cudaGraphInstantiateWithFlags, cudaMemset as cudaMemsetAsync. Not counted: the version and
/// error functions, and NCCL's communicator functions (they only read or set up host state).
inline constexpr std::string_view counted_apis[] = {
    "cuCtxGetCurrent",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid",
    "cuDeviceTotalMem",
    "cuStreamIsCapturing",
    "cudaDeviceCanAccessPeer",
    "cudaDeviceEnablePeerAccess",
    "cudaDeviceGetAttribute",
    "cudaDeviceGetDefaultMemPool",
    "cudaDeviceGetGraphMemAttribute",
    "cudaDeviceGetPCIBusId",
    "cudaDeviceGraphMemTrim",
    "cudaDeviceSynchronize",
    "cudaEventCreateWithFlags",
    "cudaEventDestroy",
    "cudaEventQuery",
    "cudaEventRecord",
    "cudaEventSynchronize",
    "cudaFree",
    "cudaFreeAsync",
    "cudaFreeHost",
    "cudaGetDevice",
    "cudaGetDeviceCount",
    "cudaGetDeviceProperties",
    "cudaGetDriverEntryPointByVersion",
    "cudaGraphCreate",
    "cudaGraphDestroy",
    "cudaGraphExecDestroy",
    "cudaGraphInstantiateWithFlags",
    "cudaGraphLaunch",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cudaLaunchHostFunc",
    "cudaMalloc",
    "cudaMallocAsync",
    "cudaMallocFromPoolAsync",
    "cudaMallocHost",
    "cudaMemGetInfo",
    "cudaMemPoolCreate",
    "cudaMemPoolDestroy",
    "cudaMemPoolGetAccess",
    "cudaMemPoolGetAttribute",
    "cudaMemPoolSetAccess",
    "cudaMemPoolSetAttribute",
    "cudaMemPoolTrimTo",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "cudaMemcpyBatchAsync",
    "cudaMemcpyPeerAsync",
    "cudaMemsetAsync",
    "cudaPointerGetAttributes",
    "cudaSetDevice",
    "cudaStreamBeginCapture",
    "cudaStreamCreateWithFlags",
    "cudaStreamDestroy",
    "cudaStreamEndCapture",
    "cudaStreamGetCaptureInfo",
    "cudaStreamGetDevice",
    "cudaStreamIsCapturing",
    "cudaStreamQuery",
    "cudaStreamSynchronize",
    "cudaStreamWaitEvent",
    "cudaThreadExchangeStreamCaptureMode",
    "ncclAllGather",
    "ncclAllReduce",
    "ncclBroadcast",
    "ncclRecv",
    "ncclReduceScatter",
    "ncclSend",
};
static_assert(std::ranges::is_sorted(counted_apis), "counted_apis must stay sorted");

/// Whether the simulator counts calls under `api` (one of counted_apis).
inline bool is_counted_api(std::string_view api) { return std::ranges::binary_search(counted_apis, api); }

/// Why `api` (not in counted_apis) cannot be picked: the near names a typo or a forwarding
/// function may have meant, and where the list is.
std::string unknown_api_problem(std::string_view api);

/// `text` between single quotes, for messages. Built by appending: GCC 12 at -O3 warns falsely
/// (-Wrestrict, GCC bug 105329) on `"'" + std::string(text)`, and CI builds with -Werror.
inline std::string quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out.append(text);
  out += '\'';
  return out;
}

}  // namespace devicekit::cuda_sim::detail
