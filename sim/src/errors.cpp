// Errors: the thread's last error (cudaGetLastError, cudaPeekAtLastError), names and texts.
// Locking: none (thread-local or constant).
#include "entry.hpp"

using namespace devicekit::cuda_sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return tl_last_error; }

#define SIM_ERROR_NAMES(X)                                                                               \
  X(cudaSuccess, "no error")                                                                             \
  X(cudaErrorInvalidValue, "invalid argument")                                                           \
  X(cudaErrorMemoryAllocation, "out of memory")                                                          \
  X(cudaErrorInitializationError, "initialization error")                                                \
  X(cudaErrorCudartUnloading, "driver shutting down")                                                    \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                                    \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                           \
  X(cudaErrorNotReady, "device not ready")                                                               \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                             \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")         \
  X(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices")            \
  X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                                 \
  X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                                   \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
  X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region")       \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                                 \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                                \
  X(cudaErrorNotSupported, "operation not supported")                                                    \
  X(cudaErrorUnknown, "unknown error")

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define SIM_NAME_CASE(code, text) \
  case code: return #code;
    SIM_ERROR_NAMES(SIM_NAME_CASE)
#undef SIM_NAME_CASE
    default: return "cudaErrorUnknown";
  }
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  switch (error) {
#define SIM_STRING_CASE(code, text) \
  case code: return text;
    SIM_ERROR_NAMES(SIM_STRING_CASE)
#undef SIM_STRING_CASE
    default: return "unrecognized error code";
  }
}

}  // extern "C"
