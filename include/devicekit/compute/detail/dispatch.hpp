#pragma once
/// \file
/// Where a tree algorithm runs and how it finds its kernels: the device and stream checks, the
/// fallbacks a translation unit without the kernels sees, and the launcher of each group.
///
/// The kernels exist only where nvcc compiles compute/kernels.cuh. The algorithms call them
/// through overloads ranked by kernel_priority and found by argument-dependent lookup where a call
/// is instantiated, so one set of headers serves .cpp files (cpu trees run, cuda trees are refused
/// with config_error) and .cu files (cuda trees launch) alike.
#include <devicekit/compute/detail/plan.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/place/place.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/node.hpp>
#include <devicekit/tree/path.hpp>

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace devicekit::detail {

template <int N>
struct kernel_priority : kernel_priority<N - 1> {};
template <>
struct kernel_priority<0> {};

/// What a translation unit without the kernels (compute/kernels.cuh under nvcc) finds: the
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
/// How many chunks one launch of Job's kernel can carry in its parameters instead of a table in
/// device memory: none without the kernels (compute/kernels.cuh says how many with them).
template <class Job, std::size_t K>
std::size_t tree_kernel_args_capacity(kernel_priority<0>, const Job*, tree_chunk<K>*) {
  return 0;
}
template <class Job, class Types, std::size_t K>
int tree_kernel_launch_args(kernel_priority<0>, const Job*, Types*, const tree_chunk<K>*, std::size_t,
                            native_stream_handle) {
  throw config_error("tree algorithms: no kernels in this translation unit");
}
/// Whether Job has a kernel for one whole leaf of element types Types (tree_whole_leaf_elements):
/// not without the kernels.
template <class Job, class Types>
constexpr bool tree_leaf_kernel_available(kernel_priority<0>, const Job*, Types*) {
  return false;
}
template <class Job, class Types, std::size_t K>
int tree_kernel_launch_leaf(kernel_priority<0>, const Job*, Types*, const tree_chunk<K>&, native_stream_handle) {
  throw config_error("tree algorithms: no kernels in this translation unit");
}

/// A cuda tree in a translation unit without the kernels. The message names
/// <devicekit/compute/kernels.cuh>, the header docs/tree-algorithms.md documents for the kernels.
[[noreturn]] inline void throw_no_kernels(const char* operation, device dev) {
  throw config_error(std::string(operation) + ": the tree is on " + dev.str() +
                     ", and this call was compiled without the kernels: compile it with nvcc in a file that includes "
                     "<devicekit/compute/kernels.cuh> (or move the tree to the cpu)");
}

/// The group launcher for one combination of element types: finds the kernel through the
/// kernel_priority overloads at instantiation.
template <class Job, class Types, std::size_t K>
int launch_group(const tree_chunk<K>* d, std::size_t count, const void* job, double* partials, double init,
                 native_stream_handle s) {
  return tree_kernel_launch(kernel_priority<1>{}, static_cast<const Job*>(job), static_cast<Types*>(nullptr), d, count,
                            partials, init, s);
}

/// The same, for a launch with the chunks (in host memory) in the kernel's parameters.
template <class Job, class Types, std::size_t K>
int launch_group_args(const tree_chunk<K>* chunks, std::size_t count, const void* job, native_stream_handle s) {
  return tree_kernel_launch_args(kernel_priority<1>{}, static_cast<const Job*>(job), static_cast<Types*>(nullptr),
                                 chunks, count, s);
}

/// The same, for one leaf launched on its own.
template <class Job, class Types, std::size_t K>
int launch_whole_leaf(const tree_chunk<K>& leaf, const void* job, native_stream_handle s) {
  return tree_kernel_launch_leaf(kernel_priority<1>{}, static_cast<const Job*>(job), static_cast<Types*>(nullptr), leaf,
                                 s);
}

/// launch_whole_leaf where Job has a kernel for whole leaves of these types, else null (every
/// leaf is then split into chunks).
template <class Job, class Types, std::size_t K>
[[nodiscard]] typename tree_whole_leaf<K>::launch_fn whole_leaf_launcher() {
  if constexpr (tree_leaf_kernel_available(kernel_priority<1>{}, static_cast<const Job*>(nullptr),
                                           static_cast<Types*>(nullptr))) {
    return &launch_whole_leaf<Job, Types, K>;
  } else {
    return nullptr;
  }
}

/// Queues every leaf of `plan` launched on its own, counting launches.
template <std::size_t K>
int run_whole_leaves(const tree_launch_plan<K>& plan, const void* job, native_stream_handle s) {
  for (const auto& w : plan.whole_leaves()) {
    const int r = w.launch(w.leaf, job, s);
    tree_counters().launches.fetch_add(1, std::memory_order_relaxed);
    if (r != 0) return r;
  }
  return 0;
}

/// Queues every group of `plan` with its chunks in the kernel's parameters (plan.fits_in_args
/// said they fit), counting launches.
template <std::size_t K>
int run_groups_in_args(const tree_launch_plan<K>& plan, const void* job, native_stream_handle s) {
  for (const auto& g : plan.groups()) {
    const int r = g.launch_args(g.chunks.data(), g.chunks.size(), job, s);
    tree_counters().launches.fetch_add(1, std::memory_order_relaxed);
    if (r != 0) return r;
  }
  return 0;
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

template <class L>
using element_of_t = typename leaf_traits<std::remove_cvref_t<L>>::element_type;

template <class L>
[[nodiscard]] element_of_t<L>* mutable_data(const L& leaf) noexcept {
  return const_cast<element_of_t<L>*>(leaf_traits<std::remove_cvref_t<L>>::data(leaf));
}

/// True when every leaf a tree of type T can hold lives on the host by its type (its leaf_traits
/// say always_on_host: scalars and host ranges such as std::vector<float>), under tuples, Hana
/// structs, arrays and vectors. A leaf whose device is known at run time only (devicekit's own,
/// or a user's leaf_traits without the flag) and a node whose child types this cannot name give
/// false.
template <class T>
constexpr bool leaves_on_host_by_type();

template <class Traits, std::size_t... I>
constexpr bool fixed_children_on_host_by_type(std::index_sequence<I...>) {
  if constexpr ((requires { typename Traits::template child_type<I>; } && ...)) {
    return (leaves_on_host_by_type<typename Traits::template child_type<I>>() && ...);
  } else {
    return false;
  }
}

template <class T>
constexpr bool leaves_on_host_by_type() {
  using U = std::remove_cvref_t<T>;
  if constexpr (is_leaf_v<U>) {
    return requires { requires leaf_traits<U>::always_on_host; };
  } else if constexpr (!is_node_v<U>) {
    return false;
  } else if constexpr (node_traits<U>::fixed) {
    return fixed_children_on_host_by_type<node_traits<U>>(std::make_index_sequence<node_traits<U>::arity>{});
  } else if constexpr (requires { typename node_traits<U>::child_type; }) {
    return leaves_on_host_by_type<typename node_traits<U>::child_type>();
  } else {
    return false;
  }
}

/// The device the call runs on (trees and leaves checked to agree), and the stream checked.
/// Trees of host containers only run on the cpu whatever their leaves: no walk asks them (a walk
/// per tree is a cost per leaf, paid before any element is computed).
template <class... Trees>
[[nodiscard]] device algorithm_device(const char* operation, const stream_ref* s, const Trees&... trees) {
  if constexpr ((leaves_on_host_by_type<Trees>() && ...)) {
    if (s != nullptr) check_stream(*s, device::cpu(), operation);
    return device::cpu();
  }
  device dev = device::cpu();  // for trees without array leaves
  if constexpr (sizeof...(Trees) == 1) {
    (void)tree_device(trees..., dev);
  } else {
    (void)trees_device(dev, trees...);
  }
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

}  // namespace devicekit::detail
