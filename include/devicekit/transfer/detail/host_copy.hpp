#pragma once
/// \file
/// Host-side bulk copies for the copy engine (`bulk_copy`); no locks, no state.
///
/// Large copies use streaming (non-temporal) stores: a placed leaf is written once and not read
/// back soon, so streaming skips the read-for-ownership of every destination line and leaves the
/// caches alone. glibc's memcpy only streams above a threshold derived from the last-level cache
/// (3/4 of it), so on machines with a large reported L3 it copies tens of MiB with ordinary
/// stores, at about half the speed of one streamed copy of the same bytes (bench_place:
/// place.large_tree.vs_raw_copy).
///
/// The stores are SSE2's 16-byte `movntdq` (<emmintrin.h>), part of every x86-64 CPU, so no
/// run-time CPU check is needed: a streaming copy is bound by the write-combining buffers that
/// fill whole cache lines, not by the store width, and <immintrin.h> (for AVX's 32-byte form)
/// would add about 0.4 s to every translation unit that includes placement.
#include <devicekit/core/detail/host_access.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#  include <emmintrin.h>
#  define DEVICEKIT_STREAMING_COPY 1
#else
#  define DEVICEKIT_STREAMING_COPY 0
#endif

namespace devicekit::detail {

/// Copies at or above this size stream (when the CPU allows); smaller ones are memcpy.
inline constexpr std::size_t streaming_copy_min_bytes = std::size_t{2} << 20;

#if DEVICEKIT_STREAMING_COPY
inline void streaming_copy(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  // Align the destination to 16 bytes (streaming stores need it), then 128 bytes per step.
  const std::size_t head =
      std::min(n, static_cast<std::size_t>((16 - (reinterpret_cast<std::uintptr_t>(dst) & 15)) & 15));
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m128i v[8];
    for (int k = 0; k < 8; ++k) v[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16 * k));
    for (int k = 0; k < 8; ++k) _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16 * k), v[k]);
  }
  _mm_sfence();  // streamed data visible to other threads (and to DMA) once we return
  std::memcpy(dst + i, src + i, n - i);
}
#endif

/// memcpy for placement: streams large copies where it can.
inline void bulk_copy(void* dst, const void* src, std::size_t n) noexcept {
  note_host_access(src, n, false);
  note_host_access(dst, n, true);
#if DEVICEKIT_STREAMING_COPY
  if (n >= streaming_copy_min_bytes) {
    streaming_copy(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
    return;
  }
#endif
  if (n != 0) std::memcpy(dst, src, n);
}

}  // namespace devicekit::detail
