#pragma once
/// \file
/// The chunk table of the tree algorithms: every leaf of a call split into chunks and grouped by
/// element types, and the stream-ordered plumbing that stages the table to a device.
///
/// One launch for many leaves is apex's multi_tensor_apply and PyTorch's `_foreach` kernels
/// (aten/src/ATen/native/cuda/MultiTensorApply.cuh): a table of (pointer, length) chunks goes to
/// the device and each block takes chunks, so a thousand small leaves cost one launch instead of
/// a thousand (about 3-5 us each), and a long leaf is split so that blocks stay balanced. Like
/// those, one launch serves one combination of element types: a tree that mixes float and bf16
/// leaves takes one launch per combination (`tree_launch_plan::groups`).
#include <devicekit/core/capture.hpp>
#include <devicekit/core/config.hpp>
#include <devicekit/core/detail/host_access.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/registry.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <typeinfo>
#include <vector>

namespace devicekit::detail {

/// Elements per chunk: apex's multi_tensor_apply uses 65536 (2048 * 32) for the same reason, a
/// block's worth of work large enough to hide its start and small enough to balance.
inline constexpr std::size_t tree_chunk_elements = std::size_t{1} << 16;

/// Leaves of at least this many elements go to a launch of their own where the algorithm has one
/// (transforms over arithmetic elements: cub::DeviceTransform, compute/kernels.cuh). One launch over
/// a chunk table pays for itself on many leaves; on a long leaf one more launch costs a few
/// microseconds against the leaf's own time, and CUB's transform keeps more bytes in flight than
/// the chunk kernel (it sizes loads by the bytes in flight a GPU needs, and on sm_90 and later
/// stages tiles with bulk copies: cub/device/dispatch/tuning/tuning_transform.cuh). Where the two
/// cross was measured on an H200 (bench_tree_cuda, tree_axpy over 512 MiB of float leaves, the
/// whole-leaf path against the chunk kernel): 0.55-0.61 at 4 MiB leaves, 0.76-0.79 at 8 MiB,
/// 0.93-0.95 at 16 MiB, 1.12-1.13 at 64 MiB. 2^23 elements (32 MiB of floats) lies between the
/// last two; the benchmark's 32 MiB row checks it.
inline constexpr std::size_t tree_whole_leaf_elements = std::size_t{1} << 23;

/// Counters of the tree algorithms (tests and benchmarks read them): kernel launches, chunk
/// tables staged to a device and their bytes.
struct tree_algorithm_counters {
  std::atomic<std::uint64_t> launches{0};
  std::atomic<std::uint64_t> tables{0};
  std::atomic<std::uint64_t> table_bytes{0};
};
[[nodiscard]] inline tree_algorithm_counters& tree_counters() noexcept {
  static tree_algorithm_counters c;
  return c;
}

/// Host-side (cpu) leaf passes of the tree algorithms called on this thread (tests read them).
/// Per thread and not atomic: one shared atomic add per call took half of a one-leaf host
/// transform's time, as much as the element work of hundreds of floats.
[[nodiscard]] inline std::uint64_t& host_leaf_passes() noexcept {
  thread_local std::uint64_t passes = 0;
  return passes;
}

/// Whether transforms whose chunks fit the launch's parameters carry them there (on unless turned
/// off: a benchmark compares that with the staged table in one run, a test reaches the table with
/// a small tree).
[[nodiscard]] inline std::atomic<bool>& tree_args_enabled() noexcept {
  static std::atomic<bool> on{true};
  return on;
}

/// The leaf length from which transforms launch a leaf on its own: tree_whole_leaf_elements unless
/// changed (a benchmark measures both paths at several lengths in one run; SIZE_MAX turns the
/// whole-leaf launches off).
[[nodiscard]] inline std::atomic<std::size_t>& tree_whole_leaf_threshold() noexcept {
  static std::atomic<std::size_t> elements{tree_whole_leaf_elements};
  return elements;
}

/// One chunk: K pointers (position 0 the output, then the inputs; null for broadcast scalars),
/// each already advanced to the chunk's first element, and its length.
template <std::size_t K>
struct tree_chunk {
  void* p[K];
  std::size_t n;
};

template <class... E>
struct type_list {};

/// A chunk table for one combination of element types: chunks of all leaves with those types,
/// and where their partial results go (reductions: one double per chunk, in table order).
template <std::size_t K>
struct tree_chunk_group {
  const std::type_info* types = nullptr;
  std::vector<tree_chunk<K>> chunks;
  /// Queues this group's kernel (set by the algorithm, for the combination's types).
  /// Returns the launch's cudaError_t as an int (this header compiles without CUDA too).
  using launch_fn = int (*)(const tree_chunk<K>* d_chunks, std::size_t count, const void* job, double* d_partials,
                            double init, native_stream_handle s);
  launch_fn launch = nullptr;
  /// Queues the kernel with the group's chunks in its parameters (`chunks` in host memory; see
  /// tree_kernel_args_capacity); null where the algorithm has no such kernel (reductions).
  using launch_args_fn = int (*)(const tree_chunk<K>* chunks, std::size_t count, const void* job,
                                 native_stream_handle s);
  launch_args_fn launch_args = nullptr;
};

/// A leaf launched on its own (tree_whole_leaf_elements): the leaf as one chunk, and the function
/// that queues its kernel (set by the algorithm, for the leaf's element types).
template <std::size_t K>
struct tree_whole_leaf {
  using launch_fn = int (*)(const tree_chunk<K>& leaf, const void* job, native_stream_handle s);
  tree_chunk<K> leaf;
  launch_fn launch = nullptr;
};

/// Every leaf of a call split into chunks of at most `chunk_elements`, grouped by element types.
template <std::size_t K>
class tree_launch_plan {
 public:
  explicit tree_launch_plan(std::size_t chunk_elements = tree_chunk_elements,
                            std::size_t whole_leaf_elements = tree_whole_leaf_elements)
      : chunk_(chunk_elements), whole_(whole_leaf_elements) {
    if (chunk_ == 0) throw config_error("tree algorithms: the chunk length must be positive");
  }

