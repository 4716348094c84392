#pragma once
/// \file
/// Computation on placed trees: one-launch operations like PyTorch's `_foreach` ops and apex's
/// multi_tensor_apply, every leaf of a tree (or of several trees of one structure) in one kernel.
///
/// One header per operation, each standing alone (compute/transform.hpp, fill.hpp, zeros_like.hpp,
/// cast.hpp, axpy.hpp, reduce.hpp); this one is for translation units that use them all. The layer
/// sits above place/: its results are placed trees, its scratch comes from the devices' pools.
///
///   tree_transform([s,] out, f, in...)   out[i] = f(in[i]...) over every leaf; an `in` that is a
///                                        scalar (float, int, ...) is passed to every element
///   tree_fill([s,] tree, value)          every element = value
///   zeros_like(tree, dev[, s])           a new placed tree of the same structure and shapes on
///                                        `dev`, zeroed (memory from the device's pool)
///   tree_cast<T>(tree)                   the same structure with element type T (a new tree on
///                                        the tree's device); tree_cast([s,] out, in) in place
///   tree_axpy([s,] a, x, y)              y += a * x
///   tree_reduce([s,] tree, op)           reduce::sum, reduce::max, reduce::sumsq, as a double
///   tree_global_norm([s,] tree)          sqrt(sumsq): the gradient norm for clipping
///   tree_all_finite([s,] tree)           false when any element is NaN or infinite
///   tree_reduce_async(s, tree, op, out)  the reduction into device memory `out`, not waited for
///
/// Elements: arithmetic types and the reduced-precision floats (core/float_types.hpp). `f` sees
/// float for float16/bfloat16/fp8 elements and the element itself otherwise; its result is
/// narrowed to the output's element type (round to nearest even; fp8 saturates). Reductions
/// accumulate in double and return a double.
///
/// Where it runs: leaves on a cpu device (host containers, or placed on cpu:0) run on the host,
/// in plain loops on the calling thread (compute/detail/host.hpp). Leaves on a cuda device run as one kernel per combination of element types (one for
/// a tree whose leaves share a type) over a table of chunks staged through the device's pool
/// (compute/detail/plan.hpp), queued on the stream `s` (a stream of that device). The kernels
/// are in <devicekit/compute/kernels.cuh>: a call on a cuda tree must be compiled by nvcc in a
/// file that includes it; elsewhere it throws config_error saying so. Without a stream, a
/// call uses the device's placement stream and returns when the work is done; with one, it
/// queues the work and returns (reductions that return a host value wait for `s`).
///
/// `f` must be callable on the device: a functor with a `__host__ __device__` operator(), or a
/// `[] __host__ __device__ (...)` lambda (nvcc --extended-lambda; a `__device__`-only lambda
/// cannot run the cpu path and is refused). Scalar leaves inside a tree (a `float` member) are
/// host values, computed on the host.
///
/// Errors: trees of different structure (or leaves of different lengths) tree_structure_error;
/// trees, leaves or the stream on different devices device_mismatch; an `f` that cannot be called
/// with the element values a static_assert.
#include <devicekit/compute/axpy.hpp>
#include <devicekit/compute/cast.hpp>
#include <devicekit/compute/fill.hpp>
#include <devicekit/compute/reduce.hpp>
#include <devicekit/compute/transform.hpp>
#include <devicekit/compute/zeros_like.hpp>
