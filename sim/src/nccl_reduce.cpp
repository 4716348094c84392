// NCCL's element types and reductions on the host: sizes, fp16 / bf16 / fp8, reduce over ranks.
// Locking: none (pure functions).
#include "nccl.hpp"

#include <cuda_fp8.h>  // host conversions of the fp8 formats (host-compilable)

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace devicekit::cuda_sim::detail {

// ncclFloat8e4m3 and ncclFloat8e5m2 appeared in NCCL 2.24.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
#  define DEVICEKIT_SIM_NCCL_FP8 1
#else
#  define DEVICEKIT_SIM_NCCL_FP8 0
#endif

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
#if DEVICEKIT_SIM_NCCL_FP8
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
#endif
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

namespace {

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u;
  int exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  float v = 0;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return sign != 0 ? -v : v;
}

std::uint16_t float_to_half(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant != 0 ? 0x200u : 0u));
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    std::uint32_t h = mant >> shift;
    if ((mant >> (shift - 1)) & 1u) ++h;  // round half up (enough for a simulator)
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  if (mant & 0x1000u) ++h;
  return static_cast<std::uint16_t>(h);
}

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &x, 4);
  return f;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

#if DEVICEKIT_SIM_NCCL_FP8
/// An fp8 value (E4M3 or E5M2, `kind`) as float, through CUDA's exact fp8 -> half conversion.
float fp8_to_float(std::uint8_t v, __nv_fp8_interpretation_t kind) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), kind);
  return half_to_float(h.x);
}

/// A float rounded to fp8 (nearest even), saturating to the largest finite value as NCCL's fp8
/// reductions do (they convert with __NV_SATFINITE).
std::uint8_t float_to_fp8(float f, __nv_fp8_interpretation_t kind) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, kind));
}
#endif

template <class T>
T combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
    case ncclAvg: return static_cast<T>(a + b);
    case ncclProd: return static_cast<T>(a * b);
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return a;
  }
}

}  // namespace

/// out[i] = op over the ranks of in[r][i], for `count` elements of type `t`.
void reduce_into(void* out, const std::vector<const void*>& in, std::size_t count, ncclDataType_t t, ncclRedOp_t op) {
  const auto n = in.size();
  auto run = [&](auto tag, auto load, auto store) {
    using V = decltype(tag);
    for (std::size_t i = 0; i < count; ++i) {
      V acc = load(in[0], i);
      for (std::size_t r = 1; r < n; ++r) acc = combine<V>(acc, load(in[r], i), op);
      if (op == ncclAvg) acc = static_cast<V>(acc / static_cast<V>(n));
      store(out, i, acc);
    }
  };
  auto plain = [&](auto tag) {
    using V = decltype(tag);
    run(
        tag, [](const void* p, std::size_t i) { return static_cast<const V*>(p)[i]; },
        [](void* p, std::size_t i, V v) { static_cast<V*>(p)[i] = v; });
  };
  // A type reduced in float: stored as `Bits`, read with `to_float`, written with `from_float`.
  auto in_float = [&](auto bits, auto to_float, auto from_float) {
    using Bits = decltype(bits);
    run(
        float{}, [to_float](const void* p, std::size_t i) { return to_float(static_cast<const Bits*>(p)[i]); },
        [from_float](void* p, std::size_t i, float v) { static_cast<Bits*>(p)[i] = from_float(v); });
  };
  switch (t) {
    case ncclInt8: plain(std::int8_t{}); break;
    case ncclUint8: plain(std::uint8_t{}); break;
    case ncclInt32: plain(std::int32_t{}); break;
    case ncclUint32: plain(std::uint32_t{}); break;
    case ncclInt64: plain(std::int64_t{}); break;
    case ncclUint64: plain(std::uint64_t{}); break;
    case ncclFloat32: plain(float{}); break;
    case ncclFloat64: plain(double{}); break;
    case ncclFloat16: in_float(std::uint16_t{}, half_to_float, float_to_half); break;
    case ncclBfloat16: in_float(std::uint16_t{}, bf16_to_float, float_to_bf16); break;
#if DEVICEKIT_SIM_NCCL_FP8
    // Computed in float over all ranks and rounded once (real NCCL accumulates in half on the
    // way round the ring; sums exact in half, as the tests use, agree bit for bit).
    case ncclFloat8e4m3:
      in_float(
          std::uint8_t{}, [](std::uint8_t v) { return fp8_to_float(v, __NV_E4M3); },
          [](float v) { return float_to_fp8(v, __NV_E4M3); });
      break;
    case ncclFloat8e5m2:
      in_float(
          std::uint8_t{}, [](std::uint8_t v) { return fp8_to_float(v, __NV_E5M2); },
          [](float v) { return float_to_fp8(v, __NV_E5M2); });
      break;
#endif
    default: break;
  }
}

}  // namespace devicekit::cuda_sim::detail
