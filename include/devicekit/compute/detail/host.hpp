#pragma once
/// \file
/// The host path of the tree algorithms: a leaf on a cpu device (or a scalar leaf of any tree) is
/// computed by a plain loop on the calling thread.
///
/// Plain loops rather than Thrust's serial host system (thrust::cpp): the same code with or
/// without CCCL, no Thrust headers in every translation unit that calls a tree algorithm, and
/// control over the two things that decide the speed of a leaf of a few KiB: the loop's
/// unrolling and the reduction's dependency chain.
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/compute/detail/plan.hpp>
#include <devicekit/core/config.hpp>

#include <cstddef>

namespace devicekit::detail {

/// Calls `body(i)` for i in [0, n) on the host.
///
/// Unrolled by four: GCC and Clang vectorize the loop but keep one vector per iteration, and such
/// a short loop runs from 100% to 140% of its best time depending on where the linker places it
/// (the loop stream detector and uop cache work on 32- and 64-byte windows: Intel's optimization
/// reference manual, "Loop Stream Detector"); four vectors per iteration make that placement
/// matter much less.
template <class Body>
void host_loop(std::size_t n, Body&& body) {
#if defined(__CUDACC__)  // nvcc's front end does not know the pragma and hands it to the host compiler
#  pragma nv_diagnostic push
#  pragma nv_diag_suppress 1675
#endif
#if defined(__GNUC__)  // GCC, and Clang, which takes GCC's spelling too
#  pragma GCC unroll 4
#endif
  for (std::size_t i = 0; i < n; ++i) body(i);
#if defined(__CUDACC__)
#  pragma nv_diagnostic pop
#endif
}

/// Reduces n elements of `p` on the host, in double.
///
/// Four partial results over interleaved elements, combined at the end: one chain of dependent
/// double additions runs at the adder's latency (about four cycles each), four chains keep it
/// busy; NumPy's pairwise summation unrolls into eight partial sums for the same reason
/// (numpy/_core/src/umath/loops_utils.h.src). The order is fixed, so the result is the same at
/// every call; it differs from a left-to-right sum only by rounding, and usually has less of it.
template <class Op, class E>
double host_reduce(const E* p, std::size_t n) {
  double a0 = reduction<Op>::init();
  double a1 = a0;
  double a2 = a0;
  double a3 = a0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 = reduction<Op>::combine(a0, reduce_job<Op>::element(p, i));
    a1 = reduction<Op>::combine(a1, reduce_job<Op>::element(p, i + 1));
    a2 = reduction<Op>::combine(a2, reduce_job<Op>::element(p, i + 2));
    a3 = reduction<Op>::combine(a3, reduce_job<Op>::element(p, i + 3));
  }
  for (; i < n; ++i) a0 = reduction<Op>::combine(a0, reduce_job<Op>::element(p, i));
  return reduction<Op>::combine(reduction<Op>::combine(a0, a1), reduction<Op>::combine(a2, a3));
}

}  // namespace devicekit::detail
