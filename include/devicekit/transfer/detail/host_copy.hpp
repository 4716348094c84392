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
///
/// Whether the streaming path exists (DEVICEKIT_STREAMING_COPY) depends only on the target CPU
/// and the compiler, never on the user, so the library and the program that links it agree; the
/// intrinsics header is included only where the copy is defined (host_copy.ipp).
#include <devicekit/core/config.hpp>

#include <cstddef>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#  define DEVICEKIT_STREAMING_COPY 1
#else
#  define DEVICEKIT_STREAMING_COPY 0
#endif

namespace devicekit::detail {

/// Copies at or above this size stream (when the CPU allows); smaller ones are memcpy.
inline constexpr std::size_t streaming_copy_min_bytes = std::size_t{2} << 20;

#if DEVICEKIT_STREAMING_COPY
DEVICEKIT_DECL void streaming_copy(std::byte* dst, const std::byte* src, std::size_t n) noexcept;
#endif

/// memcpy for placement: streams large copies where it can.
DEVICEKIT_DECL void bulk_copy(void* dst, const void* src, std::size_t n) noexcept;

/// `n` bytes of a copy of `whole` bytes split into parts (a leaf packed by several copy threads):
/// streams as the whole copy would, so that splitting does not change how the bytes are stored.
DEVICEKIT_DECL void bulk_copy_part(void* dst, const void* src, std::size_t n, std::size_t whole) noexcept;

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/transfer/detail/host_copy.ipp>
#endif