  /// Adds one leaf of `n` elements; `ptrs[k]` is position k's first element and `sizes[k]` its
  /// element size (ignored for null pointers: broadcast scalars). Zero-length leaves add nothing.
  /// With `launch_whole`, a leaf of `whole_leaf_elements` or more is launched on its own instead
  /// of being split into chunks.
  template <class Types>
  void add_leaf(const std::array<void*, K>& ptrs, const std::array<std::size_t, K>& sizes, std::size_t n,
                typename tree_chunk_group<K>::launch_fn launch,
                typename tree_chunk_group<K>::launch_args_fn launch_args = nullptr,
                typename tree_whole_leaf<K>::launch_fn launch_whole = nullptr) {
    if (n == 0) return;
    if (launch_whole != nullptr && n >= whole_) {
      tree_chunk<K> c{};
      for (std::size_t k = 0; k < K; ++k) c.p[k] = ptrs[k];
      c.n = n;
      whole_leaves_.push_back({c, launch_whole});
      return;
    }
    auto& g = group_for(typeid(Types), launch, launch_args);
    for (std::size_t at = 0; at < n; at += chunk_) {
      tree_chunk<K> c{};
      for (std::size_t k = 0; k < K; ++k) {
        c.p[k] = ptrs[k] == nullptr ? nullptr : static_cast<std::byte*>(ptrs[k]) + at * sizes[k];
      }
      c.n = std::min(chunk_, n - at);
      g.chunks.push_back(c);
    }
  }

  [[nodiscard]] const std::vector<tree_chunk_group<K>>& groups() const noexcept { return groups_; }
  /// The leaves launched on their own, in tree order.
  [[nodiscard]] const std::vector<tree_whole_leaf<K>>& whole_leaves() const noexcept { return whole_leaves_; }
  [[nodiscard]] std::size_t chunk_count() const noexcept {
    std::size_t n = 0;
    for (const auto& g : groups_) n += g.chunks.size();
    return n;
  }
  /// True when every group can launch with its chunks in the kernel's parameters.
  [[nodiscard]] bool fits_in_args(std::size_t capacity) const noexcept {
    for (const auto& g : groups_) {
      if (g.launch_args == nullptr || g.chunks.size() > capacity) return false;
    }
    return !groups_.empty();
  }
  /// The groups' chunks one after the other: what goes to the device.
  [[nodiscard]] std::vector<tree_chunk<K>> table() const {
    std::vector<tree_chunk<K>> t;
    t.reserve(chunk_count());
    for (const auto& g : groups_) t.insert(t.end(), g.chunks.begin(), g.chunks.end());
    return t;
  }

