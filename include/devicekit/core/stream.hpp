#pragma once
/// \file
/// `stream`: an owning CUDA stream on a cuda device, or the inline "stream" of a cpu device
/// (work runs synchronously on the calling thread, so synchronize() and idle() are trivial).
/// `stream_ref`: a non-owning view of a stream (devicekit's own, a raw `cudaStream_t`, or a
/// `cuda::stream_ref`), which is what every devicekit API that queues work takes.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/runtime.hpp>

#include <cstddef>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#if DEVICEKIT_HAS_CUDA && __has_include(<cuda/stream_ref>)
#  include <cuda/stream_ref>
#  define DEVICEKIT_HAS_CUDA_STREAM_REF 1
#else
#  define DEVICEKIT_HAS_CUDA_STREAM_REF 0
#endif

namespace devicekit {

#if DEVICEKIT_HAS_CUDA
namespace detail {
/// Whether a CUDA context is current on the calling thread: cuCtxGetCurrent, fetched through the
/// runtime (devicekit never links libcuda). When the driver cannot be asked, the answer is yes,
/// which keeps the guard below restoring as it always did.
[[nodiscard]] DEVICEKIT_DECL bool context_is_current() noexcept;
}  // namespace detail

/// Makes `ordinal` the current CUDA device for the lifetime of the guard, then restores the
/// previous one, but only if a context was current before: a thread that had chosen no device
/// (cudaGetDevice reports 0 there) would otherwise get a context created on device 0 at the
/// restore (since CUDA 12.0 cudaSetDevice initialises the primary context at once), which costs
/// hundreds of MB of GPU 0 in every MPI rank and worker thread that works elsewhere. Such a
/// thread keeps `ordinal` as its device afterwards.
class scoped_device {
 public:
  explicit scoped_device(int ordinal);
  /// The same for noexcept paths (deallocation): failures are ignored.
  scoped_device(int ordinal, std::nothrow_t) noexcept;
  scoped_device(const scoped_device&) = delete;
  scoped_device& operator=(const scoped_device&) = delete;
  ~scoped_device() {
    if (restore_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};
using native_stream_handle = cudaStream_t;

namespace detail {
/// The CUDA streams that devicekit's `stream` objects own, by device: what `is_idle(device)`
/// (core/device_ops.hpp) queries besides the device's default streams. A handle is removed
/// before it is destroyed, and queried only under the registry's lock, so a query never meets a
/// destroyed stream. Never destroyed itself: streams held by statics and thread_locals go after
/// ordinary statics.
class stream_registry {
 public:
  [[nodiscard]] static stream_registry& instance() {
    static auto* registry = new stream_registry();
    return *registry;
  }

  void add(int ordinal, cudaStream_t s) {
    std::lock_guard lock(mutex_);
    streams_.emplace_back(ordinal, s);
  }

  void remove(cudaStream_t s) noexcept {
    std::lock_guard lock(mutex_);
    std::erase_if(streams_, [s](const auto& e) { return e.second == s; });
  }

  /// True when `pred` holds for every registered stream of device `ordinal` (it stops at the
  /// first that does not). `pred` runs under the lock: it must not create or destroy streams.
  template <class Pred>
  [[nodiscard]] bool all_of(int ordinal, Pred&& pred) const {
    std::lock_guard lock(mutex_);
    for (const auto& [o, s] : streams_) {
      if (o == ordinal && !pred(s)) return false;
    }
    return true;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<int, cudaStream_t>> streams_;
};
}  // namespace detail
#else
using native_stream_handle = void*;
#endif

class stream {
 public:
  /// An inline stream on the CPU.
  stream() noexcept = default;

  /// A new non-blocking stream on `dev` (cuda), or the inline stream (cpu). config_error for a cuda
  /// device this process does not have (core/detail/device_exists.hpp).
  explicit stream(device dev);

  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& other) noexcept : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}
  stream& operator=(stream&& other) noexcept;
  ~stream() { release(); }

  [[nodiscard]] device get_device() const noexcept { return device_; }
  /// The CUDA handle; nullptr for a cpu stream.
  [[nodiscard]] native_stream_handle native_handle() const noexcept { return handle_; }

  /// Blocks until all work queued on the stream has finished (see stream_ref::synchronize).
  void synchronize() const;
  /// True when no queued work is pending. Never blocks (see stream_ref::idle).
  [[nodiscard]] bool idle() const;

 private:
  void release() noexcept;

  device device_{};
  native_stream_handle handle_ = nullptr;
};

/// A non-owning reference to a stream: its device and its handle. This is how devicekit works
/// inside code that owns its streams (PyTorch's current stream, cuDF's, the user's own): wrap the
/// handle, pass the reference, and devicekit queues its work there. Like `cuda::stream_ref`
/// (libcu++) it neither creates nor destroys anything, and the stream must outlive every use.
///
/// A `stream` converts implicitly, so APIs that take a `stream_ref` accept devicekit's own
/// streams unchanged. The default-constructed reference is the cpu device's inline stream.
///
/// Synchronize through this class, not through `cuda::stream_ref::wait()`, in files that a host
/// compiler builds: libcu++ 3.0 compiles the CUDA calls of `wait()` and `ready()` only under a
/// CUDA compiler (its _CCCL_TRY_CUDA_API expands to nothing otherwise), so there they do nothing.
class stream_ref {
 public:
  /// The inline stream of the cpu device.
  constexpr stream_ref() noexcept = default;
  /// A view of `s` (implicit: every API that takes a stream_ref takes a `stream`).
  stream_ref(const stream& s) noexcept  // NOLINT(google-explicit-constructor)
      : device_(s.get_device()), handle_(s.native_handle()) {}

#if DEVICEKIT_HAS_CUDA
  /// An existing CUDA stream of device `dev`: no runtime call is made. `handle` may be a
  /// special stream (cudaStreamLegacy, cudaStreamPerThread) or nullptr, the legacy default
  /// stream, which then belongs to `dev`.
  /// `dev` must be the stream's device: devicekit checks streams against the devices of the
  /// data they move, and trusts this one.
  constexpr stream_ref(device dev, cudaStream_t handle) noexcept : device_(dev), handle_(handle) {}
  /// An existing CUDA stream; its device is asked from the runtime (cudaStreamGetDevice, CUDA
  /// 12.8+), so the stream must be valid. For the legacy default stream (nullptr) that is the
  /// calling thread's current device, as the runtime documents for cudaStreamGetDevice.
  explicit stream_ref(cudaStream_t handle) : handle_(handle) {
    int ordinal = 0;
    DEVICEKIT_CUDA_CHECK(cudaStreamGetDevice(handle, &ordinal));
    device_ = device::cuda(ordinal);
  }
  /// Mirrors `cuda::stream_ref`: an integer is never a stream (0 would silently mean the legacy
  /// default stream). Write `stream_ref(dev, nullptr)` for that stream.
  stream_ref(int) = delete;
  stream_ref(std::nullptr_t) = delete;
#endif

#if DEVICEKIT_HAS_CUDA_STREAM_REF
  /// From libcu++'s `cuda::stream_ref` (what CCCL's memory resources and algorithms take); the
  /// device is asked from the runtime as for a raw handle.
  stream_ref(::cuda::stream_ref s)  // NOLINT(google-explicit-constructor)
      : stream_ref(s.get()) {}
  /// To libcu++'s `cuda::stream_ref`, for CCCL calls. A cpu reference has no CUDA stream.
  operator ::cuda::stream_ref() const {  // NOLINT(google-explicit-constructor)
    if (device_.is_cpu()) {
      throw config_error(
          "a cpu stream_ref has no CUDA stream to give to cuda::stream_ref: "
          "use a stream of a cuda device");
    }
    return ::cuda::stream_ref(handle_);
  }
#endif

