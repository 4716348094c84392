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

// Every error the simulator returns (tests/sim/expect_errors_named.cmake checks that each one its
// sources name is here), with cudaError_t's name (driver_types.h) and the text the CUDA runtime's
// cudaGetErrorString gives. A code not here (one injected with DEVICEKIT_SIM_FAIL) reads, for both
// name and text, "unrecognized error code", as the runtime documents for a code it does not know.
#define SIM_ERROR_NAMES(X)                                                                                          \
  X(cudaSuccess, "no error")                                                                                        \
  X(cudaErrorInvalidValue, "invalid argument")                                                                      \
  X(cudaErrorMemoryAllocation, "out of memory")                                                                     \
  X(cudaErrorInitializationError, "initialization error")                                                           \
  X(cudaErrorCudartUnloading, "driver shutting down")                                                               \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                                               \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                                      \
  X(cudaErrorNotReady, "device not ready")                                                                          \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                                        \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")                    \
  X(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices")                       \
  X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                                            \
  X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                                              \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped")            \
  X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region")                  \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                                            \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                                           \
  X(cudaErrorNotSupported, "operation not supported")                                                               \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")                                \
  X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")                          \
  X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture")                   \
  X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences")                 \
  X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began")                        \
  X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                                           \
  X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream")                     \
  X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
  X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream")              \
  X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread")  \
  X(cudaErrorUnknown, "unknown error")

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define SIM_NAME_CASE(code, text) \
  case code: return #code;
    SIM_ERROR_NAMES(SIM_NAME_CASE)
#undef SIM_NAME_CASE
    default: return "unrecognized error code";
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
