#pragma once
/// \file
/// The host arithmetic the MPI backend (detail/mpi_transport.hpp) does around MPI's calls: an
/// average as a sum divided in place (MPI has no average), and reduced-precision leaves (float16,
/// bfloat16, fp8) widened to float for MPI_FLOAT and narrowed back once (the MPI standard has no
/// datatype for them; distribute/mpi.hpp says why they are not reduced with a user-defined op).
/// Apart from the transport because none of it calls MPI.
#include <devicekit/core/element_type.hpp>
#include <devicekit/core/float_types.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace devicekit::detail {

/// Divides `count` elements in place by `n` (MPI has no average: sum, then this).
inline void divide_in_place(void* data, std::size_t count, element_type t, int n) {
  auto run = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n));
  };
  switch (t) {
    case element_type::int8: run(static_cast<std::int8_t*>(data)); break;
    case element_type::uint8: run(static_cast<std::uint8_t*>(data)); break;
    case element_type::int16: run(static_cast<std::int16_t*>(data)); break;
    case element_type::uint16: run(static_cast<std::uint16_t*>(data)); break;
    case element_type::int32: run(static_cast<std::int32_t*>(data)); break;
    case element_type::uint32: run(static_cast<std::uint32_t*>(data)); break;
    case element_type::int64: run(static_cast<std::int64_t*>(data)); break;
    case element_type::uint64: run(static_cast<std::uint64_t*>(data)); break;
    case element_type::float32: run(static_cast<float*>(data)); break;
    case element_type::float64: run(static_cast<double*>(data)); break;
    default: break;  // refused earlier by can_reduce
  }
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
