#pragma once
/// \file
/// How tree_transform runs, and tree_fill, tree_cast and tree_axpy with it: each leaf checked
/// against the output, cpu leaves computed on the host, cuda leaves gathered into one chunk table
/// and launched on the call's stream (leaves of tree_whole_leaf_elements or more with a launch of
/// their own, where the kernels have one).
///
/// Those three are transforms with a fixed element function (a constant, the identity, a * x + y):
/// one path gives them the same checks, the same error messages and the same one launch per
/// combination of element types.
#include <devicekit/compute/detail/dispatch.hpp>
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/compute/detail/host.hpp>
#include <devicekit/compute/detail/plan.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/float_types.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/tree/errors.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/path.hpp>
#include <devicekit/tree/tree.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace devicekit::detail {

/// An argument of tree_transform that is passed whole to every element.
template <class A>
inline constexpr bool is_broadcast_v = leaf_element<std::remove_cvref_t<A>>;

/// Where each argument of a transform goes: broadcast positions, and for tree positions which of
/// the trees walked together holds them.
template <class... Args>
struct arg_layout {
  static constexpr std::size_t n = sizeof...(Args);
  static constexpr std::array<bool, n> broadcast{is_broadcast_v<Args>...};
  static constexpr std::array<std::size_t, n> tree_index = [] {
    std::array<std::size_t, n> t{};
    std::size_t j = 0;
    for (std::size_t i = 0; i < n; ++i) t[i] = broadcast[i] ? 0 : j++;
    return t;
  }();
};

/// The leaf (or broadcast value) at position P.
template <class Layout, std::size_t P, class ArgsTuple, class InTuple>
const auto& leaf_at(const ArgsTuple& args, const InTuple& in) {
  if constexpr (Layout::broadcast[P]) {
    return std::get<P>(args);
  } else {
    return std::get<Layout::tree_index[P]>(in);
  }
}
template <class Layout, std::size_t P, class ArgsTuple, class InTuple>
using position_element_t =
    element_of_t<decltype(leaf_at<Layout, P>(std::declval<const ArgsTuple&>(), std::declval<const InTuple&>()))>;

template <class Layout, std::size_t P, class ArgsTuple, class InTuple>
const position_element_t<Layout, P, ArgsTuple, InTuple>* position_data(const ArgsTuple& args, const InTuple& in) {
  if constexpr (Layout::broadcast[P]) {
    (void)args;
    (void)in;
    return nullptr;
  } else {
    const auto& l = std::get<Layout::tree_index[P]>(in);
    return leaf_traits<std::remove_cvref_t<decltype(l)>>::data(l);
  }
}

/// check_position's error, out of line: the check itself runs for every leaf and position and
/// stays small enough to inline.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_position_mismatch(const char* operation, const tree_path& path,
                                                                           std::size_t out_n, std::size_t in_n,
                                                                           std::size_t position, bool scalar_vs_array) {
  throw tree_structure_error(std::string(operation) + ": leaf '" + path.display() + "' has " + std::to_string(out_n) +
                             " elements in the output but " + std::to_string(in_n) + " in input " +
                             std::to_string(position) + (scalar_vs_array ? " (a scalar and an array leaf)" : ""));
}

template <class Layout, std::size_t P, class InTuple>
void check_position(const char* operation, const tree_path& path, const InTuple& in, std::size_t n, bool out_scalar) {
  if constexpr (!Layout::broadcast[P]) {
    const auto& l = std::get<Layout::tree_index[P]>(in);
    using IL = std::remove_cvref_t<decltype(l)>;
    constexpr bool in_scalar = leaf_traits<IL>::kind == leaf_kind::scalar;
    if (in_scalar != out_scalar || leaf_traits<IL>::size(l) != n) [[unlikely]] {
      throw_position_mismatch(operation, path, n, leaf_traits<IL>::size(l), P + 1, in_scalar != out_scalar);
    }
  } else {
    (void)operation;
    (void)path;
    (void)in;
    (void)n;
    (void)out_scalar;
  }
}

/// One leaf of a transform: runs it on the host, or adds it to the plan.
template <class Layout, class Job, std::size_t K, class OutLeaf, class ArgsTuple, class InTuple, std::size_t... I>
void transform_leaf(const char* operation, const tree_path& path, const Job& job, bool on_device,
                    tree_launch_plan<K>& plan, std::size_t& host_passes, const OutLeaf& out_leaf, const ArgsTuple& args,
                    const InTuple& in, std::index_sequence<I...> seq) {
  using Eout = element_of_t<OutLeaf>;
  constexpr bool out_scalar = leaf_traits<OutLeaf>::kind == leaf_kind::scalar;
  using types = type_list<Eout, position_element_t<Layout, I, ArgsTuple, InTuple>...>;
  static_assert(std::is_invocable_v<const decltype(job.f)&,
                                    decltype(widen_element(
                                        std::declval<position_element_t<Layout, I, ArgsTuple, InTuple>>()))...>,
                "tree_transform(out, f, in...): f must be callable with the element values of the inputs (float for "
                "float16/bfloat16/fp8 elements, the element type otherwise; broadcast scalars as given)");
  const std::size_t n = leaf_traits<OutLeaf>::size(out_leaf);
  (check_position<Layout, I>(operation, path, in, n, out_scalar), ...);
  Eout* const o = mutable_data(out_leaf);
  if (!on_device || out_scalar) {
    if (n == 0) return;
    const slots<std::index_sequence<I...>, const position_element_t<Layout, I, ArgsTuple, InTuple>*...> ptrs{
        {position_data<Layout, I>(args, in)}...};
    host_loop(n, [&job, o, ptrs, seq](std::size_t i) { job.run(seq, o, ptrs, i); });
    ++host_passes;
  } else {
    check_kernel_leaf(operation, path, out_leaf);
    std::apply([&](const auto&... l) { (check_kernel_leaf(operation, path, l), ...); }, in);
    const std::array<void*, K> ptrs{static_cast<void*>(o),
                                    const_cast<void*>(static_cast<const void*>(position_data<Layout, I>(args, in)))...};
    const std::array<std::size_t, K> sizes{sizeof(Eout), sizeof(position_element_t<Layout, I, ArgsTuple, InTuple>)...};
    plan.template add_leaf<types>(ptrs, sizes, n, &launch_group<Job, types, K>, &launch_group_args<Job, types, K>,
                                  whole_leaf_launcher<Job, types, K>());
  }
}

