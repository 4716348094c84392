#pragma once
/// \file
/// `cublas_workspace`: a cuBLAS handle's workspace from a devicekit pool (cublasSetWorkspace), so
/// that cuBLAS's scratch is under the pool's budget and counted in it as the client "cublas"
/// (memory/clients.hpp) instead of beside it:
///
///   cublasHandle_t h;  cublasCreate(&h);  cublasSetStream(h, s.native_handle());
///   devicekit::cublas_workspace ws(h, pool);        // 32 MiB from `pool`, on h's stream
///   cublasSgemm(h, ...);                            // uses it
///   // ws goes before h: the handle is given no workspace, the memory freed in the stream's order
///
/// cuBLAS's rules (cuBLAS documentation, "cublasSetWorkspace()"): the memory must stay valid while
/// the handle may use it, and cublasSetStream gives the handle back cuBLAS's own workspace pool, so
/// make the workspace after the last cublasSetStream (or call rebind() after it). A handle has one
/// devicekit workspace at a time, and a workspace serves one handle: a second for the same handle
/// is refused with invalid_request (cuBLAS workspaces must not be shared by handles that may run at
/// once). Needs the cuBLAS header (cublas_v2.h) and linking cuBLAS (CUDA::cublas).
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_CUDA && __has_include(<cublas_v2.h>)
#  include <devicekit/core/error.hpp>
#  include <devicekit/memory/client_memory.hpp>
#  include <devicekit/memory/device_memory.hpp>
#  include <devicekit/memory/errors.hpp>

#  include <cublas_v2.h>

#  include <cstddef>
#  include <mutex>
#  include <set>
#  include <string>

namespace devicekit {

class cublas_workspace {
 public:
  /// What cuBLAS recommends for Hopper and later (cuBLAS documentation, "cublasSetWorkspace()":
  /// 32 MiB; 4 MiB for earlier GPUs).
  static constexpr std::size_t default_bytes = std::size_t{32} << 20;

  /// `bytes` from `memory`, allocated in the order of `handle`'s stream, set as its workspace.
  /// Throws out_of_memory (counted as "cublas" in the message), invalid_request for a handle that
  /// already has a devicekit workspace, cuda_error when cuBLAS refuses (the memory is then given
  /// back and nothing is left set).
  cublas_workspace(cublasHandle_t handle, device_memory& memory, std::size_t bytes = default_bytes)
      : handle_(handle), memory_(memory, "cublas"), bytes_(bytes) {
    if (handle == nullptr)
      throw invalid_request("cublas_workspace: the cuBLAS handle is null; pass one from cublasCreate");
    claim(handle);
    try {
      stream_ = stream_of(handle);
      data_ = memory_.allocate(bytes, 256, stream_);
      set(data_, bytes);
    } catch (...) {
      release_memory();
      unclaim(handle);
      throw;
    }
  }
  cublas_workspace(const cublas_workspace&) = delete;
  cublas_workspace& operator=(const cublas_workspace&) = delete;

  /// The handle is given no workspace (cuBLAS then runs as with a zero workspace), and the memory
  /// goes back to the pool in the order of the handle's stream. Destroy this before the handle.
  ~cublas_workspace() {
    if (cuda_calls_allowed()) (void)cublasSetWorkspace(handle_, nullptr, 0);
    release_memory();
    unclaim(handle_);
  }

  /// Sets the workspace on the handle again, after cublasSetStream (which drops it). The memory
  /// stays ordered on the stream it was allocated on: synchronise that stream with the new one
  /// first if they differ.
  void rebind() { set(data_, bytes_); }

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] cublasHandle_t handle() const noexcept { return handle_; }

 private:
  static std::mutex& claims_mutex() {
    static std::mutex m;
    return m;
  }
  static std::set<cublasHandle_t>& claims() {
    static std::set<cublasHandle_t> s;
    return s;
  }
  static void claim(cublasHandle_t h) {
    std::lock_guard lock(claims_mutex());
    if (!claims().insert(h).second) {
      throw invalid_request(
          "cublas_workspace: this cuBLAS handle already has a devicekit workspace; destroy that one first "
          "(a handle has one workspace at a time, and a workspace must not serve two handles that may run at once)");
    }
  }
  static void unclaim(cublasHandle_t h) noexcept {
    std::lock_guard lock(claims_mutex());
    claims().erase(h);
  }
  static cudaStream_t stream_of(cublasHandle_t h) {
    cudaStream_t s = nullptr;
    check(cublasGetStream(h, &s), "cublasGetStream");
    return s;
  }
  void set(void* p, std::size_t n) { check(cublasSetWorkspace(handle_, p, n), "cublasSetWorkspace"); }
  static void check(cublasStatus_t status, const char* call) {
    if (status != CUBLAS_STATUS_SUCCESS) {
      throw cuda_error(static_cast<int>(status), call, "cuBLAS status " + std::to_string(static_cast<int>(status)),
                       "cublas_workspace: cuBLAS refused the handle (destroyed?) or the workspace (memory of another "
                       "device?)");
    }
  }
  void release_memory() noexcept {
    if (data_ == nullptr) return;
    try {
      memory_.deallocate(data_, bytes_, 256, stream_);
    } catch (...) {}
    data_ = nullptr;
  }

  cublasHandle_t handle_;
  client_memory memory_;
  std::size_t bytes_;
  cudaStream_t stream_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace devicekit

#endif
