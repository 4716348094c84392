#pragma once
/// \file
/// tree_cast<E>(tree) and tree_cast([s,] out, in): a placed tree converted to another element type
/// (float to bf16 for mixed precision and back, fp8 for storage).
///
/// A transform whose element function is the identity: the conversion is the narrowing every
/// transform applies to its result (round to nearest even; fp8 saturates), so casts and
/// transforms agree to the bit.
#include <devicekit/compute/detail/allocate_like.hpp>
#include <devicekit/compute/detail/dispatch_transform.hpp>
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/compute/transform.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/float_types.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/place.hpp>

namespace devicekit {
namespace detail {

/// The element function of tree_cast: the value itself, narrowed to the output's type by the
/// transform.
struct identity_fn {
  template <class V>
  DEVICEKIT_HOST_DEVICE V operator()(V v) const {
    return v;
  }
};

}  // namespace detail

/// The same structure with element type `E`, on the tree's device: each element converted
/// through float (double for double leaves and targets). Finished on return.
template <class E, class T>
requires leaf_element<E>
[[nodiscard]] auto tree_cast(const T& tree) {
  auto out = detail::allocate_like<E>(tree, device_of(tree).value_or(device::cpu()));
  tree_transform(out, detail::identity_fn{}, tree);
  return out;
}
/// Converts `in` into the existing tree `out` (same structure and lengths).
template <class Out, class In>
requires detail::transform_args_ok<Out, In>
void tree_cast(Out&& out, const In& in) {
  detail::transform_entry("tree_cast", nullptr, out, detail::identity_fn{}, in);
}
template <class Out, class In>
void tree_cast(stream_ref s, Out&& out, const In& in) {
  detail::transform_entry("tree_cast", &s, out, detail::identity_fn{}, in);
}

}  // namespace devicekit
