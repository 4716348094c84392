#pragma once
/// \file
/// Flat leaves as the communicators take them: `leaf_span` (mutable) and `const_leaf_span`
/// (read-only), a pointer, an element count and an element type (core/element_type.hpp).
#include <devicekit/core/element_type.hpp>

#include <cstddef>
#include <span>
#include <type_traits>

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
  [[nodiscard]] static leaf_span of(C& c) noexcept { return of(std::span(c)); }
};

/// A flat, read-only leaf (the source of all_gather, reduce_scatter, scatter).
struct const_leaf_span {
  const void* data = nullptr;
  std::size_t count = 0;
  element_type type = element_type::opaque;

  const_leaf_span() = default;
  const_leaf_span(const void* d, std::size_t n, element_type t) noexcept : data(d), count(n), type(t) {}
  const_leaf_span(const leaf_span& s) noexcept
      : data(s.data), count(s.count), type(s.type) {}  // NOLINT: implicit on purpose

  [[nodiscard]] std::size_t bytes() const noexcept { return count * size_of(type); }

  template <class T>
  [[nodiscard]] static const_leaf_span of(std::span<T> s) noexcept {
    return {static_cast<const void*>(s.data()), wire_count<T>(s.size()), element_type_of<T>};
  }
  template <class C>
  requires requires(const C& c) { std::span(c); }
  [[nodiscard]] static const_leaf_span of(const C& c) noexcept { return of(std::span(c)); }
};

}  // namespace devicekit
