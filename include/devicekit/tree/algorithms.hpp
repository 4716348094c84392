#pragma once
/// \file
/// One-launch operations over placed trees, like PyTorch's `_foreach` ops and apex's
/// multi_tensor_apply: every leaf of a tree (or of several trees of one structure) in one kernel.
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
/// through Thrust's serial host system (thrust::cpp) where CCCL is available, a plain loop
/// otherwise. Leaves on a cuda device run as one kernel per combination of element types (one for
/// a tree whose leaves share a type) over a table of chunks staged through the device's pool
/// (tree/detail/algorithms_plan.hpp), queued on the stream `s` (a stream of that device). The
/// kernels are in <devicekit/tree/algorithms.cuh>: a call on a cuda tree must be compiled by nvcc
/// in a file that includes it; elsewhere it throws config_error saying so. Without a stream, a
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
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/float_types.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/registry.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/tree/detail/algorithms_plan.hpp>
#include <devicekit/tree/errors.hpp>
#include <devicekit/tree/tree.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if DEVICEKIT_HAS_CUDA && __has_include(<thrust/for_each.h>)
#  include <thrust/for_each.h>
#  include <thrust/iterator/counting_iterator.h>
#  include <thrust/system/cpp/execution_policy.h>
#  include <thrust/transform_reduce.h>
#  define DEVICEKIT_TREE_HOST_THRUST 1
#else
#  define DEVICEKIT_TREE_HOST_THRUST 0
#endif

namespace devicekit {
namespace detail {

/// An argument of tree_transform that is passed whole to every element.
template <class A>
inline constexpr bool is_broadcast_v = leaf_element<std::remove_cvref_t<A>>;

/// A position of a job that reads a tree (its slot holds nothing).
struct tree_position {};

template <std::size_t I, class T>
struct slot {
  T value;
};
template <class Seq, class... T>
struct slots;
template <std::size_t... I, class... T>
struct slots<std::index_sequence<I...>, T...> : slot<I, T>... {};
template <std::size_t I, class T>
DEVICEKIT_HOST_DEVICE inline const T& get_slot(const slot<I, T>& s) {
  return s.value;
}

/// out[i] = f(in_0[i] or scalar_0, ...): the element operation of tree_transform, the same on the
/// host and in the kernel. `S...` are the positions' slots: tree_position or a broadcast value.
template <class F, class... S>
struct transform_job {
  static constexpr std::size_t arity = sizeof...(S);
  F f;
  slots<std::index_sequence_for<S...>, S...> scalars;

