#pragma once
/// \file
/// The structure summary that ranks compare before a collective (a hash of leaf types and
/// counts, the leaf count, bytes, root and a problem flag), and the stable hash it uses.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

namespace devicekit {

/// A 64-bit hash stable across processes and builds (std::hash is not): FNV-1a's step (xor,
/// multiply by the FNV prime) on 64-bit words, folding the high half down after each. A value is
/// one step; a string is its length, then its bytes 8 at a time (the last few zero-padded). Each
/// step depends on the one before, so the cost is the number of steps: for a tree of 1000 leaves
/// (its 2000-character structure string, then a type and a count per leaf) about 2 us per
/// collective, against 6 us byte by byte with two steps per leaf. Ranks compare the values as
/// they are, so they must share the byte order (as the MPI_BYTE exchange of structure_summary
/// already assumes).
class structure_hasher {
 public:
  void add_bytes(const void* p, std::size_t n) noexcept {
    const auto* b = static_cast<const unsigned char*>(p);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, b + i, 8);
      add(w);
    }
    if (i < n) {
      std::uint64_t w = 0;
      std::memcpy(&w, b + i, n - i);
      add(w);
    }
  }
  void add(std::uint64_t v) noexcept {
    h_ ^= v;
    h_ *= prime;
    h_ ^= h_ >> 32;
  }
  void add(std::string_view s) noexcept {
    add(static_cast<std::uint64_t>(s.size()));
    add_bytes(s.data(), s.size());
  }
  [[nodiscard]] std::uint64_t value() const noexcept { return h_; }

 private:
  static constexpr std::uint64_t prime = 1099511628211ull;
  std::uint64_t h_ = 14695981039346656037ull;
};

/// What one rank says about the tree it passes to a collective; ranks compare these before the
/// first payload collective so that a mismatch fails on every rank instead of hanging. Trivially
/// copyable: it travels as bytes.
struct structure_summary {
  std::uint64_t hash = 0;
  std::uint64_t leaf_count = 0;
  std::uint64_t total_bytes = 0;
  std::int64_t root = -1;     ///< the root the rank passed (broadcast, scatter), else -1
  std::uint64_t problem = 0;  ///< nonzero: the rank found its own arguments unusable (see tree_info)

  friend bool operator==(const structure_summary&, const structure_summary&) = default;
};
static_assert(std::is_trivially_copyable_v<structure_summary>);

/// The summary of flat leaves. `with_counts` false hashes only the leaf count and types: used by
/// scatter, whose receive sizes differ across ranks by design. `extra` is mixed in (a tree's
/// path hash).
template <class Span>
[[nodiscard]] structure_summary summarize(std::span<const Span> leaves, bool with_counts = true,
                                          std::uint64_t extra = 0) {
  structure_hasher h;
  h.add(static_cast<std::uint64_t>(leaves.size()));
  h.add(extra);
  std::uint64_t bytes = 0;
  // One step per leaf: the count shifted above the type's 8 bits (element_type is a uint8_t; a
  // count would need 2^56 elements, 64 Pi, to lose bits to the shift).
  for (const auto& l : leaves) {
    const auto type = static_cast<std::uint64_t>(l.type);
    h.add(with_counts ? (static_cast<std::uint64_t>(l.count) << 8 | type) : type);
    bytes += l.bytes();
  }
  return {h.value(), leaves.size(), bytes, -1, 0};
}

}  // namespace devicekit
