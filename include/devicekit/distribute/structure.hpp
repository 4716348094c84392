#pragma once
/// \file
/// The structure summary that ranks compare before a collective (a hash of leaf types and
/// counts, the leaf count, bytes, root and a problem flag), and the stable hash it uses.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

namespace devicekit {

/// FNV-1a, 64 bits: stable across processes and builds (std::hash is not). Strings go in byte
/// by byte; a 64-bit value in one step (xor, multiply by the FNV prime, fold the high half
/// down), since summarize() adds two per leaf on every collective: byte-wise that was about
/// 18 us for 1000 leaves, a tenth of a small all-reduce.
class structure_hasher {
 public:
  void add_bytes(const void* p, std::size_t n) noexcept {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h_ ^= b[i];
      h_ *= prime;
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
  for (const auto& l : leaves) {
    h.add(static_cast<std::uint64_t>(l.type));
    if (with_counts) h.add(static_cast<std::uint64_t>(l.count));
    bytes += l.bytes();
  }
  return {h.value(), leaves.size(), bytes, -1, 0};
}

}  // namespace devicekit