 private:
  tree_chunk_group<K>& group_for(const std::type_info& types, typename tree_chunk_group<K>::launch_fn launch,
                                 typename tree_chunk_group<K>::launch_args_fn launch_args) {
    for (auto& g : groups_) {
      if (*g.types == types) return g;
    }
    groups_.push_back({&types, {}, launch, launch_args});
    return groups_.back();
  }

  std::size_t chunk_;
  std::size_t whole_;
  std::vector<tree_chunk_group<K>> groups_;
  std::vector<tree_whole_leaf<K>> whole_leaves_;
};

#if DEVICEKIT_HAS_CUDA

/// Stages `table_bytes` at `table` to device `dev` and takes `extra_bytes` more of scratch
/// there, then calls `launch(d_table, d_extra)` (which queues kernels on `s` and returns their
/// error). As batched_copy_plumbing (transfer/detail/copy.hpp) does: the table goes up through
/// pinned staging (staging_memory()), freed in stream order after the upload, and the device
/// memory is one scratch block of the device's devicekit pool (default_memory, counted in
/// scratch_memory_stats), given back in stream order after the kernels: nothing waits on the
/// host, and the memory is cached instead of going back to the driver at every synchronisation
/// (CUDA runtime API, cudaMemPoolAttrReleaseThreshold). Runs on `dev` whatever is current.
template <class Launch>
void tree_launch_plumbing(device dev, native_stream_handle s, const void* table, std::size_t table_bytes,
                          std::size_t extra_bytes, Launch&& launch) {
  scoped_device on(dev.ordinal());
  const std::size_t table_span = (table_bytes + 255) / 256 * 256;
  device_memory& staging = staging_memory();
  std::byte* host = nullptr;
  if (table_bytes != 0) {
    host = static_cast<std::byte*>(staging.allocate(table_bytes));
    note_host_access(host, table_bytes, true);
    std::memcpy(host, table, table_bytes);
  }
  std::optional<scratch_block> scratch;
  try {
    scratch.emplace(dev, std::max<std::size_t>(table_span + extra_bytes, 256), s);
  } catch (...) {
    if (host != nullptr) staging.deallocate(host, table_bytes);
    throw;
  }
  auto* d = static_cast<std::byte*>(scratch->get());
  if (host != nullptr) {
    const cudaError_t up = cudaMemcpyAsync(d, host, table_bytes, cudaMemcpyHostToDevice, s);
    if (up != cudaSuccess) {
      staging.deallocate(host, table_bytes);
      scratch->release(s);
      DEVICEKIT_CUDA_CHECK(up);
    }
    try {
      if (const capture_state c = capture_of(s); c.active) {
        // Captured, the upload reads `host` at every launch of the graph: the table stays, as it
        // is, for as long as the graph (a staging block freed here would be reused meanwhile).
        graph_memory_ledger::instance().keep_alive(c.id, std::shared_ptr<void>(host, [&staging, table_bytes](void* p) {
                                                     staging.deallocate(p, table_bytes);
                                                   }));
      } else {
        staging.deallocate_async(host, table_bytes, 256, s);  // after the upload, in stream order
      }
    } catch (...) {
      (void)cudaStreamSynchronize(s);  // the upload still reads the staging
      staging.deallocate(host, table_bytes);
      scratch->release(s);
      throw;
    }
    tree_counters().tables.fetch_add(1, std::memory_order_relaxed);
    tree_counters().table_bytes.fetch_add(table_bytes, std::memory_order_relaxed);
  }
  cudaError_t run = cudaSuccess;
  try {
    run = launch(d, d + table_span);
  } catch (...) {
    scratch->release(s);
    throw;
  }
  scratch->release(s);  // after the kernels, in stream order
  DEVICEKIT_CUDA_CHECK(run);
}

#endif  // DEVICEKIT_HAS_CUDA

}  // namespace devicekit::detail
