#pragma once
/// \file
/// The definitions behind transfer/detail/staging_ring.hpp: the staging ring's buffer turnover.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/staging_ring.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/runtime.hpp>

namespace devicekit::detail {

DEVICEKIT_DECL staging_ring::~staging_ring() {
  for (auto& b : busy_) {
    if (cuda_calls_allowed()) (void)cudaEventDestroy(b.done);
    try {
      pool_->deallocate_async(b.p, bytes_, 256, b.stream);
    } catch (...) {
      // The free's event could not be recorded: wait for the copy, then free at once.
      if (cuda_calls_allowed()) (void)cudaStreamSynchronize(b.stream);
      free_now(b.p);
    }
  }
  for (std::byte* p : idle_) free_now(p);
}

DEVICEKIT_DECL std::byte* staging_ring::next() {
  if (idle_.empty() && !busy_.empty()) {
    const cudaError_t r = cudaEventQuery(busy_.front().done);  // NotReady: a status, not the last error
    if (r != cudaErrorNotReady || busy_.size() >= max_buffers_) {
      if (r == cudaErrorNotReady) DEVICEKIT_CUDA_CHECK(cudaEventSynchronize(busy_.front().done));
      (void)cudaEventDestroy(busy_.front().done);
      idle_.push_back(busy_.front().p);
      busy_.pop_front();
    }
  }
  if (idle_.empty()) idle_.push_back(static_cast<std::byte*>(pool_->allocate(bytes_)));
  std::byte* p = idle_.back();
  idle_.pop_back();
  taken_.push_back(p);
  return p;
}

DEVICEKIT_DECL void staging_ring::free_now(std::byte* p) noexcept {
  try {
    pool_->deallocate(p, bytes_);
  } catch (...) {
    // Only a foreign pointer or a wrong size throws, neither of which the ring can produce.
  }
}

DEVICEKIT_DECL staging_freed_after_wait::~staging_freed_after_wait() {
  current() = outer_;
  if (blocks_.empty()) return;
  // Not waited for: the copies queued may still read the blocks.
  if (!waited_ && cuda_calls_allowed()) (void)cudaStreamSynchronize(stream_);
  device_memory& pool = staging_memory();
  for (const block& b : blocks_) {
    try {
      pool.deallocate(b.p, b.bytes);
    } catch (...) {
      // Only a foreign pointer or a wrong size throws, neither of which keep() is given.
    }
  }
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
