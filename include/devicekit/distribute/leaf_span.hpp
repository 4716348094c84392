#pragma once
/// \file
/// The vocabulary of the communicators: flat leaf spans (pointer, element count, element type
/// from core/element_type.hpp), reduction operations, the structure summary that ranks compare
/// before a collective, and the errors collectives throw.
#include <devicekit/core/element_type.hpp>
#include <devicekit/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace devicekit {

/// Element count of a leaf as the communicators see it: opaque leaves count bytes.
template <class T>
[[nodiscard]] constexpr std::size_t wire_count(std::size_t elements) noexcept {
  return element_type_of<T> == element_type::opaque ? elements * sizeof(T) : elements;
}

/// A flat, mutable leaf: `count` elements of `type` at `data` (host memory for the MPI
/// communicator, device memory of the communicator's device for NCCL).
struct leaf_span {
  void* data = nullptr;
  std::size_t count = 0;
  element_type type = element_type::opaque;

  [[nodiscard]] std::size_t bytes() const noexcept { return count * size_of(type); }

  template <class T>
  [[nodiscard]] static leaf_span of(std::span<T> s) noexcept {
    static_assert(!std::is_const_v<T>, "leaf_span::of: the leaf is written to; use const_leaf_span for a source");
    return {static_cast<void*>(s.data()), wire_count<T>(s.size()), element_type_of<T>};
  }
  template <class C>
    requires requires(C& c) { std::span(c); }
  [[nodiscard]] static leaf_span of(C& c) noexcept {
    return of(std::span(c));
  }
};

/// A flat, read-only leaf (the source of all_gather, reduce_scatter, scatter).
struct const_leaf_span {
  const void* data = nullptr;
  std::size_t count = 0;
  element_type type = element_type::opaque;

  const_leaf_span() = default;
  const_leaf_span(const void* d, std::size_t n, element_type t) noexcept : data(d), count(n), type(t) {}
  const_leaf_span(const leaf_span& s) noexcept : data(s.data), count(s.count), type(s.type) {}  // NOLINT: implicit on purpose

  [[nodiscard]] std::size_t bytes() const noexcept { return count * size_of(type); }

  template <class T>
  [[nodiscard]] static const_leaf_span of(std::span<T> s) noexcept {
    return {static_cast<const void*>(s.data()), wire_count<T>(s.size()), element_type_of<T>};
  }
  template <class C>
    requires requires(const C& c) { std::span(c); }
  [[nodiscard]] static const_leaf_span of(const C& c) noexcept {
    return of(std::span(c));
  }
};

/// Reductions. `average` is the sum divided by the number of ranks; for integer leaves the
/// division truncates, as NCCL's ncclAvg does.
enum class reduce_op : std::uint8_t { sum, average, min, max, product };

[[nodiscard]] constexpr std::string_view to_string(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::average: return "average";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    default: return "product";
  }
}

// --- structure summaries ------------------------------------------------------------------------

/// FNV-1a, 64 bits: stable across processes and builds (std::hash is not).
class structure_hasher {
 public:
  void add_bytes(const void* p, std::size_t n) noexcept {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h_ ^= b[i];
      h_ *= 1099511628211ull;
    }
  }
  void add(std::uint64_t v) noexcept { add_bytes(&v, sizeof v); }
  void add(std::string_view s) noexcept {
    add(static_cast<std::uint64_t>(s.size()));
    add_bytes(s.data(), s.size());
  }
  [[nodiscard]] std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 14695981039346656037ull;
};

/// What one rank says about the tree it passes to a collective; ranks compare these before the
/// first payload collective so that a mismatch fails on every rank instead of hanging. Trivially
/// copyable: it travels as bytes.
struct structure_summary {
  std::uint64_t hash = 0;
  std::uint64_t leaf_count = 0;
  std::uint64_t total_bytes = 0;
  std::int64_t root = -1;  ///< the root the rank passed (broadcast, scatter), else -1
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

// --- errors -------------------------------------------------------------------------------------

/// An MPI or NCCL call failed. Says which collective, which call, on which rank, and the
/// library's error string.
class communication_error : public error {
 public:
  communication_error(std::string_view backend, std::string_view operation, std::string_view call, int rank,
                      int size, int code, std::string_view detail)
      : error(format(backend, operation, call, rank, size, code, detail)),
        backend_(backend),
        operation_(operation),
        call_(call),
        detail_(detail),
        rank_(rank),
        size_(size),
        code_(code) {}

  [[nodiscard]] const std::string& backend() const noexcept { return backend_; }
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  static std::string format(std::string_view backend, std::string_view operation, std::string_view call, int rank,
                            int size, int code, std::string_view detail) {
    std::string m;
    m.append(backend).append(" ").append(operation).append(": ").append(call).append(" failed on rank ");
    m.append(std::to_string(rank)).append(" of ").append(std::to_string(size)).append(" (code ");
    m.append(std::to_string(code)).append("): ").append(detail);
    return m;
  }

  std::string backend_, operation_, call_, detail_;
  int rank_ = -1, size_ = 0, code_ = 0;
};

/// The ranks passed trees (or arguments) that do not agree; thrown on every rank with the same
/// description of who passed what.
class structure_mismatch_error : public error {
 public:
  structure_mismatch_error(std::string_view operation, int rank, std::string_view detail)
      : error(std::string(operation) + " on rank " + std::to_string(rank) + ": " + std::string(detail)),
        operation_(operation),
        rank_(rank) {}
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }

 private:
  std::string operation_;
  int rank_ = -1;
};

}  // namespace devicekit
