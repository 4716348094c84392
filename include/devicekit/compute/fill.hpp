#pragma once
/// \file
/// tree_fill([s,] tree, value): every element of a placed tree set to one value.
///
/// A transform whose element function is the constant: one launch for the whole tree, for any
/// value converted to each leaf's element type (cudaMemset sets bytes, so it serves zero only, and
/// takes a call per leaf).
#include <devicekit/compute/detail/dispatch_transform.hpp>
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/core/float_types.hpp>
#include <devicekit/core/stream.hpp>

namespace devicekit {
namespace detail {

/// The element function of tree_fill: the value, whatever the inputs (there are none).
template <class V>
struct constant_fn {
  V value;
  DEVICEKIT_HOST_DEVICE V operator()() const { return value; }
};

}  // namespace detail

/// Sets every element of `tree` to `value` (converted to each leaf's element type).
template <class T, class V>
requires leaf_element<V>
void tree_fill(T&& tree, V value) {
  detail::transform_entry("tree_fill", nullptr, tree, detail::constant_fn<V>{value});
}
template <class T, class V>
requires leaf_element<V>
void tree_fill(stream_ref s, T&& tree, V value) {
  detail::transform_entry("tree_fill", &s, tree, detail::constant_fn<V>{value});
}

}  // namespace devicekit