/// Runs `job` over the leaves of `out` and the tree arguments among `args` (broadcast scalars are
/// in the job already).
template <class Job, class Out, class... Args>
void run_transform(const char* operation, const stream_ref* s, const Job& job, Out& out, const Args&... args) {
  using layout = arg_layout<Args...>;
  constexpr std::size_t K = sizeof...(Args) + 1;
  auto trees = std::tuple_cat([](const auto& a) {
    if constexpr (is_broadcast_v<decltype(a)>) {
      return std::tuple<>();
    } else {
      return std::tuple<const std::remove_cvref_t<decltype(a)>&>(a);
    }
  }(args)...);
  const device dev = std::apply([&](const auto&... ts) { return algorithm_device(operation, s, out, ts...); }, trees);
  const bool on_device = dev.is_cuda();
  if (on_device && !tree_kernels_available(kernel_priority<1>{}, &job)) throw_no_kernels(operation, dev);

  tree_launch_plan<K> plan(tree_chunk_elements, tree_whole_leaf_threshold().load(std::memory_order_relaxed));
  std::size_t host_passes = 0;
  const auto arg_refs = std::forward_as_tuple(args...);
  auto visit = [&](const tree_path& path, const auto& out_leaf, const auto&... in_leaves) {
    transform_leaf<layout>(operation, path, job, on_device, plan, host_passes, out_leaf, arg_refs,
                           std::forward_as_tuple(in_leaves...), std::index_sequence_for<Args...>{});
  };
  std::apply([&](const auto&... ts) { for_each_leaf_with_path(visit, out, ts...); }, trees);
  host_leaf_passes() += host_passes;
  const std::size_t chunks = plan.chunk_count();
  if (chunks == 0 && plan.whole_leaves().empty()) return;
#if DEVICEKIT_HAS_CUDA
  const call_stream cs = stream_for(dev, s);
  // Leaves launched on their own go after whatever can fail without a launch (staging the table,
  // taking its scratch), so that such a failure leaves every leaf as it was.
  if (chunks == 0 || (tree_args_enabled().load(std::memory_order_relaxed) &&
                      plan.fits_in_args(tree_kernel_args_capacity(kernel_priority<1>{}, &job,
                                                                  static_cast<tree_chunk<K>*>(nullptr))))) {
    // Chunks in the launch's parameters: no table to stage and no scratch to take and give back,
    // so a call is one launch per group (one kernel node per group in a CUDA graph).
    scoped_device on(dev.ordinal());
    int r = run_whole_leaves(plan, &job, cs.s.native_handle());
    if (r == 0 && chunks != 0) r = run_groups_in_args(plan, &job, cs.s.native_handle());
    DEVICEKIT_CUDA_CHECK(static_cast<cudaError_t>(r));
    if (cs.wait) host_wait(cs.s);
    return;
  }
  const auto table = plan.table();
  tree_launch_plumbing(dev, cs.s.native_handle(), table.data(), table.size() * sizeof(tree_chunk<K>), 0,
                       [&](std::byte* d_table, std::byte*) {
                         int r = run_whole_leaves(plan, &job, cs.s.native_handle());
                         if (r == 0) {
                           r = run_groups(plan, reinterpret_cast<const tree_chunk<K>*>(d_table), &job, nullptr, 0.0,
                                          cs.s.native_handle());
                         }
                         return static_cast<cudaError_t>(r);
                       });
  if (cs.wait) host_wait(cs.s);
#endif
}

/// The overloads without a stream take part only when the first argument is no stream.
template <class Out, class... Args>
inline constexpr bool transform_args_ok = !std::is_convertible_v<Out, stream_ref>;

template <class F, class... Args>
using transform_job_for =
    transform_job<std::decay_t<F>,
                  std::conditional_t<is_broadcast_v<Args>, std::remove_cvref_t<Args>, tree_position>...>;

template <class F, class Out, class... Args>
void transform_entry(const char* operation, const stream_ref* s, Out& out, F&& f, const Args&... args) {
  static_assert(require_tree<Out>(), "tree_transform(out, f, in...): out must be a tree (see devicekit/tree/tree.hpp)");
#if defined(__CUDACC__)
  static_assert(!__nv_is_extended_device_lambda_closure_type(std::remove_cvref_t<F>),
                "tree_transform: f is a __device__ lambda; make it __host__ __device__ (the cpu path calls it too)");
#endif
  using job_t = transform_job_for<F, Args...>;
  [[maybe_unused]] auto value_or_nothing = [](const auto& a) {
    if constexpr (is_broadcast_v<decltype(a)>) {
      return std::remove_cvref_t<decltype(a)>(a);
    } else {
      return tree_position{};
    }
  };
  const job_t job{std::forward<F>(f), {{value_or_nothing(args)}...}};
  run_transform(operation, s, job, out, args...);
}

}  // namespace devicekit::detail
