#pragma once
/// \file
/// tree_transform([s,] out, f, in...): out[i] = f(in[i]...) over every leaf of placed trees, in
/// one launch per combination of element types (PyTorch's `_foreach` ops, apex's multi_tensor_apply).
///
/// The general form the other element-wise operations (fill, cast, axpy) are built on; an `in`
/// that is a scalar (float, int, ...) is passed to every element. What `f` may be, where the work
/// runs and what it throws: <devicekit/compute.hpp>.
#include <devicekit/compute/detail/dispatch_transform.hpp>
#include <devicekit/core/stream.hpp>

#include <utility>

namespace devicekit {

/// out[i] = f(in[i]...) over every leaf of `out` and of the trees among `in` (same structure,
/// same leaf lengths); an `in` that is an arithmetic or reduced-precision value is passed to
/// every element. `out` may also be one of the inputs. Where it runs: <devicekit/compute.hpp>.
template <class Out, class F, class... In>
requires detail::transform_args_ok<Out, In...>
void tree_transform(Out&& out, F&& f, const In&... in) {
  detail::transform_entry("tree_transform", nullptr, out, std::forward<F>(f), in...);
}
/// tree_transform queued on `s` (a stream of the trees' device).
template <class Out, class F, class... In>
void tree_transform(stream_ref s, Out&& out, F&& f, const In&... in) {
  detail::transform_entry("tree_transform", &s, out, std::forward<F>(f), in...);
}

}  // namespace devicekit
