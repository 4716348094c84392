#pragma once
/// \file
/// The host path of the tree algorithms: a leaf on a cpu device (or a scalar leaf of any tree) is
/// computed through Thrust's serial host system (thrust::cpp) where CCCL is available, a plain
/// loop otherwise.
///
/// The one header of compute/ that includes Thrust, which costs every translation unit that
/// includes it; zeros_like needs no element loop and stays out of it.
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/compute/detail/plan.hpp>
#include <devicekit/core/config.hpp>

#include <atomic>
#include <cstddef>

#if DEVICEKIT_HAS_CUDA && __has_include(<thrust/for_each.h>)
#  include <thrust/for_each.h>
#  include <thrust/iterator/counting_iterator.h>
#  include <thrust/system/cpp/execution_policy.h>
#  include <thrust/transform_reduce.h>
#  define DEVICEKIT_TREE_HOST_THRUST 1
#else
#  define DEVICEKIT_TREE_HOST_THRUST 0
#endif

namespace devicekit::detail {

/// Calls `body(i)` for i in [0, n) on the host.
template <class Body>
void host_loop(std::size_t n, Body&& body) {
  tree_counters().host_leaf_passes.fetch_add(1, std::memory_order_relaxed);
#if DEVICEKIT_TREE_HOST_THRUST
  thrust::for_each_n(thrust::cpp::par, thrust::counting_iterator<std::size_t>(0), n, body);
#else
  for (std::size_t i = 0; i < n; ++i) body(i);
#endif
}

template <class Op, class E>
double host_reduce(const E* p, std::size_t n) {
  tree_counters().host_leaf_passes.fetch_add(1, std::memory_order_relaxed);
#if DEVICEKIT_TREE_HOST_THRUST
  return thrust::transform_reduce(
      thrust::cpp::par, thrust::counting_iterator<std::size_t>(0), thrust::counting_iterator<std::size_t>(n),
      [p](std::size_t i) { return reduce_job<Op>::element(p, i); }, reduction<Op>::init(), combine_fn<Op>{});
#else
  double acc = reduction<Op>::init();
  for (std::size_t i = 0; i < n; ++i) acc = reduction<Op>::combine(acc, reduce_job<Op>::element(p, i));
  return acc;
#endif
}

}  // namespace devicekit::detail
