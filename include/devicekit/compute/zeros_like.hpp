#pragma once
/// \file
/// zeros_like(tree, dev[, s]): a new placed tree of the same structure, shapes and element types
/// on `dev`, zeroed, in one block of the device's pool.
///
/// What optimizer state (momenta, accumulators) starts from: one allocation and one
/// cudaMemsetAsync for the whole tree, not one per leaf. No element loop is involved, so this
/// header does without the kernels and without Thrust.
#include <devicekit/compute/detail/allocate_like.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/stream.hpp>

namespace devicekit {

/// A new tree of the same structure, shapes and element types on `dev`, zeroed: array leaves in
/// one block of `dev`'s pool (default_placement_resource), scalars 0. Finished on return.
template <class T>
[[nodiscard]] auto zeros_like(const T& tree, device dev) {
  return detail::allocate_like<void>(tree, dev);
}
/// zeros_like with the zeroing queued on `s`, a stream of `dev` (device_mismatch otherwise);
/// returns without waiting for it. Dropping the tree before `s` has run the zeroing is safe.
template <class T>
[[nodiscard]] auto zeros_like(const T& tree, device dev, stream_ref s) {
  return detail::allocate_like<void>(tree, dev, &s);
}

}  // namespace devicekit
