#pragma once
/// \file
/// How the reductions run: cpu leaves and scalar leaves reduced on the host, cuda leaves reduced
/// per chunk in one launch per element type and finished on the device.
///
/// Kept apart from the transforms: a reduction reads one tree and yields one double, which needs
/// its own plan (one position), its own device finish (tree_device_reduce) and, without `d_out`,
/// a wait for the stream.
#include <devicekit/compute/detail/dispatch.hpp>
#include <devicekit/compute/detail/element_ops.hpp>
#include <devicekit/compute/detail/host.hpp>
#include <devicekit/compute/detail/plan.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/path.hpp>
#include <devicekit/tree/tree.hpp>

#include <cstddef>
#include <type_traits>

namespace devicekit::detail {

template <class Op, class T>
double run_reduce(const char* operation, const stream_ref* s, const T& tree, double* d_out) {
  static_assert(require_tree<T>(), "tree_reduce(tree, op): tree must be a tree (see devicekit/tree/tree.hpp)");
  const device dev = algorithm_device(operation, s, tree);
  const bool on_device = dev.is_cuda();
  const reduce_job<Op>* no_job = nullptr;
  if (on_device && !tree_kernels_available(kernel_priority<1>{}, no_job)) throw_no_kernels(operation, dev);
  double host = reduction<Op>::init();
  std::size_t host_passes = 0;
  tree_launch_plan<1> plan;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf) {
        using L = std::remove_cvref_t<decltype(leaf)>;
        using E = element_of_t<L>;
        const std::size_t n = leaf_traits<L>::size(leaf);
        if (!on_device || leaf_traits<L>::kind == leaf_kind::scalar) {
          if (n != 0) {
            host = reduction<Op>::combine(host, host_reduce<Op>(leaf_traits<L>::data(leaf), n));
            ++host_passes;
          }
        } else {
          check_kernel_leaf(operation, path, leaf);
          plan.template add_leaf<type_list<E>>(
              {const_cast<void*>(static_cast<const void*>(leaf_traits<L>::data(leaf)))}, {sizeof(E)}, n,
              &launch_group<reduce_job<Op>, type_list<E>, 1>);
        }
      },
      tree);
  host_leaf_passes() += host_passes;
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

}  // namespace devicekit::detail
