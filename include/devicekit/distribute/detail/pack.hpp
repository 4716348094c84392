#pragma once
/// \file
/// Moving a bucket's leaves into and out of a staging buffer: pack and unpack, one helper each,
/// used by every collective (detail/collectives.hpp), rank-major layouts included.
#include <devicekit/distribute/bucket.hpp>

#include <cstddef>
#include <span>
#include <vector>

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

/// One copy of a batch: `bytes` from `src` to `dst`.
struct copy_span {
  const void* src = nullptr;
  void* dst = nullptr;
  std::size_t bytes = 0;
};

/// A backend that copies a list of runs in one call (NCCL: one batched copy on the local rank's
/// stream, instead of a cudaMemcpyAsync per leaf). Host backends copy leaf by leaf: a memcpy
/// per leaf costs nothing to issue.
template <class B>
concept batch_copy_backend = requires(B& b, std::size_t p, std::span<const copy_span> runs) {
  b.copy_batch(p, runs);
};

/// The copies of a bucket, one per leaf, back to back in the staging buffer in bucket order:
/// `run(x, off)` makes the copy of leaf piece x at offset off. Batched where the backend can.
template <class B, class Part, class Run>
std::size_t copy_bucket(B& b, std::size_t p, const bucket& bk, Part part, Run run) {
  std::size_t off = 0;
  if constexpr (batch_copy_backend<B>) {
    std::vector<copy_span> runs;
    runs.reserve(bk.leaves.size());
    for (const std::size_t i : bk.leaves) {
      const auto x = part(i);
      if (x.bytes != 0) runs.push_back(run(x, off));
      off += x.bytes;
    }
    b.copy_batch(p, std::span<const copy_span>(runs));
  } else {
    for (const std::size_t i : bk.leaves) {
      const auto x = part(i);
      const copy_span c = run(x, off);
      b.copy(p, c.dst, c.src, c.bytes);
      off += x.bytes;
    }
  }
  return off;
}

/// Copies the bucket's leaves into `buf`, back to back in bucket order; `part(i)` says where leaf
/// i's bytes come from and how many there are. Returns the bytes packed.
template <class B, class Part>
std::size_t pack(B& b, std::size_t p, const bucket& bk, void* buf, Part part) {
  return copy_bucket(b, p, bk, part, [buf](const auto& x, std::size_t off) {
    return copy_span{x.data, byte_at(buf, off), x.bytes};
  });
}

/// The reverse of pack: the bucket's leaves out of `buf`, back to back in bucket order.
template <class B, class Part>
std::size_t unpack(B& b, std::size_t p, const bucket& bk, const void* buf, Part part) {
  return copy_bucket(b, p, bk, part, [buf](const auto& x, std::size_t off) {
    return copy_span{byte_at(buf, off), x.data, x.bytes};
  });
}

/// Whole leaves of a list, as pack and unpack take them.
template <class Span>
auto whole(std::span<const Span> leaves) {
  return [leaves](std::size_t i) { return piece<decltype(leaves[i].data)>{leaves[i].data, leaves[i].bytes()}; };
}

}  // namespace devicekit::detail