  template <std::size_t I, class E>
  DEVICEKIT_HOST_DEVICE auto load(const E* p, std::size_t i) const {
    using slot_t = std::tuple_element_t<I, std::tuple<S...>>;
    if constexpr (std::is_same_v<slot_t, tree_position>) {
      return widen_element(p[i]);
    } else {
      return get_slot<I>(scalars);
    }
  }
  /// Element i, with the inputs' pointers in `in` (null at broadcast positions).
  template <class Eout, class... Ein, std::size_t... I>
  DEVICEKIT_HOST_DEVICE void run(std::index_sequence<I...>, Eout* out,
                                 const slots<std::index_sequence<I...>, const Ein*...>& in, std::size_t i) const {
    out[i] = narrow_element<Eout>(f(load<I>(get_slot<I>(in), i)...));
  }
};

/// map(element) for one reduction.
template <class Op>
struct reduce_job {
  template <class E>
  DEVICEKIT_HOST_DEVICE static double element(const E* p, std::size_t i) {
    return reduction<Op>::map(static_cast<double>(widen_element(p[i])));
  }
};

template <int N>
struct kernel_priority : kernel_priority<N - 1> {};
template <>
struct kernel_priority<0> {};

/// What a translation unit without the kernels (tree/algorithms.cuh under nvcc) finds: the
/// overloads there take kernel_priority<1> and win where they are visible.
template <class Job>
constexpr bool tree_kernels_available(kernel_priority<0>, const Job*) {
  return false;
}
template <class Job, class Types, std::size_t K>
int tree_kernel_launch(kernel_priority<0>, const Job*, Types*, const tree_chunk<K>*, std::size_t, double*, double,
                       native_stream_handle) {
  throw config_error("tree algorithms: no kernels in this translation unit");
}
template <class Op>
void tree_device_reduce(kernel_priority<0>, const Op*, const tree_launch_plan<1>&, device, native_stream_handle,
                        double*, double*) {
  throw config_error("tree algorithms: no kernels in this translation unit");
}

[[noreturn]] inline void throw_no_kernels(const char* operation, device dev) {
  throw config_error(std::string(operation) + ": the tree is on " + dev.str() +
                     ", and this call was compiled without the kernels: compile it with nvcc in a file that includes "
                     "<devicekit/tree/algorithms.cuh> (or move the tree to the cpu)");
}

/// The group launcher for one combination of element types: finds the kernel through the
/// kernel_priority overloads at instantiation.
template <class Job, class Types, std::size_t K>
int launch_group(const tree_chunk<K>* d, std::size_t count, const void* job, double* partials, double init,
                 native_stream_handle s) {
  return tree_kernel_launch(kernel_priority<1>{}, static_cast<const Job*>(job), static_cast<Types*>(nullptr), d, count,
                            partials, init, s);
}

/// Queues every group of `plan` (whose table is at `d_table` on the device), counting launches.
template <std::size_t K>
int run_groups(const tree_launch_plan<K>& plan, const tree_chunk<K>* d_table, const void* job, double* partials,
               double init, native_stream_handle s) {
  std::size_t at = 0;
  for (const auto& g : plan.groups()) {
    const int r = g.launch(d_table + at, g.chunks.size(), job, partials == nullptr ? nullptr : partials + at, init, s);
    tree_counters().launches.fetch_add(1, std::memory_order_relaxed);
    if (r != 0) return r;
    at += g.chunks.size();
  }
  return 0;
}

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

template <class L>
using element_of_t = typename leaf_traits<std::remove_cvref_t<L>>::element_type;

template <class L>
[[nodiscard]] element_of_t<L>* mutable_data(const L& leaf) noexcept {
  return const_cast<element_of_t<L>*>(leaf_traits<std::remove_cvref_t<L>>::data(leaf));
}

/// The device the call runs on (trees and leaves checked to agree), and the stream checked.
template <class... Trees>
[[nodiscard]] device algorithm_device(const char* operation, const stream_ref* s, const Trees&... trees) {
  std::optional<device> found;
  if constexpr (sizeof...(Trees) == 1) {
    found = device_of(trees...);
  } else {
    found = same_device(trees...);
  }
  const device dev = found.value_or(device::cpu());
  if (s != nullptr) check_stream(*s, dev, operation);
  return dev;
}

/// Leaves of a cuda device whose bytes are in host memory (place(..., memory_kind::host)) are
/// not for kernels.
template <class L>
void check_kernel_leaf(const char* operation, const tree_path& path, const L& leaf) {
  if (memory_device_of(leaf).is_cpu()) {
    throw config_error(std::string(operation) + ": leaf '" + path.display() + "' of " +
                       leaf_traits<L>::device(leaf).str() +
                       " lies in host memory (memory_kind pinned_host or host); place it in device memory first");
  }
}

#if DEVICEKIT_HAS_CUDA
/// The stream a call runs on: the caller's, or, for a call without a stream, the device's
/// placement stream ordered after its legacy default stream (default_ordered_stream), then
/// waited for.
struct call_stream {
  stream_ref s;
  bool wait;
};
[[nodiscard]] inline call_stream stream_for(device dev, const stream_ref* s) {
  if (s != nullptr) return {*s, false};
  return {stream_ref(default_ordered_stream(dev)), true};
}
#endif

/// Runs `job` over the leaves of `out` and the tree arguments among `args` (broadcast scalars are
/// in the job already).
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

template <class Layout, std::size_t P, class InTuple>
void check_position(const char* operation, const tree_path& path, const InTuple& in, std::size_t n, bool out_scalar) {
  if constexpr (!Layout::broadcast[P]) {
    const auto& l = std::get<Layout::tree_index[P]>(in);
    using IL = std::remove_cvref_t<decltype(l)>;
    constexpr bool in_scalar = leaf_traits<IL>::kind == leaf_kind::scalar;
    if (in_scalar != out_scalar || leaf_traits<IL>::size(l) != n) {
      throw tree_structure_error(std::string(operation) + ": leaf '" + path.display() + "' has " + std::to_string(n) +
                                 " elements in the output but " + std::to_string(leaf_traits<IL>::size(l)) +
                                 " in input " + std::to_string(P + 1) +
                                 (in_scalar != out_scalar ? " (a scalar and an array leaf)" : ""));
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
                    tree_launch_plan<K>& plan, const OutLeaf& out_leaf, const ArgsTuple& args, const InTuple& in,
                    std::index_sequence<I...> seq) {
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
  } else {
    check_kernel_leaf(operation, path, out_leaf);
    std::apply([&](const auto&... l) { (check_kernel_leaf(operation, path, l), ...); }, in);
    const std::array<void*, K> ptrs{static_cast<void*>(o),
                                    const_cast<void*>(static_cast<const void*>(position_data<Layout, I>(args, in)))...};
    const std::array<std::size_t, K> sizes{sizeof(Eout), sizeof(position_element_t<Layout, I, ArgsTuple, InTuple>)...};
    plan.template add_leaf<types>(ptrs, sizes, n, &launch_group<Job, types, K>);
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

  tree_launch_plan<K> plan;
  const auto arg_refs = std::forward_as_tuple(args...);
  auto visit = [&](const tree_path& path, const auto& out_leaf, const auto&... in_leaves) {
    transform_leaf<layout>(operation, path, job, on_device, plan, out_leaf, arg_refs,
                           std::forward_as_tuple(in_leaves...), std::index_sequence_for<Args...>{});
  };
  std::apply([&](const auto&... ts) { for_each_leaf_with_path(visit, out, ts...); }, trees);
  if (plan.chunk_count() == 0) return;
#if DEVICEKIT_HAS_CUDA
  const call_stream cs = stream_for(dev, s);
  const auto table = plan.table();
  tree_launch_plumbing(
      dev, cs.s.native_handle(), table.data(), table.size() * sizeof(tree_chunk<K>), 0,
      [&](std::byte* d_table, std::byte*) {
        return static_cast<cudaError_t>(run_groups(plan, reinterpret_cast<const tree_chunk<K>*>(d_table), &job, nullptr,
                                                   0.0, cs.s.native_handle()));
      });
  if (cs.wait) host_wait(cs.s);
#endif
}

template <class Op, class T>
double run_reduce(const char* operation, const stream_ref* s, const T& tree, double* d_out) {
  static_assert(require_tree<T>(), "tree_reduce(tree, op): tree must be a tree (see devicekit/tree/tree.hpp)");
  const device dev = algorithm_device(operation, s, tree);
  const bool on_device = dev.is_cuda();
  const reduce_job<Op>* no_job = nullptr;
  if (on_device && !tree_kernels_available(kernel_priority<1>{}, no_job)) throw_no_kernels(operation, dev);
  double host = reduction<Op>::init();
  tree_launch_plan<1> plan;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        using E = element_of_t<L>;
        const std::size_t n = leaf_traits<L>::size(leaf);
        if (!on_device || leaf_traits<L>::kind == leaf_kind::scalar) {
          host = reduction<Op>::combine(host, host_reduce<Op>(leaf_traits<L>::data(leaf), n));
        } else {
          check_kernel_leaf(operation, path, leaf);
          plan.template add_leaf<type_list<E>>(
              {const_cast<void*>(static_cast<const void*>(leaf_traits<L>::data(leaf)))}, {sizeof(E)}, n,
              &launch_group<reduce_job<Op>, type_list<E>, 1>);
        }
      },
      tree);
  if (!on_device) return host;
#if DEVICEKIT_HAS_CUDA
  const call_stream cs = stream_for(dev, s);
  double from_device = reduction<Op>::init();
  tree_device_reduce(kernel_priority<1>{}, static_cast<const Op*>(nullptr), plan, dev, cs.s.native_handle(), d_out,
                     d_out == nullptr ? &from_device : nullptr);
  if (d_out != nullptr) return host;  // the caller combines nothing more: see tree_reduce_async
  host_wait(cs.s);
  return reduction<Op>::combine(host, from_device);
#else
  (void)d_out;
  return host;
#endif
}

/// A new leaf of element type T shaped like `leaf`, at `p` on `dev` (scalars: T{}).
template <class T, class L>
[[nodiscard]] auto make_leaf_like(const L& leaf, std::byte* p, const std::shared_ptr<void>& owner, device dev) {
  using traits = leaf_traits<L>;
  if constexpr (traits::kind == leaf_kind::scalar) {
    return T{};
  } else if constexpr (traits::kind == leaf_kind::contiguous) {
    return device_array<T>(owner, reinterpret_cast<T*>(p), traits::size(leaf), dev);
#if DEVICEKIT_HAS_MDSPAN
  } else if constexpr (is_shaped_array_v<L> || is_mdspan_view_v<L>) {
    return shaped_array<T, typename L::extents_type, typename L::layout_type>(owner, reinterpret_cast<T*>(p),
                                                                              leaf.mapping(), dev);
#endif
  } else {
    static_assert(sizeof(L) == 0,
                  "zeros_like/tree_cast: a shaped leaf type of your own needs a placed form: use shaped_array");
  }
}

/// The same structure on `dev`, leaves of element type T (or each leaf's own with T = void), in
/// one block of `dev`'s pool, zeroed (all-zero bits are 0 in every element type here): on `*s`
/// (a stream of `dev`; the block goes back to the pool only once the zeroing has run), or, for
/// nullptr, as a call without a stream, zeroed on return.
template <class T, class Tree>
[[nodiscard]] auto allocate_like(const Tree& tree, device dev, [[maybe_unused]] const stream_ref* s = nullptr) {
  static_assert(require_tree<Tree>(), "zeros_like/tree_cast: tree must be a tree (see devicekit/tree/tree.hpp)");
  if (s != nullptr) check_stream(*s, dev, "zeros_like");
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for_each_leaf(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        using E = std::conditional_t<std::is_void_v<T>, element_of_t<L>, T>;
        offsets.push_back(total);
        if constexpr (leaf_traits<L>::kind != leaf_kind::scalar) {
          const std::size_t bytes = leaf_traits<L>::size(leaf) * sizeof(E);
          total += (bytes + placement_alignment - 1) / placement_alignment * placement_alignment;
        }
      },
      tree);
  device_memory& pool = default_placement_resource(dev);
  std::byte* base = total != 0 ? static_cast<std::byte*>(pool.allocate(total, placement_alignment)) : nullptr;
  std::shared_ptr<void> owner;
  if (base != nullptr) {
    placed_block_release<device_memory> release{&pool, total};
    try {
#if DEVICEKIT_HAS_CUDA
      if (dev.is_cuda()) {
        // Not cudaMemset: it is asynchronous for device memory and runs on the legacy default
        // stream (CUDA runtime API, "API synchronization behavior"), whatever stream the call
        // was given. Queued on the caller's stream, or on the stream of a call without a stream
        // (ordered after the legacy default stream, then waited for: zeroed on return).
        scoped_device on(dev.ordinal());
        const stream_ref st = s != nullptr ? *s : stream_ref(default_ordered_stream(dev));
        DEVICEKIT_CUDA_CHECK(cudaMemsetAsync(base, 0, total, st.native_handle()));
        if (s == nullptr) {
          host_wait(st);
        } else {
          release.copied = record_event(st.native_handle());
        }
      } else {
        std::memset(base, 0, total);
      }
#else
      std::memset(base, 0, total);
#endif
    } catch (...) {
#if DEVICEKIT_HAS_CUDA
      // A zeroing already queued still writes the block: it goes back once that is done.
      if (s != nullptr && dev.is_cuda()) s->synchronize();
#endif
      pool.deallocate(base, total, placement_alignment);
      throw;
    }
    owner = std::shared_ptr<void>(base, release);
  }
  std::size_t k = 0;
  return tree_map(
      [&](const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        using E = std::conditional_t<std::is_void_v<T>, element_of_t<L>, T>;
        return make_leaf_like<E>(leaf, base == nullptr ? nullptr : base + offsets[k++], owner, dev);
      },
      tree);
}

template <class Out, class... Args>
inline constexpr bool transform_args_ok = !std::is_convertible_v<Out, stream_ref>;

struct identity_fn {
  template <class V>
  DEVICEKIT_HOST_DEVICE V operator()(V v) const {
    return v;
  }
};
template <class V>
struct constant_fn {
  V value;
  DEVICEKIT_HOST_DEVICE V operator()() const { return value; }
};
struct axpy_fn {
  template <class A, class X, class Y>
  DEVICEKIT_HOST_DEVICE auto operator()(A a, X x, Y y) const {
    return a * x + y;
  }
};

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

}  // namespace detail

/// out[i] = f(in[i]...) over every leaf of `out` and of the trees among `in` (same structure,
/// same leaf lengths); an `in` that is an arithmetic or reduced-precision value is passed to
/// every element. `out` may also be one of the inputs. See the file comment for where it runs.
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

/// y += a * x over every leaf (x and y of one structure; `a` a scalar).
template <class A, class X, class Y>
requires leaf_element<A>
void tree_axpy(A a, const X& x, Y&& y) { detail::transform_entry("tree_axpy", nullptr, y, detail::axpy_fn{}, a, x, y); }
template <class A, class X, class Y>
requires leaf_element<A>
void tree_axpy(stream_ref s, A a, const X& x, Y&& y) {
  detail::transform_entry("tree_axpy", &s, y, detail::axpy_fn{}, a, x, y);
}

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
