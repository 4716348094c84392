// cuBLAS handles: create, destroy, stream and workspace. No math runs (the simulator runs no
// kernels); what is simulated is the bookkeeping a program relies on and the rules the cuBLAS
// documentation gives for them (cuBLAS, "cublasSetWorkspace()", "cublasSetStream()"):
//   - a handle belongs to the device current when it was created;
//   - cublasSetWorkspace takes device memory of that device, aligned to 256 bytes, the whole
//     [workspace, workspace + size) inside one allocation (CUBLAS_STATUS_INVALID_VALUE otherwise);
//     a null workspace of size 0 means "no workspace";
//   - cublasSetStream returns the handle to cuBLAS's own workspace pool (a user workspace must be
//     set again after it);
//   - a destroyed handle is refused (CUBLAS_STATUS_NOT_INITIALIZED), where cuBLAS leaves it undefined.
// Locking: each call holds the state's mutex, as NCCL's communicator calls do; not counted for
// fault injection (they set up host state only).
#include "entry.hpp"
#include "memory_model.hpp"
#include "scheduler.hpp"

#include <cublas_v2.h>

#include <set>

struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  bool user_workspace = false;  ///< set by cublasSetWorkspace since the last cublasSetStream
};

namespace devicekit::cuda_sim::detail {
namespace {

std::set<cublasHandle_t>& live_handles() {
  static auto* handles = new std::set<cublasHandle_t>();  // never destroyed: calls may come at exit
  return *handles;
}

bool live(cublasHandle_t h) { return h != nullptr && live_handles().count(h) != 0; }

}  // namespace
}  // namespace devicekit::cuda_sim::detail

using namespace devicekit::cuda_sim::detail;

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  bool torn_down = false;
  auto lock = enter(global(), torn_down);
  if (torn_down || global().devices.empty()) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* h = new cublasContext;
  h->device = tl_device;
  live_handles().insert(h);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  bool torn_down = false;
  auto lock = enter(global(), torn_down);
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  live_handles().erase(handle);
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  bool torn_down = false;
  auto lock = enter(global(), torn_down);
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  state& g = global();
  cudaError_t err = cudaSuccess;
  const stream_obj* s = resolve(g, stream, "cublasSetStream", err);
  if (s == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (s->device != handle->device) {
    violation(g, "cublasSetStream",
              "the stream belongs to device " + std::to_string(s->device) + ", the handle to device " +
                  std::to_string(handle->device) + " (a handle works on the device current at cublasCreate)");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->stream = stream;
  handle->workspace = nullptr;  // back to cuBLAS's own pool
  handle->workspace_bytes = 0;
  handle->user_workspace = false;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  bool torn_down = false;
  auto lock = enter(global(), torn_down);
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
  bool torn_down = false;
  auto lock = enter(global(), torn_down);
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  state& g = global();
  if (workspace != nullptr || workspaceSizeInBytes != 0) {
    if (workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    allocation* owner = nullptr;
    if (check_range(g, workspace, workspaceSizeInBytes, "cublasSetWorkspace", owner) != cudaSuccess ||
        owner == nullptr || owner->kind != mem_kind::device || owner->device != handle->device) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  handle->workspace = workspace;
  handle->workspace_bytes = workspaceSizeInBytes;
  handle->user_workspace = workspace != nullptr;
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
