#pragma once
/// \file
/// The definitions behind transfer/detail/host_copy.hpp: the streaming copy and bulk_copy.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/transfer/detail/host_copy.hpp>

#include <devicekit/core/detail/host_access.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if DEVICEKIT_STREAMING_COPY
#  include <emmintrin.h>
#endif

namespace devicekit::detail {

DEVICEKIT_DECL void streaming_copy(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
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

DEVICEKIT_DECL void bulk_copy_part(void* dst, const void* src, std::size_t n,
                                   [[maybe_unused]] std::size_t whole) noexcept {
  note_host_access(src, n, false);
  note_host_access(dst, n, true);
#if DEVICEKIT_STREAMING_COPY
  if (whole >= streaming_copy_min_bytes && n != 0) {
    streaming_copy(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
    return;
  }
#endif
  if (n != 0) std::memcpy(dst, src, n);
}

DEVICEKIT_DECL void bulk_copy(void* dst, const void* src, std::size_t n) noexcept { bulk_copy_part(dst, src, n, n); }

}  // namespace devicekit::detail
