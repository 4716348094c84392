#pragma once
/// \file
/// Reductions of a placed tree to one double: tree_reduce([s,] tree, op) with reduce::sum,
/// reduce::max or reduce::sumsq, tree_global_norm, tree_all_finite, and tree_reduce_async.
///
/// What gradient clipping (the global norm) and dynamic loss scaling (are all gradients finite?)
/// ask of a whole tree: one launch per element type, each chunk reduced by one block and the
/// partials finished on the device, accumulated in double whatever the elements. The tags
/// (reduce::sum, ...) live beside the reductions the kernels run, in compute/detail/element_ops.hpp.
#include <devicekit/compute/detail/dispatch_reduce.hpp>
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>

#include <cmath>

namespace devicekit {

/// The reduction `op` (reduce::sum, reduce::max, reduce::sumsq) of every element, accumulated
/// in double. On a cuda device it waits for `s` (or the placement stream).
template <class T, class Op>
[[nodiscard]] double tree_reduce(const T& tree, Op) {
  return detail::run_reduce<Op>("tree_reduce", nullptr, tree, nullptr);
}
template <class T, class Op>
[[nodiscard]] double tree_reduce(stream_ref s, const T& tree, Op) {
  return detail::run_reduce<Op>("tree_reduce", &s, tree, nullptr);
}

/// The reduction of the tree's device leaves written to `d_out` (one double in the device's
/// memory) in the order of `s`, without waiting: for a norm that stays on the device. Scalar leaves
/// of the tree (host values) are not included. cuda trees only (config_error otherwise).
template <class T, class Op>
void tree_reduce_async(stream_ref s, const T& tree, Op, double* d_out) {
  if (!s.get_device().is_cuda() || d_out == nullptr) {
    throw config_error("tree_reduce_async: needs a stream of a cuda device and a device pointer for the result");
  }
  (void)detail::run_reduce<Op>("tree_reduce_async", &s, tree, d_out);
}

/// sqrt of the sum of squares: the global norm that gradient clipping scales by.
template <class T>
[[nodiscard]] double tree_global_norm(const T& tree) {
  return std::sqrt(tree_reduce(tree, reduce::sumsq));
}
template <class T>
[[nodiscard]] double tree_global_norm(stream_ref s, const T& tree) {
  return std::sqrt(tree_reduce(s, tree, reduce::sumsq));
}

/// False when an element is NaN or infinite (integer leaves are always finite): what dynamic
/// loss scaling checks before it applies a step (torch.cuda.amp.GradScaler skips on overflow).
template <class T>
[[nodiscard]] bool tree_all_finite(const T& tree) {
  return detail::run_reduce<detail::nonfinite_t>("tree_all_finite", nullptr, tree, nullptr) == 0.0;
}
template <class T>
[[nodiscard]] bool tree_all_finite(stream_ref s, const T& tree) {
  return detail::run_reduce<detail::nonfinite_t>("tree_all_finite", &s, tree, nullptr) == 0.0;
}

}  // namespace devicekit