  [[nodiscard]] constexpr device get_device() const noexcept { return device_; }
  /// The CUDA handle; nullptr for the cpu inline stream (and for the legacy default stream).
  [[nodiscard]] constexpr native_stream_handle native_handle() const noexcept { return handle_; }

  /// Blocks until all work queued on the stream has finished.
  void synchronize() const {
#if DEVICEKIT_HAS_CUDA
    if (!device_.is_cpu()) check_cuda(cudaStreamSynchronize(handle_), "cudaStreamSynchronize(stream)");
#endif
  }

  /// True when no queued work is pending. Never blocks.
  [[nodiscard]] bool idle() const;

  [[nodiscard]] friend constexpr bool operator==(const stream_ref& a, const stream_ref& b) noexcept {
    return a.device_ == b.device_ && a.handle_ == b.handle_;
  }

 private:
  device device_ = device::cpu(0);
  native_stream_handle handle_ = nullptr;
};

// A stream's waits are its reference's; a moved-from cuda stream (no handle) has nothing queued,
// so it is not handed on: a null handle would name the legacy default stream there.
inline void stream::synchronize() const {
  if (handle_ != nullptr) stream_ref(*this).synchronize();
}
inline bool stream::idle() const { return handle_ == nullptr || stream_ref(*this).idle(); }

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/stream.ipp>
#endif
