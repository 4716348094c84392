#pragma once
/// \file
/// The element operations of the tree algorithms: widening and narrowing of the reduced-precision
/// floats, the reductions, and the jobs that apply them to element i of a chunk.
///
/// The host loops (compute/detail/host.hpp) and the kernels (compute/kernels.cuh) both run these,
/// so a cpu tree and a cuda tree compute the same values; the header needs nothing beyond
/// core/float_types.hpp, so g++ and nvcc compile the same code.
#include <devicekit/core/float_types.hpp>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#if defined(__CUDACC__)
#  define DEVICEKIT_HOST_DEVICE __host__ __device__
#else
#  define DEVICEKIT_HOST_DEVICE
#endif

namespace devicekit {

/// Reductions of tree_reduce: tag values `reduce::sum`, `reduce::max`, `reduce::sumsq`.
namespace reduce {
/// The sum of all elements.
struct sum_t {};
/// The largest element (-infinity for a tree without elements). NaN is not propagated reliably:
/// ask tree_all_finite for that.
struct max_t {};
/// The sum of squares (tree_global_norm is its square root: the global gradient norm that
/// torch.nn.utils.clip_grad_norm_ computes).
struct sumsq_t {};
inline constexpr sum_t sum{};
inline constexpr max_t max{};
inline constexpr sumsq_t sumsq{};
}  // namespace reduce

namespace detail {

/// The value a kernel or host loop computes with: float for the reduced-precision floats (CUDA's
/// conversions are __host__ __device__), the element itself otherwise.
template <class E>
DEVICEKIT_HOST_DEVICE inline auto widen_element(E x) {
  if constexpr (is_reduced_float_v<E>) {
    return static_cast<float>(x);
  } else {
    return x;
  }
}
template <class E, class V>
DEVICEKIT_HOST_DEVICE inline E narrow_element(V v) {
  if constexpr (is_reduced_float_v<E>) {
    return E(static_cast<float>(v));
  } else {
    return static_cast<E>(v);
  }
}

/// The reductions as element maps and a combine. Accumulation is in double whatever the leaves
/// (exact for integers below 2^53, and fp32 gradient norms over 10^9 elements keep their digits).
template <class Op>
struct reduction;
template <>
struct reduction<reduce::sum_t> {
  DEVICEKIT_HOST_DEVICE static double map(double x) { return x; }
  DEVICEKIT_HOST_DEVICE static double combine(double a, double b) { return a + b; }
  static double init() { return 0.0; }
};
template <>
struct reduction<reduce::sumsq_t> {
  DEVICEKIT_HOST_DEVICE static double map(double x) { return x * x; }
  DEVICEKIT_HOST_DEVICE static double combine(double a, double b) { return a + b; }
  static double init() { return 0.0; }
};
template <>
struct reduction<reduce::max_t> {
  DEVICEKIT_HOST_DEVICE static double map(double x) { return x; }
  DEVICEKIT_HOST_DEVICE static double combine(double a, double b) { return b > a ? b : a; }
  static double init() { return -__builtin_huge_val(); }
};
/// Counts the elements that are NaN or infinite (tree_all_finite): x - x is 0 for every finite x
/// and NaN otherwise (IEEE 754), which needs no <cmath> on the device.
struct nonfinite_t {};
template <>
struct reduction<nonfinite_t> {
  DEVICEKIT_HOST_DEVICE static double map(double x) { return (x - x) == 0.0 ? 0.0 : 1.0; }
  DEVICEKIT_HOST_DEVICE static double combine(double a, double b) { return a + b; }
  static double init() { return 0.0; }
};

/// Combine as a functor (CUB's BlockReduce and DeviceReduce take one).
template <class Op>
struct combine_fn {
  DEVICEKIT_HOST_DEVICE double operator()(double a, double b) const { return reduction<Op>::combine(a, b); }
};

/// A position of a job that reads a tree (its slot holds nothing).
struct tree_position {};

template <std::size_t I, class T>
struct slot {
  T value;
};
template <class Seq, class... T>
struct slots;
template <std::size_t... I, class... T>
struct slots<std::index_sequence<I...>, T...> : slot<I, T>... {};
template <std::size_t I, class T>
DEVICEKIT_HOST_DEVICE inline const T& get_slot(const slot<I, T>& s) {
  return s.value;
}

/// out[i] = f(in_0[i] or scalar_0, ...): the element operation of tree_transform, the same on the
/// host and in the kernel. `S...` are the positions' slots: tree_position or a broadcast value.
template <class F, class... S>
struct transform_job {
  static constexpr std::size_t arity = sizeof...(S);
  /// Whether position I reads a tree (rather than a broadcast value).
  template <std::size_t I>
  static constexpr bool reads_tree = std::is_same_v<std::tuple_element_t<I, std::tuple<S...>>, tree_position>;
  F f;
  slots<std::index_sequence_for<S...>, S...> scalars;

  template <std::size_t I, class E>
  DEVICEKIT_HOST_DEVICE auto load(const E* p, std::size_t i) const {
    if constexpr (reads_tree<I>) {
      return widen_element(p[i]);
    } else {
      return get_slot<I>(scalars);
    }
  }
  /// Element i, with the inputs' pointers in `in` (null at broadcast positions).
  template <class Eout, class... Ein, std::size_t... I>
  DEVICEKIT_HOST_DEVICE void run(std::index_sequence<I...>, Eout* out,
                                 const slots<std::index_sequence<I...>, const Ein*...>& in, std::size_t i) const {
    out[i] = narrow_element<Eout>(f(load<I>(get_slot<I>(in), i)...));
  }
};

/// map(element) for one reduction.
template <class Op>
struct reduce_job {
  template <class E>
  DEVICEKIT_HOST_DEVICE static double element(const E* p, std::size_t i) {
    return reduction<Op>::map(static_cast<double>(widen_element(p[i])));
  }
};

}  // namespace detail
}  // namespace devicekit
