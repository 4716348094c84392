#pragma once
/// \file
/// One thread's share of a chunk of tree_transform: what each thread of a block of
/// compute/kernels.cuh computes. Written for host and device alike, so that a host test can walk
/// every thread of a block through it and check that each element is computed exactly once.
///
/// Why each thread loads several elements before it stores any: a loop that loads x[i] and y[i]
/// and stores out[i] keeps one load per input in flight per thread, because the store may alias
/// the next element's load and the compiler cannot move that load above it. A memory system
/// delivering B bytes per second with latency L needs about B * L bytes in flight (Little's law):
/// an H200's 4.8 TB/s at several hundred nanoseconds is over 20 KiB per SM, while 2048 resident
/// threads with one 4-byte load each are 8 KiB per input. So each thread loads `tree_ilp`
/// elements of every input first, with one vector load where every pointer of the chunk is
/// aligned for it, then computes and stores them: PyTorch's multi-tensor kernels do the same
/// (aten/src/ATen/native/cuda/ForeachFunctors.cuh and MultiTensorApply.cuh, kILP = 4, vector
/// loads when aligned), and CUB's DeviceTransform sizes its loads by bytes in flight for the
/// same reason (cub/device/dispatch/tuning/tuning_transform.cuh).
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/compute/detail/plan.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace devicekit::detail {

/// Elements of each input a thread loads before it computes any.
inline constexpr std::size_t tree_ilp = 4;

/// `tree_ilp` elements as one aligned load or store (16 bytes for float, 32 for double: two
/// 16-byte accesses).
template <class E>
struct alignas(sizeof(E) * tree_ilp) element_vector {
  E v[tree_ilp];
};

/// Whether `p` may be read as element_vector<E>s (null, a broadcast position, may).
template <class E>
DEVICEKIT_HOST_DEVICE inline bool vector_aligned(const E* p) {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(element_vector<E>) == 0;
}

template <class E>
DEVICEKIT_HOST_DEVICE inline element_vector<E> load_vector(const E* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const element_vector<E>*>(p);
#else
  element_vector<E> v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

template <class E>
DEVICEKIT_HOST_DEVICE inline void store_vector(E* p, const element_vector<E>& v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<element_vector<E>*>(p) = v;
#else
  std::memcpy(p, &v, sizeof v);
#endif
}

#if defined(__CUDA_ARCH__)
/// Tells the compiler that `p`, which points into a leaf (`Leaf`: not a broadcast position's null),
/// is global memory.
template <bool Leaf, class E>
__device__ inline void assume_global(const E* p) {
  if constexpr (Leaf && std::is_arithmetic_v<E>) __builtin_assume(__isGlobal(p));
}
#endif

/// The values of one position of a transform for a thread's `tree_ilp` elements.
template <std::size_t I, class V>
struct position_values {
  V v[tree_ilp];
};
template <class Seq, class... V>
struct thread_values;
template <std::size_t... I, class... V>
struct thread_values<std::index_sequence<I...>, V...> : position_values<I, V>... {};
template <std::size_t I, class V>
DEVICEKIT_HOST_DEVICE inline V* values_of(position_values<I, V>& p) {
  return p.v;
}

/// The value type of position I of `Job` (the widened element, or the broadcast value's type).
template <class Job, std::size_t I, class E>
using position_value_t = decltype(std::declval<const Job&>().template load<I>(std::declval<const E*>(), std::size_t{}));

/// out[i] = f(inputs at i) for the elements [thread * tree_ilp, ...) of chunk `c` that fall to
/// `thread` of `threads`: consecutive threads take consecutive vectors (or, unaligned, consecutive
/// elements), so a warp's accesses coalesce. Inputs may be the output itself (tree_axpy's y):
/// each element is read and written by one thread, the loads first.
template <class Job, class Eout, class... Ein, std::size_t K, std::size_t... I>
DEVICEKIT_HOST_DEVICE void transform_chunk_share(const Job& job, const tree_chunk<K>& c, std::index_sequence<I...> seq,
                                                 std::size_t thread, std::size_t threads) {
  static_assert(K == sizeof...(Ein) + 1, "a chunk holds the output and one pointer per position");
  auto* out = static_cast<Eout*>(c.p[0]);
  const slots<std::index_sequence<I...>, const Ein*...> in{{static_cast<const Ein*>(c.p[I + 1])}...};
  using values_t = thread_values<std::index_sequence<I...>, position_value_t<Job, I, Ein>...>;
  const std::size_t n = c.n;
#if defined(__CUDA_ARCH__)
  // Leaves of a cuda tree are device memory: telling the compiler lets it use global loads and
  // stores instead of generic ones (it infers this by itself only through simpler code). Not for
  // the reduced-precision floats: given a pointer to a class type such as __nv_fp8_e4m3, nvcc
  // 13.0 emits invalid IR for __isGlobal, whatever the pointer is cast to first.
  assume_global<true>(out);
  (assume_global<Job::template reads_tree<I>>(get_slot<I>(in)), ...);
#endif
  // The same answer for every thread of the block: no divergence.
  const bool aligned = vector_aligned(out) && (vector_aligned(get_slot<I>(in)) && ...);
  if (aligned) {
    const std::size_t vectors = n / tree_ilp;
    for (std::size_t j = thread; j < vectors; j += threads) {
      const std::size_t i = j * tree_ilp;
      values_t r{};
      auto load = [&](auto pos, const auto* p, auto* to) {
        constexpr std::size_t P = decltype(pos)::value;
        if constexpr (Job::template reads_tree<P>) {
          const auto x = load_vector(p + i);
          for (std::size_t u = 0; u < tree_ilp; ++u) to[u] = widen_element(x.v[u]);
        } else {
          for (std::size_t u = 0; u < tree_ilp; ++u) to[u] = job.template load<P>(p, i);
        }
      };
      (load(std::integral_constant<std::size_t, I>{}, get_slot<I>(in), values_of<I>(r)), ...);
      element_vector<Eout> o;
      for (std::size_t u = 0; u < tree_ilp; ++u) o.v[u] = narrow_element<Eout>(job.f(values_of<I>(r)[u]...));
      store_vector(out + i, o);
    }
    // Fewer than tree_ilp elements are left.
    for (std::size_t i = vectors * tree_ilp + thread; i < n; i += threads) job.run(seq, out, in, i);
    return;
  }
  for (std::size_t base = thread; base < n; base += threads * tree_ilp) {
    values_t r{};
    for (std::size_t u = 0; u < tree_ilp; ++u) {
      const std::size_t i = base + u * threads;
      if (i < n) ((values_of<I>(r)[u] = job.template load<I>(get_slot<I>(in), i)), ...);
    }
    for (std::size_t u = 0; u < tree_ilp; ++u) {
      const std::size_t i = base + u * threads;
      if (i < n) out[i] = narrow_element<Eout>(job.f(values_of<I>(r)[u]...));
    }
  }
}

}  // namespace devicekit::detail
