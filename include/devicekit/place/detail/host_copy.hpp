#pragma once
/// \file
/// Host-side bulk copies for placement. Large copies use streaming (non-temporal) stores where
/// the CPU has AVX2: a placed leaf is written once and not read back soon, so streaming skips the
/// read-for-ownership of every destination line and leaves the caches alone. glibc's memcpy only
/// streams above a threshold derived from the last-level cache (3/4 of it), so on machines with a
/// large reported L3 it copies tens of MiB with ordinary stores, at about half the speed of one
/// streamed copy of the same bytes (bench_place: place.large_tree.vs_raw_copy).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#  include <immintrin.h>
#  define DEVICEKIT_STREAMING_COPY 1
#else
#  define DEVICEKIT_STREAMING_COPY 0
#endif

namespace devicekit::detail {

/// Copies at or above this size stream (when the CPU allows); smaller ones are memcpy.
inline constexpr std::size_t streaming_copy_min_bytes = std::size_t{2} << 20;

#if DEVICEKIT_STREAMING_COPY
__attribute__((target("avx2"))) inline void streaming_copy_avx2(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  // Align the destination to 32 bytes (streaming stores need it), then 128 bytes per step.
  const std::size_t head = std::min(n, static_cast<std::size_t>((32 - (reinterpret_cast<std::uintptr_t>(dst) & 31)) & 31));
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  _mm_sfence();  // streamed data visible to other threads (and to DMA) once we return
  std::memcpy(dst + i, src + i, n - i);
}

[[nodiscard]] inline bool cpu_has_avx2() noexcept {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

/// memcpy for placement: streams large copies where it can.
inline void bulk_copy(void* dst, const void* src, std::size_t n) noexcept {
#if DEVICEKIT_STREAMING_COPY
  if (n >= streaming_copy_min_bytes && cpu_has_avx2()) {
    streaming_copy_avx2(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
    return;
  }
#endif
  if (n != 0) std::memcpy(dst, src, n);
}

}  // namespace devicekit::detail
