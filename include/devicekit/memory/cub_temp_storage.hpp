#pragma once
/// \file
/// `cub_temp_storage`: CUB's temporary storage from a devicekit pool, on a stream, counted in the
/// pool as the client "thrust/cub" (memory/clients.hpp). CUB's device-wide algorithms are called
/// twice, once for the size and once to run (CUB, "Device-wide primitives"); run() makes both:
///
///   devicekit::cub_temp_storage tmp(pool, s);
///   tmp.run([&](void* p, std::size_t& n) { return cub::DeviceReduce::Sum(p, n, in, out, count, s.native_handle()); });
///
/// The storage is allocated and freed in the order of the stream, so another stream reuses it only
/// after the algorithm's kernels. Compiles without nvcc (the call is the caller's).
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/client_memory.hpp>
#include <devicekit/memory/device_memory.hpp>

#include <cstddef>

namespace devicekit {

/// CUB's temporary storage from a pool, on a stream: run() makes CUB's size query, allocates what
/// it asked for (counted as "thrust/cub"), and makes the call; the storage is freed in the stream's
/// order by the destructor (or the next run(), which reuses it when large enough).
class cub_temp_storage {
 public:
  cub_temp_storage(device_memory& memory, stream_ref s) : memory_(memory, "thrust/cub"), stream_(s.native_handle()) {}
  cub_temp_storage(const cub_temp_storage&) = delete;
  cub_temp_storage& operator=(const cub_temp_storage&) = delete;
  ~cub_temp_storage() { release(); }

  /// `call(void* storage, std::size_t& bytes)` is a CUB device-wide call (cub::DeviceReduce::Sum
  /// and the rest) on this storage's stream, returning its error code (cudaError_t; 0 is success):
  /// called once with null storage for the size, then with the storage. Returns the first call's
  /// error if it failed, else the second's; throws out_of_memory when the pool cannot give the
  /// storage (nothing is then left allocated, and the pool is unchanged).
  template <class Call>
  auto run(Call&& call) {
    std::size_t bytes = 0;
    if (const auto e = call(nullptr, bytes); e != decltype(e){}) return e;
    reserve(bytes);
    return call(bytes_ == 0 ? nullptr : data_, bytes);
  }

  /// At least `bytes` of storage (kept when already as large).
  void reserve(std::size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    data_ = memory_.allocate(bytes, 256, stream_);
    bytes_ = bytes;
  }
  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  void release() noexcept {
    if (data_ == nullptr) return;
    try {
      memory_.deallocate(data_, bytes_, 256, stream_);
    } catch (...) {}
    data_ = nullptr;
    bytes_ = 0;
  }

  client_memory memory_;
  native_stream_handle stream_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace devicekit
