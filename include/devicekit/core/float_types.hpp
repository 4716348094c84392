#pragma once
/// \file
/// Reduced-precision floating element types: half (fp16), bfloat16 and the two fp8 formats of
/// mixed-precision training, as tree leaves hold them.
///
///   float16_t        CUDA's `__half`            (IEEE binary16)
///   bfloat16_t       CUDA's `__nv_bfloat16`     (bfloat16: fp32's exponent, 7 mantissa bits)
///   float8_e4m3_t    CUDA's `__nv_fp8_e4m3`     (OCP FP8 E4M3, no infinities; PyTorch float8_e4m3fn)
///   float8_e5m2_t    CUDA's `__nv_fp8_e5m2`     (OCP FP8 E5M2)
///   is_reduced_float_v<T>    true for these four
///   leaf_element<T>          what a leaf may hold: an arithmetic type or one of these
///
/// Where the CUDA toolkit's headers are visible (nvcc, or g++ with the toolkit on the include
/// path: cuda_fp16.h, cuda_bf16.h and cuda_fp8.h are host-compilable), the names are CUDA's own
/// types, so a `std::vector<__half>` is a leaf and its bytes go to a kernel unchanged. Without
/// CUDA they are devicekit's storage types of the same size and bits, so the same tree compiles,
/// places on the cpu, is communicated and hashed alike. Both convert explicitly from and to
/// `float`, rounding to nearest even (the fp8 types saturate to their largest finite value, as
/// CUDA's `__NV_SATFINITE` constructors do).
#include <devicekit/core/config.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if DEVICEKIT_HAS_CUDA && __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>) && \
    __has_include(<cuda_fp8.h>)
#  include <cuda_bf16.h>
#  include <cuda_fp16.h>
#  include <cuda_fp8.h>
#  define DEVICEKIT_HAS_CUDA_FLOAT_TYPES 1
#else
#  define DEVICEKIT_HAS_CUDA_FLOAT_TYPES 0
#endif

namespace devicekit {
namespace detail {

/// A binary floating-point format with `ExponentBits` and `MantissaBits` stored in the low bits of
/// `Storage`, converted in software on builds without CUDA. `HasInfinity` false is the OCP FP8
/// E4M3 encoding: no infinities, one NaN pattern per sign (all ones), and the top binade used for
/// finite values. `Saturate` sends overflow to the largest finite value instead of infinity.
template <class Storage, int ExponentBits, int MantissaBits, bool HasInfinity, bool Saturate>
struct software_float {
  static constexpr int bias = (1 << (ExponentBits - 1)) - 1;
  static constexpr Storage sign_bit = Storage(1u << (ExponentBits + MantissaBits));
  static constexpr std::uint32_t exponent_all_ones = (1u << ExponentBits) - 1;

  /// The largest finite value.
  static double max_finite() noexcept {
    if constexpr (HasInfinity) {
      return std::ldexp(2.0 - std::ldexp(1.0, -MantissaBits), int(exponent_all_ones) - 1 - bias);
    } else {  // all-ones exponent holds finite values, except the all-ones mantissa (NaN)
      return std::ldexp(2.0 - std::ldexp(1.0, 1 - MantissaBits), int(exponent_all_ones) - bias);
    }
  }

  static Storage nan_bits() noexcept {
    if constexpr (HasInfinity) {
      return Storage((exponent_all_ones << MantissaBits) | (1u << (MantissaBits - 1)));
    } else {
      return Storage((exponent_all_ones << MantissaBits) | ((1u << MantissaBits) - 1));
    }
  }

  static Storage encode(float value) noexcept {
    const bool negative = std::signbit(value);
    const Storage sign = negative ? sign_bit : Storage(0);
    if (std::isnan(value)) return Storage(sign | nan_bits());
    const double magnitude = std::fabs(static_cast<double>(value));
    if (magnitude == 0) return sign;
    const auto overflow = [&]() -> Storage {
      if constexpr (HasInfinity && !Saturate) return Storage(sign | (exponent_all_ones << MantissaBits));
      return Storage(sign | encode_finite(max_finite()));
    };
    if (std::isinf(magnitude)) return overflow();
    // The quantum (distance between neighbours) at this magnitude: subnormals share the smallest.
    int exponent = 0;
    std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent, m in [0.5, 1)
    const int unbiased = std::max(exponent - 1, 1 - bias);
    const double quantum = std::ldexp(1.0, unbiased - MantissaBits);
    const double steps = magnitude / quantum;  // exact: a power-of-two scaling
    double rounded = std::floor(steps);
    const double rest = steps - rounded;
    if (rest > 0.5 || (rest == 0.5 && std::fmod(rounded, 2.0) != 0)) rounded += 1;  // nearest, ties to even
    const double result = rounded * quantum;
    if (result > max_finite()) return overflow();
    return Storage(sign | encode_finite(result));
  }

