#pragma once
/// \file
/// tree_axpy([s,] a, x, y): y += a * x over every leaf of two placed trees of one structure.
///
/// The update step of SGD and of gradient accumulation, as one launch per combination of element
/// types (torch._foreach_add_ with alpha); a transform with y both input and output.
#include <devicekit/compute/detail/dispatch_transform.hpp>
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/core/float_types.hpp>
#include <devicekit/core/stream.hpp>

namespace devicekit {
namespace detail {

/// The element function of tree_axpy: a * x + y.
struct axpy_fn {
  template <class A, class X, class Y>
  DEVICEKIT_HOST_DEVICE auto operator()(A a, X x, Y y) const {
    return a * x + y;
  }
};

}  // namespace detail

/// y += a * x over every leaf (x and y of one structure; `a` a scalar).
template <class A, class X, class Y>
requires leaf_element<A>
void tree_axpy(A a, const X& x, Y&& y) { detail::transform_entry("tree_axpy", nullptr, y, detail::axpy_fn{}, a, x, y); }
template <class A, class X, class Y>
requires leaf_element<A>
void tree_axpy(stream_ref s, A a, const X& x, Y&& y) {
  detail::transform_entry("tree_axpy", &s, y, detail::axpy_fn{}, a, x, y);
}

}  // namespace devicekit
