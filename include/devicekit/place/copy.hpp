#pragma once
/// \file
/// Copying a tree into a tree that is already placed, the way a training loop refills its
/// buffers every step instead of allocating new ones (torch.Tensor.copy_(non_blocking=True),
/// jax's donated buffers):
///
///   copy(src, dst, stream)   writes src's leaves into dst's, queued on `stream` (a stream of
///                            dst's device); nothing is allocated on the device
///   copy(src, dst)           the same on an internal stream, finished on return
///
/// `src` is a host tree or a placed tree (any device) of the same structure as `dst`, with the
/// same element type and element count in every array leaf (and the same shape where both are
/// shaped). Scalar leaves of dst are assigned. The copies go through placement's copy engine
/// (transfer/detail/copy.hpp): host leaves through pinned staging, one transfer per run of
/// adjacent destination leaves; device leaves by device-to-device or peer copies.
#include <devicekit/core/capture.hpp>
#include <devicekit/place/place.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

namespace devicekit {

namespace detail {

/// Host items toward one cuda device, split into runs whose destinations follow each other
/// with at most placement's alignment padding between them and lie in one allocation (same
/// owner). The staged transfer (copy_staged_host_items_to_device) writes the whole range its
/// items span, gaps included: harmless inside a block place laid out (its gaps are padding),
/// wrong for a destination tree whose leaves come from different allocations, or from one
/// allocation with other live data between them.
struct owned_item {
  copy_item item;
  const void* dst_owner = nullptr;
};

[[nodiscard]] DEVICEKIT_DECL std::vector<std::vector<copy_item>> adjacent_runs(std::vector<owned_item> items);

template <class S, class D>
void check_copy_leaf(const tree_path& path, const S& src, const D& dst, std::vector<std::string>& problems) {
  using st = leaf_traits<S>;
  using dt = leaf_traits<D>;
  static_assert((st::kind == leaf_kind::scalar) == (dt::kind == leaf_kind::scalar),
                "copy(src, dst): a scalar leaf of one tree faces an array leaf of the other");
  if constexpr (st::kind != leaf_kind::scalar) {
    static_assert(
        std::is_same_v<std::remove_cv_t<typename st::element_type>, std::remove_cv_t<typename dt::element_type>>,
        "copy(src, dst): leaves at the same position must have the same element type");
    // Read through the traits, not describe_leaf: a copy into a placed tree is a loop's steady
    // state, and this runs for every leaf of it.
    const std::size_t ss = st::size(src);
    const std::size_t ds = dt::size(dst);
    if (ss != ds) {
      problems.push_back("leaf '" + path.display() + "' has " + std::to_string(ss) + " element(s) in the source but " +
                         std::to_string(ds) + " in the destination");
    } else if constexpr (st::kind == leaf_kind::shaped && dt::kind == leaf_kind::shaped) {
      const auto sh = st::shape(src);
      const auto dh = dt::shape(dst);
      if (!std::equal(sh.begin(), sh.end(), dh.begin(), dh.end())) {
        const auto dims = [](const auto& shape) {
          std::string out;
          for (const auto e : shape) out += (out.empty() ? "" : " x ") + std::to_string(e);
          return out;
        };
        problems.push_back("leaf '" + path.display() + "' is " + dims(sh) + " in the source but " + dims(dh) +
                           " in the destination");
      }
    }
    if constexpr (st::kind == leaf_kind::shaped && dt::kind == leaf_kind::shaped) {
      using sl = typename std::remove_cvref_t<decltype(src.mapping())>::layout_type;
      using dl = typename std::remove_cvref_t<decltype(dst.mapping())>::layout_type;
      static_assert(std::is_same_v<sl, dl>,
                    "copy(src, dst): shaped leaves at the same position must have the same layout (bytes are copied "
                    "as they lie)");
    }
  }
}

/// copy's body: checks, then the copies on `s` (cuda dst) or inline (cpu dst).
template <class Src, class Dst>
void copy_into(const Src& src, Dst& dst, stream_ref s) {
  static_assert(require_tree<Src>(), "copy(src, dst, ...): src must be a tree (see devicekit/tree/tree.hpp)");
  static_assert(require_tree<Dst>(), "copy(src, dst, ...): dst must be a tree (see devicekit/tree/tree.hpp)");
  scoped_range range("devicekit.copy");
  if (!same_structure(src, dst)) {
    throw tree_structure_error("copy: the source tree " + structure(src).str() + " and the destination " +
                               structure(dst).str() +
                               " differ in structure; copy needs a destination placed from a "
                               "tree like the source (place(src, device) makes one)");
  }
  (void)source_device(src, "copy");
  const std::optional<device> target = device_of(dst);  // device_mismatch when dst's leaves disagree
  std::vector<std::string> problems;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& from, const auto& to) { check_copy_leaf(path, from, to, problems); }, src,
      dst);
  if (!problems.empty()) {
    std::string msg = "copy: the trees' leaves do not match: ";
    for (std::size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw config_error(msg + " (copy writes into the destination as it is; place a new tree for other sizes)");
  }
  const device dev = target.value_or(s.get_device());
  if (target) check_stream(s, dev, "copy");

  // Scalars are values in the placed tree: assigned here, on the host. A destination placed in
  // host memory for its device (memory kinds pinned_host and host) is written as the host memory
  // it is.
  std::vector<copy_item> on_device;
  std::vector<owned_item> on_host;
  bool dst_in_host_memory = false;
  for_each_leaf(
      [&](const auto& from, auto& to) {
        using S = std::remove_cvref_t<decltype(from)>;
        if constexpr (is_scalar_leaf_v<S>) {
          to = from;
        } else {
          using traits = leaf_traits<S>;
          copy_item it{reinterpret_cast<const std::byte*>(traits::data(from)), memory_device_of(from), nullptr,
                       mutable_bytes(to), traits::size(from) * sizeof(typename traits::element_type)};
          // Device sources are copied leaf by leaf (no owner: coalesce would copy the gaps between
          // leaves of one source allocation, which need not be gaps in the destination).
          if (it.src_device.is_cpu()) {
            on_host.push_back({it, owner_of(to)});
          } else {
            on_device.push_back(it);
          }
          dst_in_host_memory = dst_in_host_memory || memory_device_of(to).is_cpu();
        }
      },
      src, dst);
  if (!target) return;  // no array leaf: only scalars
  if (dev.is_cpu() || dst_in_host_memory) {
    std::vector<copy_item> items = std::move(on_device);
    for (const auto& it : on_host) items.push_back(it.item);
    copy_items(items, device::cpu(), s.native_handle());
    return;
  }
#if DEVICEKIT_HAS_CUDA
  if (capture_of(s).active) {
    // Inside a capture the copy engine's capture path takes every leaf (pinned host ends only).
    for (const auto& it : on_host) on_device.push_back(it.item);
    copy_items(on_device, dev, s.native_handle());
    return;
  }
  {
    scoped_device on(dev.ordinal());
    for (const auto& run : adjacent_runs(std::move(on_host))) copy_host_items_to_device(run, s.native_handle());
  }
  copy_items(on_device, dev, s.native_handle());
#else
  throw config_error("copy: cannot copy to " + dev.str() +
                     ": devicekit was built without CUDA (DEVICEKIT_HAS_CUDA is 0)");
#endif
}

}  // namespace detail

