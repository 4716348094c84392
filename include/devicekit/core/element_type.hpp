#pragma once
/// \file
/// The one element-type vocabulary: what a leaf holds, as the tree layer names it
/// (`leaf_info::element_type`) and as the communicators move it (leaf spans, buckets). NCCL's and
/// MPI's datatypes are mapped from it in their own headers (distribute/nccl.hpp, mpi.hpp).
///
///   element_type                the enumeration; `opaque` elements move as bytes
///   to_string(t), size_of(t)    its name ("float32") and its size in bytes
///   is_floating(t)              floating point or not
///   element_type_of<T>          the element_type of a C++ type (element_type_traits<T>)
///   element_type_name<T>()      to_string(element_type_of<T>)
///
/// Names follow the dtypes of NumPy and PyTorch (`float32`, `int64`, `bfloat16`). A type with no
/// fixed-width meaning shared by NCCL and MPI is `opaque`: `bool`, `long double` (80-bit x87
/// extended precision in 16 bytes on x86-64, IEEE binary128 on AArch64 Linux, a `double` with
/// MSVC: see the System V and AArch64 ABIs), and structs.
///
/// The reduced-precision floats (`float16_t` = `__half`, `bfloat16_t` = `__nv_bfloat16`, and the
/// fp8 formats `float8_e4m3_t`, `float8_e5m2_t`: core/float_types.hpp) are element types like the
/// others. The fp8 names are PyTorch's (`float8_e4m3fn`: no infinities).
///
/// Adding a type keeps this shape: one enumerator (at the end: structure hashes use the value),
/// one row of `element_types` (name, size, kind), and an `element_type_traits` specialisation
/// next to the C++ type; a transport that can move it adds it to its datatype mapping.
#include <devicekit/core/float_types.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace devicekit {

/// The element type of a leaf. `opaque` leaves (bool, structs, anything trivially copyable
/// without an arithmetic meaning) are moved as bytes: broadcast, gather and scatter accept
/// them, reductions refuse them.
enum class element_type : std::uint8_t {
  opaque,
  int8,
  uint8,
  int16,
  uint16,
  int32,
  uint32,
  int64,
  uint64,
  float16,
  bfloat16,
  float32,
  float64,
  float8_e4m3fn,
  float8_e5m2,
};

/// What arithmetic an element type has.
enum class element_kind : std::uint8_t { opaque, signed_integer, unsigned_integer, floating };

/// One row of the table below.
struct element_type_info {
  element_type type;
  std::string_view name;
  std::size_t size;  ///< bytes per element (opaque: one byte, counted in bytes)
  element_kind kind;
};

/// Every element type, in the order of the enumeration.
inline constexpr std::array element_types = {
    element_type_info{element_type::opaque, "opaque", 1, element_kind::opaque},
    element_type_info{element_type::int8, "int8", 1, element_kind::signed_integer},
    element_type_info{element_type::uint8, "uint8", 1, element_kind::unsigned_integer},
    element_type_info{element_type::int16, "int16", 2, element_kind::signed_integer},
    element_type_info{element_type::uint16, "uint16", 2, element_kind::unsigned_integer},
    element_type_info{element_type::int32, "int32", 4, element_kind::signed_integer},
    element_type_info{element_type::uint32, "uint32", 4, element_kind::unsigned_integer},
    element_type_info{element_type::int64, "int64", 8, element_kind::signed_integer},
    element_type_info{element_type::uint64, "uint64", 8, element_kind::unsigned_integer},
    element_type_info{element_type::float16, "float16", 2, element_kind::floating},
    element_type_info{element_type::bfloat16, "bfloat16", 2, element_kind::floating},
    element_type_info{element_type::float32, "float32", 4, element_kind::floating},
    element_type_info{element_type::float64, "float64", 8, element_kind::floating},
    element_type_info{element_type::float8_e4m3fn, "float8_e4m3fn", 1, element_kind::floating},
    element_type_info{element_type::float8_e5m2, "float8_e5m2", 1, element_kind::floating},
};

/// How many element types there are (the size of a table indexed by element_type).
inline constexpr std::size_t element_type_count = element_types.size();

static_assert(
    [] {
      for (std::size_t i = 0; i < element_types.size(); ++i) {
        if (static_cast<std::size_t>(element_types[i].type) != i) return false;
      }
      return true;
    }(),
    "element_types: row i must describe the element_type whose value is i");

/// The row of `t` (a value outside the enumeration reads as opaque).
[[nodiscard]] constexpr const element_type_info& element_info(element_type t) noexcept {
  const auto i = static_cast<std::size_t>(t);
  return i < element_types.size() ? element_types[i] : element_types[0];
}

/// Bytes per element.
[[nodiscard]] constexpr std::size_t size_of(element_type t) noexcept { return element_info(t).size; }

/// The name: "float32", "int64", "opaque", ...
[[nodiscard]] constexpr std::string_view to_string(element_type t) noexcept { return element_info(t).name; }

[[nodiscard]] constexpr bool is_floating(element_type t) noexcept {
  return element_info(t).kind == element_kind::floating;
}

/// Maps a C++ element type to an element_type. Specialise it for your own arithmetic types.
template <class T, class = void>
struct element_type_traits {
  static_assert(std::is_trivially_copyable_v<T>,
                "element_type_traits<T>: leaves must hold trivially copyable elements to be communicated");
  static constexpr element_type value = element_type::opaque;
};

template <class T>
struct element_type_traits<T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>>> {
  static constexpr element_type value = [] {
    if constexpr (std::is_floating_point_v<T>) {
      if constexpr (sizeof(T) == 4)
        return element_type::float32;
      else if constexpr (sizeof(T) == 8)
        return element_type::float64;
      else
        return element_type::opaque;  // long double: no wire type in MPI's or NCCL's common set
    } else if constexpr (std::is_signed_v<T>) {
      if constexpr (sizeof(T) == 1)
        return element_type::int8;
      else if constexpr (sizeof(T) == 2)
        return element_type::int16;
      else if constexpr (sizeof(T) == 4)
        return element_type::int32;
      else
        return element_type::int64;
    } else {
      if constexpr (sizeof(T) == 1)
        return element_type::uint8;
      else if constexpr (sizeof(T) == 2)
        return element_type::uint16;
      else if constexpr (sizeof(T) == 4)
        return element_type::uint32;
      else
        return element_type::uint64;
    }
  }();
};

template <>
struct element_type_traits<float16_t> {
  static constexpr element_type value = element_type::float16;
};
template <>
struct element_type_traits<bfloat16_t> {
  static constexpr element_type value = element_type::bfloat16;
};
template <>
struct element_type_traits<float8_e4m3_t> {
  static constexpr element_type value = element_type::float8_e4m3fn;
};
template <>
struct element_type_traits<float8_e5m2_t> {
  static constexpr element_type value = element_type::float8_e5m2;
};

/// The element_type of `T` (cv-qualifiers ignored).
template <class T>
inline constexpr element_type element_type_of = element_type_traits<std::remove_cv_t<T>>::value;

/// The name of `T`'s element type, for messages and `leaf_info`.
template <class T>
[[nodiscard]] constexpr std::string_view element_type_name() noexcept {
  return to_string(element_type_of<T>);
}

}  // namespace devicekit
