#pragma once
/// \file
/// The host arithmetic the MPI backend (detail/mpi_transport.hpp) does around MPI's calls: an
/// average as a sum divided in place (MPI has no average), and reduced-precision leaves (float16,
/// bfloat16, fp8) widened to float for MPI_FLOAT and narrowed back once (the MPI standard has no
/// datatype for them; distribute/mpi.hpp says why they are not reduced with a user-defined op).
/// And the element-wise combine of the ring all-reduce, which reduces where MPI would (a received
/// segment into the leaves). Apart from the transport because none of it calls MPI.
#include <devicekit/core/element_type.hpp>
#include <devicekit/core/float_types.hpp>
#include <devicekit/distribute/options.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace devicekit::detail {

/// Calls f(p as T*) where T is the C++ type of `t`, for the integer and float types MPI reduces
/// natively (mpi_datatype); nothing for other types.
template <class F>
void with_native_type(element_type t, void* p, F&& f) {
  switch (t) {
    case element_type::int8: f(static_cast<std::int8_t*>(p)); break;
    case element_type::uint8: f(static_cast<std::uint8_t*>(p)); break;
    case element_type::int16: f(static_cast<std::int16_t*>(p)); break;
    case element_type::uint16: f(static_cast<std::uint16_t*>(p)); break;
    case element_type::int32: f(static_cast<std::int32_t*>(p)); break;
    case element_type::uint32: f(static_cast<std::uint32_t*>(p)); break;
    case element_type::int64: f(static_cast<std::int64_t*>(p)); break;
    case element_type::uint64: f(static_cast<std::uint64_t*>(p)); break;
    case element_type::float32: f(static_cast<float*>(p)); break;
    case element_type::float64: f(static_cast<double*>(p)); break;
    default: break;
  }
}

/// Divides `count` elements in place by `n` (MPI has no average: sum, then this).
inline void divide_in_place(void* data, std::size_t count, element_type t, int n) {
  auto run = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n));
  };
  with_native_type(t, data, run);  // other types are refused earlier by can_reduce
}

/// a + b and a * b as MPI_SUM and MPI_PROD compute them: integers wrap, as MPI's sums do in
/// practice; they are combined as unsigned 64-bit values and truncated, so that no signed
/// overflow (nor an int promotion of small types) is undefined behaviour here.
template <class T>
T wrapping_sum(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
  } else {
    return a + b;
  }
}
template <class T>
T wrapping_product(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
  } else {
    return a * b;
  }
}

/// dst[i] = op(dst[i], src[i]) for `count` elements of a type MPI reduces natively (the
/// integer and float types of mpi_datatype), as MPI_SUM, MPI_PROD, MPI_MIN and MPI_MAX do (an
/// average sums).
inline void combine_into(void* dst, const void* src, std::size_t count, element_type t, reduce_op op) {
  auto run = [&](auto* d) {
    using T = std::remove_pointer_t<decltype(d)>;
    const T* s = static_cast<const T*>(src);
    auto apply = [&](auto f) {
      for (std::size_t i = 0; i < count; ++i) d[i] = f(d[i], s[i]);
    };
    switch (op) {
      case reduce_op::product: apply([](T a, T b) { return wrapping_product(a, b); }); break;
      case reduce_op::min: apply([](T a, T b) { return b < a ? b : a; }); break;
      case reduce_op::max: apply([](T a, T b) { return a < b ? b : a; }); break;
      default: apply([](T a, T b) { return wrapping_sum(a, b); }); break;
    }
  };
  with_native_type(t, dst, run);  // the ring takes only these types (mpi_backend::all_reduce_leaves)
}

/// Calls f(T{}) with the C++ type of a reduced-precision element type; false for other types.
template <class F>
bool with_reduced_float(element_type t, F&& f) {
  switch (t) {
    case element_type::float16: f(float16_t{}); return true;
    case element_type::bfloat16: f(bfloat16_t{}); return true;
    case element_type::float8_e4m3fn: f(float8_e4m3_t{}); return true;
    case element_type::float8_e5m2: f(float8_e5m2_t{}); return true;
    default: return false;
  }
}

/// `count` elements of reduced-precision type `t` at `in`, widened (exactly) to float.
inline void widen_to_float(float* out, const void* in, std::size_t count, element_type t) {
  with_reduced_float(t, [&](auto tag) {
    using T = decltype(tag);
    const auto* p = static_cast<const T*>(in);
    for (std::size_t i = 0; i < count; ++i) out[i] = widen(p[i]);
  });
}

/// `count` floats narrowed to `t` (nearest even; fp8 saturates), after dividing by `divisor`
/// (an average) when it is not 1: one rounding per element.
inline void narrow_from_float(void* out, const float* in, std::size_t count, element_type t, int divisor) {
  with_reduced_float(t, [&](auto tag) {
    using T = decltype(tag);
    auto* p = static_cast<T*>(out);
    const auto n = static_cast<float>(divisor);
    for (std::size_t i = 0; i < count; ++i) p[i] = narrow_to<T>(divisor == 1 ? in[i] : in[i] / n);
  });
}

/// How many elements of a reduced-precision leaf are widened at a time: bounds the float scratch
/// (4 MiB) whatever the leaf's size.
inline constexpr std::size_t widen_chunk_elements = std::size_t{1} << 20;

}  // namespace devicekit::detail
