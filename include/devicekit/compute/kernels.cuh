#pragma once
/// \file
/// The kernels of the tree algorithms (compute/), nvcc only: include this header, beside the
/// compute headers it calls, in the .cu file that calls tree_transform, tree_reduce, ... on trees
/// placed on a cuda device.
///
/// The calls there then launch one grid-stride kernel per combination of element types over the
/// chunk table (apex multi_tensor_apply's scheme: each block takes whole chunks; each thread
/// loads several elements before it stores, compute/detail/chunk_share.hpp), transforms give
/// leaves of tree_whole_leaf_elements or more one cub::DeviceTransform each, and reductions
/// write one partial per chunk (cub::BlockReduce) that cub::DeviceReduce finishes, with its
/// temporary storage from the device's devicekit pool. Functors need a `__host__ __device__`
/// call operator (lambdas: nvcc --extended-lambda). Kept apart from the algorithms so that a .cpp
/// file can use them on cpu trees: these overloads outrank the fallbacks of
/// compute/detail/dispatch.hpp wherever they are visible.
#if !defined(__CUDACC__)
#  error \
      "devicekit/compute/kernels.cuh launches kernels: include it from a .cu file compiled by nvcc (a .cpp file may use devicekit/compute.hpp on cpu trees)"
#endif
#include <devicekit/compute/detail/chunk_share.hpp>
#include <devicekit/compute/detail/dispatch.hpp>
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/compute/detail/plan.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_transform.cuh>
#include <cuda/std/tuple>

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace devicekit::detail {

/// Threads per block, and the most blocks a launch asks for (blocks then stride over chunks:
/// enough to fill every SM of current GPUs several times over).
inline constexpr int tree_block_threads = 256;
inline constexpr std::size_t tree_max_blocks = 8192;

[[nodiscard]] inline unsigned tree_grid(std::size_t chunks) {
  return static_cast<unsigned>(std::min(chunks, tree_max_blocks));
}

template <class Job, class Eout, class... Ein>
__global__ void __launch_bounds__(tree_block_threads)
    tree_transform_kernel(const tree_chunk<sizeof...(Ein) + 1>* chunks, std::size_t count, Job job) {
  for (std::size_t c = blockIdx.x; c < count; c += gridDim.x) {
    transform_chunk_share<Job, Eout, Ein...>(job, chunks[c], std::index_sequence_for<Ein...>{}, threadIdx.x,
                                             blockDim.x);
  }
}

/// Chunks carried in a kernel's parameters: the first `count` of `c` are used.
template <std::size_t K, std::size_t Cap>
struct tree_args_table {
  std::size_t count;
  tree_chunk<K> c[Cap];
};

/// A transform's kernel with its chunks in its parameters. Each chunk is copied out of the
/// parameter space before use, as tree_reduce_kernel does with the table.
template <std::size_t Cap, class Job, class Eout, class... Ein>
__global__ void __launch_bounds__(tree_block_threads)
    tree_transform_args_kernel(const tree_args_table<sizeof...(Ein) + 1, Cap> table, Job job) {
  for (std::size_t c = blockIdx.x; c < table.count; c += gridDim.x) {
    const tree_chunk<sizeof...(Ein) + 1> chunk = table.c[c];
    transform_chunk_share<Job, Eout, Ein...>(job, chunk, std::index_sequence_for<Ein...>{}, threadIdx.x, blockDim.x);
  }
}

template <class Op, class E>
__global__ void __launch_bounds__(tree_block_threads)
    tree_reduce_kernel(const tree_chunk<1>* chunks, std::size_t count, double* partials, double init) {
  using block_reduce = cub::BlockReduce<double, tree_block_threads>;
  __shared__ typename block_reduce::TempStorage temp;
  for (std::size_t c = blockIdx.x; c < count; c += gridDim.x) {
    const tree_chunk<1> ch = chunks[c];
    const auto* p = static_cast<const E*>(ch.p[0]);
    double acc = init;
    for (std::size_t i = threadIdx.x; i < ch.n; i += blockDim.x) {
      acc = reduction<Op>::combine(acc, reduce_job<Op>::element(p, i));
    }
    const double r = block_reduce(temp).Reduce(acc, combine_fn<Op>{});
    if (threadIdx.x == 0) partials[c] = r;
    __syncthreads();  // temp is reused by the next chunk
  }
}

template <class Job>
constexpr bool tree_kernels_available(kernel_priority<1>, const Job*) {
  return true;
}

/// One group of a transform: Job is a transform_job.
template <class F, class... S, class Eout, class... Ein, std::size_t K>
int tree_kernel_launch(kernel_priority<1>, const transform_job<F, S...>* job, type_list<Eout, Ein...>*,
                       const tree_chunk<K>* chunks, std::size_t count, double*, double, native_stream_handle s) {
  tree_transform_kernel<transform_job<F, S...>, Eout, Ein...>
      <<<tree_grid(count), tree_block_threads, 0, s>>>(chunks, count, *job);
  return static_cast<int>(cudaGetLastError());
}

/// Kernel parameters: 4 KiB on every GPU and driver; up to 32,764 bytes with CUDA 12.1 or later,
/// a driver of 12.1 (r530) or later and compute capability 7.0 or later (CUDA C++ Programming
/// Guide, "Function Parameters"). PyTorch's multi-tensor kernels use both sizes the same way
/// (aten/src/ATen/native/cuda/MultiTensorApply.cuh, "32KB kernel argument size support").
inline constexpr std::size_t tree_small_args_bytes = 4096;
inline constexpr std::size_t tree_large_args_bytes = 32764;

/// The chunks a table in `limit` bytes of parameters holds beside its count and a Job (at most
/// alignof(Job) - 1 bytes of padding between the two).
template <std::size_t K, class Job>
constexpr std::size_t tree_args_chunks(std::size_t limit) {
  const std::size_t fixed = sizeof(std::size_t) + alignof(Job) + sizeof(Job);
  return limit > fixed ? (limit - fixed) / sizeof(tree_chunk<K>) : 0;
}

/// The large parameters need every architecture this file is compiled for at 7.0 or later (nvcc
/// lists them in __CUDA_ARCH_LIST__; a kernel with more than 4 KiB of parameters does not compile
/// for older ones) and, at run time, a driver of CUDA 12.1 or later.
[[nodiscard]] constexpr bool tree_large_args_compiled() {
#if defined(__CUDA_ARCH_LIST__)
  constexpr int archs[] = {__CUDA_ARCH_LIST__};
  for (int a : archs) {
    if (a < 700) return false;
  }
  return true;
#else
  return false;
#endif
}
[[nodiscard]] inline bool tree_large_args_supported() {
  static const bool ok = [] {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return v >= 12010;
  }();
  return ok;
}

template <class F, class... S, std::size_t K>
std::size_t tree_kernel_args_capacity(kernel_priority<1>, const transform_job<F, S...>*, tree_chunk<K>*) {
  using job_t = transform_job<F, S...>;
  if constexpr (tree_large_args_compiled()) {
    if (tree_large_args_supported()) return tree_args_chunks<K, job_t>(tree_large_args_bytes);
  }
  return tree_args_chunks<K, job_t>(tree_small_args_bytes);
}

/// Launches the kernel whose parameters take at most `Limit` bytes.
template <std::size_t Limit, class Job, class Eout, class... Ein, std::size_t K>
int tree_launch_in_args(const Job& job, const tree_chunk<K>* chunks, std::size_t count, native_stream_handle s) {
  constexpr std::size_t Cap = tree_args_chunks<K, Job>(Limit);
  static_assert(Cap != 0 && sizeof(tree_args_table<K, Cap>) + alignof(Job) + sizeof(Job) <= Limit);
  tree_args_table<K, Cap> table;  // only the first `count` chunks are set: the kernel reads no more
  table.count = count;
  std::copy_n(chunks, count, table.c);
  // cudaLaunchKernel reads the parameters where they are; a <<<>>> call would first copy the table
  // (up to 32 KB) into the kernel's host-side stub by value.
  void* args[] = {&table, const_cast<Job*>(&job)};
  const cudaError_t launched = cudaLaunchKernel(&tree_transform_args_kernel<Cap, Job, Eout, Ein...>,
                                                dim3(tree_grid(count)), dim3(tree_block_threads), args, 0, s);
  const cudaError_t last = cudaGetLastError();  // as after a <<<>>> launch: the error is not left behind
  return static_cast<int>(launched != cudaSuccess ? launched : last);
}

/// One group of a transform with its chunks in the launch's parameters: the 4 KiB kernel where
/// they fit it, the large one otherwise (tree_kernel_args_capacity said they fit one of them).
template <class F, class... S, class Eout, class... Ein, std::size_t K>
int tree_kernel_launch_args(kernel_priority<1>, const transform_job<F, S...>* job, type_list<Eout, Ein...>*,
                            const tree_chunk<K>* chunks, std::size_t count, native_stream_handle s) {
  using job_t = transform_job<F, S...>;
  constexpr std::size_t small = tree_args_chunks<K, job_t>(tree_small_args_bytes);
  if constexpr (small != 0) {
    if (count <= small) return tree_launch_in_args<tree_small_args_bytes, job_t, Eout, Ein...>(*job, chunks, count, s);
  }
  if constexpr (tree_large_args_compiled() && tree_args_chunks<K, job_t>(tree_large_args_bytes) != 0) {
    if (count <= tree_args_chunks<K, job_t>(tree_large_args_bytes) && tree_large_args_supported()) {
      return tree_launch_in_args<tree_large_args_bytes, job_t, Eout, Ein...>(*job, chunks, count, s);
    }
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

/// How many of positions [0, P) of Job read a tree: where position P's elements are among the
/// inputs that cub::DeviceTransform hands a whole leaf's element function.
template <class Job, std::size_t... Q>
constexpr std::size_t tree_inputs_before(std::index_sequence<Q...>) {
  return (std::size_t{0} + ... + (Job::template reads_tree<Q> ? std::size_t{1} : std::size_t{0}));
}
template <class Job, std::size_t P>
inline constexpr std::size_t tree_input_index = tree_inputs_before<Job>(std::make_index_sequence<P>{});

/// A transform's element function for one whole leaf, called by cub::DeviceTransform with the
/// elements of the positions that read a tree, in position order; broadcast values come from the
/// job, as in the chunk kernel.
template <class Job, class Eout, class... Ein>
struct tree_leaf_op {
  Job job;

  template <class... T>
  __device__ Eout operator()(T... x) const {
    return apply(::cuda::std::tuple<T...>(x...), std::index_sequence_for<Ein...>{});
  }

  template <class Tuple, std::size_t... I>
  __device__ Eout apply(const Tuple& t, std::index_sequence<I...>) const {
    return narrow_element<Eout>(job.f(value<I>(t)...));
  }

  template <std::size_t P, class Tuple>
  __device__ auto value(const Tuple& t) const {
    if constexpr (Job::template reads_tree<P>) {
      return widen_element(::cuda::std::get<tree_input_index<Job, P>>(t));
    } else {
      return job.template load<P>(static_cast<const int*>(nullptr), 0);
    }
  }
};

/// Whole leaves (compute/detail/plan.hpp, tree_whole_leaf_elements) go to cub::DeviceTransform
/// where every element type is arithmetic and at least one position reads a tree: the types CUB
/// copies as raw bytes (its bulk-copy path on sm_90 and later), and a transform with inputs. Other
/// leaves (reduced-precision floats, tree_fill) stay in the chunk kernel.
template <class F, class... S, class Eout, class... Ein>
constexpr bool tree_leaf_kernel_available(kernel_priority<1>, const transform_job<F, S...>*, type_list<Eout, Ein...>*) {
  return std::is_arithmetic_v<Eout> && (std::is_arithmetic_v<Ein> && ...) && (std::is_same_v<S, tree_position> || ...);
}

/// Position P's pointer as CUB's input, or nothing for a broadcast position.
template <bool ReadsTree, class E>
auto tree_leaf_input(const void* p) {
  if constexpr (ReadsTree) {
    return ::cuda::std::tuple<const E*>(static_cast<const E*>(p));
  } else {
    return ::cuda::std::tuple<>();
  }
}

template <class Job, class Eout, class... Ein, std::size_t K, std::size_t... I>
int tree_launch_leaf_inputs(const Job& job, const tree_chunk<K>& leaf, native_stream_handle s,
                            std::index_sequence<I...>) {
  auto inputs = ::cuda::std::tuple_cat(tree_leaf_input<Job::template reads_tree<I>, Ein>(leaf.p[I + 1])...);
  // The output may be one of the inputs (tree_axpy's y): CUB allows an output that starts where an
  // input starts (cub/device/device_transform.cuh).
  const cudaError_t e = cub::DeviceTransform::Transform(std::move(inputs), static_cast<Eout*>(leaf.p[0]), leaf.n,
                                                        tree_leaf_op<Job, Eout, Ein...>{job}, s);
  const cudaError_t last = cudaGetLastError();
  return static_cast<int>(e != cudaSuccess ? e : last);
}

/// One whole leaf of a transform (tree_leaf_kernel_available said it has this kernel).
template <class F, class... S, class Eout, class... Ein, std::size_t K>
int tree_kernel_launch_leaf(kernel_priority<1>, const transform_job<F, S...>* job, type_list<Eout, Ein...>*,
                            const tree_chunk<K>& leaf, native_stream_handle s) {
  return tree_launch_leaf_inputs<transform_job<F, S...>, Eout, Ein...>(*job, leaf, s,
                                                                       std::index_sequence_for<Ein...>{});
}

/// One group of a reduction.
template <class Op, class E>
int tree_kernel_launch(kernel_priority<1>, const reduce_job<Op>*, type_list<E>*, const tree_chunk<1>* chunks,
                       std::size_t count, double* partials, double init, native_stream_handle s) {
  tree_reduce_kernel<Op, E><<<tree_grid(count), tree_block_threads, 0, s>>>(chunks, count, partials, init);
  return static_cast<int>(cudaGetLastError());
}

/// A reduction on the device: every group's partials, then cub::DeviceReduce over them into
/// `d_out` (a device double) or, with `h_out`, into scratch copied to `*h_out` (the caller waits
/// for `s`). Table, partials, result and CUB's temporary storage are one scratch block.
template <class Op>
void tree_device_reduce(kernel_priority<1>, const Op*, const tree_launch_plan<1>& plan, device dev,
                        native_stream_handle s, double* d_out, double* h_out) {
  const double init = reduction<Op>::init();
  const std::size_t count = plan.chunk_count();
  scoped_device on(dev.ordinal());
  if (count == 0) {
    if (h_out != nullptr) *h_out = init;
    if (d_out != nullptr) {
      // Pageable source: the runtime copies it before returning (CUDA runtime API, "API
      // synchronization behavior"), so `init` may go out of scope.
      DEVICEKIT_CUDA_CHECK(cudaMemcpyAsync(d_out, &init, sizeof(double), cudaMemcpyHostToDevice, s));
    }
    return;
  }
  std::size_t temp_bytes = 0;
  DEVICEKIT_CUDA_CHECK(cub::DeviceReduce::Reduce(nullptr, temp_bytes, static_cast<const double*>(nullptr),
                                                 static_cast<double*>(nullptr), count, combine_fn<Op>{}, init, s));
  const std::size_t partial_bytes = (count + 1) * sizeof(double);  // + the result
  const std::size_t temp_at = (partial_bytes + 255) / 256 * 256;
  const auto table = plan.table();
  const reduce_job<Op> job{};
  tree_launch_plumbing(dev, s, table.data(), table.size() * sizeof(tree_chunk<1>), temp_at + temp_bytes,
                       [&](std::byte* d_table, std::byte* extra) -> cudaError_t {
                         auto* partials = reinterpret_cast<double*>(extra);
                         double* result = d_out != nullptr ? d_out : partials + count;
                         const int r =
                             run_groups(plan, reinterpret_cast<const tree_chunk<1>*>(d_table), &job, partials, init, s);
                         if (r != 0) return static_cast<cudaError_t>(r);
                         cudaError_t e = cub::DeviceReduce::Reduce(extra + temp_at, temp_bytes, partials, result, count,
                                                                   combine_fn<Op>{}, init, s);
                         if (e == cudaSuccess && h_out != nullptr) {
                           e = cudaMemcpyAsync(h_out, result, sizeof(double), cudaMemcpyDeviceToHost, s);
                         }
                         return e;
                       });
}

}  // namespace devicekit::detail