  /// Bits of a non-negative value that the format holds exactly.
  static Storage encode_finite(double exact) noexcept {
    if (exact == 0) return 0;
    int exponent = 0;
    const double m = std::frexp(exact, &exponent);  // exact = m * 2^exponent
    const int unbiased = exponent - 1;
    if (unbiased < 1 - bias) {  // subnormal: exponent field 0
      return Storage(std::llround(std::ldexp(exact, bias - 1 + MantissaBits)));
    }
    const auto mantissa = static_cast<std::uint32_t>(std::llround(std::ldexp(m * 2 - 1, MantissaBits)));
    return Storage((std::uint32_t(unbiased + bias) << MantissaBits) | mantissa);
  }

  static float decode(Storage bits) noexcept {
    const bool negative = (bits & sign_bit) != 0;
    const std::uint32_t exponent = (std::uint32_t(bits) >> MantissaBits) & exponent_all_ones;
    const std::uint32_t mantissa = std::uint32_t(bits) & ((1u << MantissaBits) - 1);
    double magnitude = 0;
    if (exponent == exponent_all_ones && HasInfinity) {
      magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    } else if (!HasInfinity && exponent == exponent_all_ones && mantissa == (1u << MantissaBits) - 1) {
      magnitude = std::numeric_limits<double>::quiet_NaN();
    } else if (exponent == 0) {
      magnitude = std::ldexp(double(mantissa), 1 - bias - MantissaBits);
    } else {
      magnitude = std::ldexp(double(mantissa | (1u << MantissaBits)), int(exponent) - bias - MantissaBits);
    }
    return static_cast<float>(negative ? -magnitude : magnitude);
  }
};

/// devicekit's storage type for a reduced-precision float on builds without CUDA: the same size
/// and bits as CUDA's type, trivially copyable, converted explicitly from and to float.
template <class Format, class Storage, class Tag>
struct float_storage {
  Storage bits;

  float_storage() = default;
  explicit float_storage(float value) noexcept : bits(Format::encode(value)) {}
  explicit operator float() const noexcept { return Format::decode(bits); }
};

struct float16_tag {};
struct bfloat16_tag {};
struct float8_e4m3_tag {};
struct float8_e5m2_tag {};

using float16_format = software_float<std::uint16_t, 5, 10, true, false>;
using bfloat16_format = software_float<std::uint16_t, 8, 7, true, false>;
using float8_e4m3_format = software_float<std::uint8_t, 4, 3, false, true>;
using float8_e5m2_format = software_float<std::uint8_t, 5, 2, true, true>;

}  // namespace detail

#if DEVICEKIT_HAS_CUDA_FLOAT_TYPES
using float16_t = __half;
using bfloat16_t = __nv_bfloat16;
using float8_e4m3_t = __nv_fp8_e4m3;
using float8_e5m2_t = __nv_fp8_e5m2;
#else
using float16_t = detail::float_storage<detail::float16_format, std::uint16_t, detail::float16_tag>;
using bfloat16_t = detail::float_storage<detail::bfloat16_format, std::uint16_t, detail::bfloat16_tag>;
using float8_e4m3_t = detail::float_storage<detail::float8_e4m3_format, std::uint8_t, detail::float8_e4m3_tag>;
using float8_e5m2_t = detail::float_storage<detail::float8_e5m2_format, std::uint8_t, detail::float8_e5m2_tag>;
#endif

static_assert(sizeof(float16_t) == 2 && sizeof(bfloat16_t) == 2 && sizeof(float8_e4m3_t) == 1 &&
              sizeof(float8_e5m2_t) == 1);
static_assert(std::is_trivially_copyable_v<float16_t> && std::is_trivially_copyable_v<bfloat16_t> &&
              std::is_trivially_copyable_v<float8_e4m3_t> && std::is_trivially_copyable_v<float8_e5m2_t>);

/// True for the reduced-precision floats above (cv-qualifiers ignored).
template <class T>
inline constexpr bool is_reduced_float_v = [] {
  using U = std::remove_cv_t<T>;
  return std::is_same_v<U, float16_t> || std::is_same_v<U, bfloat16_t> || std::is_same_v<U, float8_e4m3_t> ||
         std::is_same_v<U, float8_e5m2_t>;
}();

/// What a leaf may hold: an arithmetic type (bool included, moved as bytes) or a reduced-precision
/// float. cv-qualifiers are ignored.
template <class T>
concept leaf_element = std::is_arithmetic_v<std::remove_cv_t<T>> || is_reduced_float_v<T>;

/// True for the element types with floating-point arithmetic: float, double, long double and the
/// reduced-precision floats.
template <class T>
inline constexpr bool is_floating_element_v = std::is_floating_point_v<std::remove_cv_t<T>> || is_reduced_float_v<T>;

/// The value of `x` as a float (reduced-precision) or as itself (arithmetic types): what host code
/// computes with. Reduced-precision values widen exactly.
template <class T>
[[nodiscard]] inline auto widen(T x) noexcept {
  if constexpr (is_reduced_float_v<T>) {
    return static_cast<float>(x);
  } else {
    return x;
  }
}

/// `value` converted to the element type `T`, rounding to nearest even (fp8 saturates).
template <class T, class From>
[[nodiscard]] inline T narrow_to(From value) noexcept {
  if constexpr (is_reduced_float_v<T>) {
    return T(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

}  // namespace devicekit