/// Writes `src` into the placed tree `dst` (same structure, same element types and counts),
/// queued on `s`, a stream of dst's device; no device memory is allocated. Returns without
/// waiting for `s`. Lifetimes, as with place(tree, device, stream):
///  - host leaves in pageable memory are packed into pinned staging before this returns: the
///    source may then be changed or freed (the host waits only when more than 256 MiB of staging
///    is still queued);
///  - host leaves of 1 MiB or more already in pinned memory, and device leaves, are read by the
///    copy engine when `s` gets there: keep them alive and unchanged until then;
///  - dst must stay alive until `s` has passed the copy, and work on other streams that reads or
///    writes dst must be ordered around it (an event, or synchronize `s`).
/// Errors: a dst whose types show another structure does not compile (static_assert:
/// trees_differ_in_structure); tree_structure_error for what only the values show (std::vector
/// nodes of other lengths; nodes of one arity but another kind or member names); config_error
/// naming each leaf whose element count (or shape) differs; device_mismatch (expected: dst's device, actual: the
/// stream's) for a stream of another device, and when dst's or src's leaves are on several
/// devices. Leaves that differ in element type, or a scalar facing an array, do not compile.
template <class Src, class Dst>
void copy(const Src& src, Dst& dst, stream_ref s) {
  detail::copy_into(src, dst, s);
}

/// copy on an internal stream of dst's device, finished on return: a call without a stream,
/// ordered after the legacy default streams of dst's and src's devices as cudaMemcpy is (docs/placement.md,
/// "Calls without a stream").
template <class Src, class Dst>
void copy(const Src& src, Dst& dst) {
#if DEVICEKIT_HAS_CUDA
  if (const auto d = device_of(dst); d && d->is_cuda()) {
    const auto from = detail::source_device(src, "copy");
    const stream& s = detail::default_ordered_stream(*d, from);
    detail::copy_into(src, dst, s);
    detail::host_wait(s);
    return;
  }
#endif
  const stream inline_stream;
  detail::copy_into(src, dst, inline_stream);
}

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/copy.ipp>
#endif
