#pragma once
/// \file
/// Moving a bucket's leaves into and out of a staging buffer: pack and unpack, one helper each,
/// used by every collective (detail/collectives.hpp), rank-major layouts included.
#include <devicekit/distribute/bucket.hpp>

#include <cstddef>
#include <span>

namespace devicekit::detail {

template <class T>
using per_participant = std::span<const std::span<const T>>;

inline std::byte* byte_at(void* p, std::size_t off) noexcept { return static_cast<std::byte*>(p) + off; }
inline const std::byte* byte_at(const void* p, std::size_t off) noexcept {
  return static_cast<const std::byte*>(p) + off;
}

/// One leaf's part of a bucket: where its bytes are, and how many.
template <class Ptr>
struct piece {
  Ptr data;
  std::size_t bytes;
};

/// Copies the bucket's leaves into `buf`, back to back in bucket order; `part(i)` says where leaf
/// i's bytes come from and how many there are. Returns the bytes packed.
template <class B, class Part>
std::size_t pack(B& b, std::size_t p, const bucket& bk, void* buf, Part part) {
  std::size_t off = 0;
  for (const std::size_t i : bk.leaves) {
    const auto x = part(i);
    b.copy(p, byte_at(buf, off), x.data, x.bytes);
    off += x.bytes;
  }
  return off;
}

/// The reverse of pack: the bucket's leaves out of `buf`, back to back in bucket order.
template <class B, class Part>
std::size_t unpack(B& b, std::size_t p, const bucket& bk, const void* buf, Part part) {
  std::size_t off = 0;
  for (const std::size_t i : bk.leaves) {
    const auto x = part(i);
    b.copy(p, x.data, byte_at(buf, off), x.bytes);
    off += x.bytes;
  }
  return off;
}

/// Whole leaves of a list, as pack and unpack take them.
template <class Span>
auto whole(std::span<const Span> leaves) {
  return [leaves](std::size_t i) { return piece<decltype(leaves[i].data)>{leaves[i].data, leaves[i].bytes()}; };
}

}  // namespace devicekit::detail
