#pragma once
/// \file
/// What a tree leaf is. `leaf_traits<L>` says whether `L` is a leaf and how to read it:
///
///   scalar      an element value (`float`, `int`, `__half`, ...), copied by value
///   contiguous  a contiguous range of elements with `data()` and `size()`:
///               `std::vector`, `std::span`, `std::array`, `thrust::host_vector`, ...
///   shaped      a shaped array: `devicekit::shaped_array`, a `md::mdspan` view (tree/array.hpp)
///
/// devicekit's own leaf types (`device_array`, `shaped_array`) carry `devicekit_leaf_tag` and
/// describe themselves through members; they may live on a device (their data pointer is then
/// device memory). Every other leaf is host memory. A user type becomes a leaf by specialising
/// `leaf_traits` with the members below.
#include <devicekit/core/device.hpp>
#include <devicekit/core/element_type.hpp>
#include <devicekit/core/float_types.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <type_traits>

namespace devicekit {

enum class leaf_kind : std::uint8_t { scalar, contiguous, shaped };

[[nodiscard]] constexpr std::string_view to_string(leaf_kind k) noexcept {
  switch (k) {
    case leaf_kind::scalar: return "scalar";
    case leaf_kind::contiguous: return "contiguous";
    default: return "shaped";
  }
}

/// The primary template: not a leaf. Specialisations provide
///   static constexpr bool is_leaf = true;
///   static constexpr leaf_kind kind;
///   using element_type = (a leaf_element: arithmetic or reduced-precision float, without const);
///   static constexpr std::size_t rank;                               // 0 scalar, 1 contiguous
///   static const element_type* data(const L&);                       // first stored element
///   static std::size_t size(const L&);                               // stored elements to copy
///   static std::array<std::size_t, rank> shape(const L&);            // extents
///   static devicekit::device device(const L&);                       // where data() lives
///   static constexpr bool always_on_host = true;   // optional: device() is the cpu for every value,
///                                                  // so the tree algorithms need not ask each leaf
template <class L>
struct leaf_traits {
  static constexpr bool is_leaf = false;
};

namespace detail {

/// A type that describes itself as a devicekit leaf through members (see tree/array.hpp).
template <class L>
concept self_describing_leaf = requires {
  typename L::devicekit_leaf_tag;
};

template <class P>
concept pointer_to_leaf_element = std::is_pointer_v<P> && leaf_element<std::remove_pointer_t<P>>;

/// A contiguous host range of leaf elements (arithmetic values or reduced-precision floats):
/// `data()` gives a pointer to them, `size()` an integral count. Excludes devicekit's own leaves,
/// which say more about themselves.
template <class R>
concept contiguous_element_range = !self_describing_leaf<R> && requires(const R& r) {
  { std::data(r) } -> pointer_to_leaf_element;
  { std::size(r) } -> std::integral;
};

}  // namespace detail

template <class T>
requires leaf_element<T>
struct leaf_traits<T> {
  static constexpr bool is_leaf = true;
  static constexpr leaf_kind kind = leaf_kind::scalar;
  using element_type = T;
  static constexpr std::size_t rank = 0;
  static const T* data(const T& v) noexcept { return &v; }
  static std::size_t size(const T&) noexcept { return 1; }
  static std::array<std::size_t, 0> shape(const T&) noexcept { return {}; }
  static devicekit::device device(const T&) noexcept { return device::cpu(); }
  static constexpr bool always_on_host = true;
};

template <class R>
requires(!leaf_element<R> && detail::contiguous_element_range<R>) struct leaf_traits<R> {
  static constexpr bool is_leaf = true;
  static constexpr leaf_kind kind = leaf_kind::contiguous;
  using element_type = std::remove_cv_t<std::remove_pointer_t<decltype(std::data(std::declval<const R&>()))>>;
  static constexpr std::size_t rank = 1;
  static const element_type* data(const R& r) noexcept { return std::data(r); }
  static std::size_t size(const R& r) noexcept { return static_cast<std::size_t>(std::size(r)); }
  static std::array<std::size_t, 1> shape(const R& r) noexcept { return {size(r)}; }
  static devicekit::device device(const R&) noexcept { return device::cpu(); }
  static constexpr bool always_on_host = true;
};

/// devicekit's own leaves (device_array, shaped_array) answer through their members.
template <class L>
requires detail::self_describing_leaf<L>
struct leaf_traits<L> {
  static constexpr bool is_leaf = true;
  static constexpr leaf_kind kind = L::leaf_kind_value;
  using element_type = std::remove_cv_t<typename L::element_type>;
  static constexpr std::size_t rank = L::rank();
  static const element_type* data(const L& l) noexcept { return l.data(); }
  static std::size_t size(const L& l) noexcept { return l.size(); }
  static std::array<std::size_t, rank> shape(const L& l) noexcept { return l.shape(); }
  static devicekit::device device(const L& l) noexcept { return l.device(); }
};

/// True when `L` (cv-ref ignored) is a leaf.
template <class L>
inline constexpr bool is_leaf_v = leaf_traits<std::remove_cvref_t<L>>::is_leaf;

}  // namespace devicekit
