// Copies and sets: cudaMemcpy(Async), cudaMemcpyPeerAsync, cudaMemcpyBatchAsync, cudaMemset(Async).
// Locking: each call holds the state's mutex (SIM_ENTER); a queued copy takes it only to release
// its pinned ranges. Copies are queued in stream order with the staging and waits CUDA documents.
#include "capture.hpp"
#include "entry.hpp"
#include "memory_model.hpp"
#include "race_detector.hpp"
#include "scheduler.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace devicekit::cuda_sim::detail {
namespace {

/// Counts one accepted copy by direction (copy_counters in control.hpp).
void count_copy(state& g, const allocation* d, const allocation* r) {
  const bool dst_device = d != nullptr && d->kind == mem_kind::device;
  const bool src_device = r != nullptr && r->kind == mem_kind::device;
  if (src_device && dst_device) {
    ++(d->device == r->device ? g.copies.device_to_device : g.copies.peer);
  } else if (src_device) {
    ++g.copies.device_to_host;
  } else if (dst_device) {
    ++g.copies.host_to_device;
  } else {
    ++g.copies.host_to_host;
  }
}

/// Adds the pinned range `a` (when it is one) to `uses`, once: a copy that reads or writes it is
/// counted on it until it has run, so that freeing or unregistering it first is caught.
void note_pinned_use(allocation* a, std::vector<std::shared_ptr<host_uses>>& uses) {
  if (!pinned(a)) return;
  if (!a->uses) a->uses = std::make_shared<host_uses>();
  if (std::find(uses.begin(), uses.end(), a->uses) == uses.end()) uses.push_back(a->uses);
}

/// A queued copy is done with the pinned ranges it used: the last copy of a range whose
/// cudaFreeHost came first frees it (see host_uses).
void release_host_uses(const std::vector<std::shared_ptr<host_uses>>& uses) {
  if (uses.empty()) return;
  std::lock_guard ulk(global().m);
  for (const auto& u : uses) {
    if (--u->pending == 0 && u->free_when_done != nullptr) {
      std::free(u->free_when_done);
      u->free_when_done = nullptr;
    }
  }
}

/// Copies by direction, for the text of a race: what the copy does to the end named.
const char* copy_end(const allocation* d, const allocation* r, bool source) {
  const bool dst_device = d != nullptr && d->kind == mem_kind::device;
  const bool src_device = r != nullptr && r->kind == mem_kind::device;
  if (src_device && dst_device)
    return d->device == r->device
               ? (source ? "source of a device-to-device copy" : "destination of a device-to-device copy")
               : (source ? "source of a peer copy" : "destination of a peer copy");
  if (src_device) return source ? "source of a device-to-host copy" : "destination of a device-to-host copy";
  if (dst_device) return source ? "source of a host-to-device copy" : "destination of a host-to-device copy";
  return source ? "source of a host-to-host copy" : "destination of a host-to-host copy";
}

/// One copy, queued on `s`. Pageable host sources are copied to staging at the call; a pageable
/// host destination makes the call wait for the copy ("API synchronization behavior",
/// cudaMemcpyAsync).
cudaError_t copy(state& g, std::unique_lock<std::mutex>& lk, void* dst, const void* src, std::size_t n, stream_obj* s,
                 const char* api) {
  if (cudaError_t e = capture_use(g, s); e != cudaSuccess) return e;
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  allocation* d = nullptr;
  allocation* r = nullptr;
  if (cudaError_t e = check_range(g, dst, n, api, d); e != cudaSuccess) return e;
  if (cudaError_t e = check_range(g, src, n, api, r); e != cudaSuccess) return e;
  const bool dst_device = d != nullptr && d->kind == mem_kind::device;
  const bool src_device = r != nullptr && r->kind == mem_kind::device;
  count_copy(g, d, r);
  // The race detector's view: the source is read and the destination written in stream order
  // (untracked pageable ends are left out by the detector).
  const std::vector<planned_access> accesses{{src, n, false, copy_end(d, r, true)},
                                             {dst, n, true, copy_end(d, r, false)}};
  if (s->capture != nullptr) {
    // A captured copy runs at each launch of its graph: pageable host memory is read or written
    // then, not staged now, and the call never waits. Pinned ranges are not counted per launch
    // (host_uses): cudaFreeHost waits for all work anyway unless a counted copy is pending, so a
    // launch still using a range is waited for rather than reported.
    enqueue(
        g, s, [dst, src, n] { std::memmove(dst, src, n); }, {}, api, accesses);
    return cudaSuccess;
  }
  if (!src_device && !pinned(r) && dst_device) {
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + n);
    enqueue(
        g, s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); }, {}, api, accesses);
    return cudaSuccess;
  }
  // Pinned host memory is read or written when the stream reaches the copy: the copy is counted
  // on its range until then, so that freeing or unregistering the range first is caught.
  std::vector<std::shared_ptr<host_uses>> uses;
  for (allocation* a : {d, r}) note_pinned_use(a, uses);
  for (const auto& u : uses) ++u->pending;
  const std::uint64_t done = enqueue(
      g, s,
      [dst, src, n, uses = std::move(uses)] {
        std::memmove(dst, src, n);
        release_host_uses(uses);
      },
      {}, api, accesses);
  if (src_device && !dst_device && !pinned(d)) {
    host_joins_stream(g, s);  // the call returns once the copy is complete
    wait_until(g, lk, s, done);
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace devicekit::cuda_sim::detail

using namespace devicekit::cuda_sim::detail;

extern "C" {

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind /*kind*/,
                                      cudaStream_t stream) {
  SIM_ENTER_STREAM("cudaMemcpyAsync", stream);
  return fail(copy(g, e_.lk, dst, src, count, s, "cudaMemcpyAsync"));
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind /*kind*/) {
  SIM_ENTER_STREAM("cudaMemcpy", nullptr);
  if (cudaError_t c = copy(g, e_.lk, dst, src, count, s, "cudaMemcpy"); c != cudaSuccess) return fail(c);
  host_joins_stream(g, s);
  wait_until(g, e_.lk, s, s->submitted);  // synchronous with respect to the host
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                          cudaStream_t stream) {
  SIM_ENTER("cudaMemcpyPeerAsync");
  if (!valid_device(g, dstDevice) || !valid_device(g, srcDevice)) return fail(cudaErrorInvalidDevice);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaMemcpyPeerAsync", err);
  if (s == nullptr) return fail(err);
  const allocation* d = find_allocation(g, dst);
  const allocation* r = find_allocation(g, src);
  if ((d != nullptr && d->kind == mem_kind::device && d->device != dstDevice) ||
      (r != nullptr && r->kind == mem_kind::device && r->device != srcDevice)) {
    violation(g, "cudaMemcpyPeerAsync", "a pointer that does not belong to the device named with it");
    return fail(cudaErrorInvalidValue);
  }
  return fail(copy(g, e_.lk, dst, src, count, s, "cudaMemcpyPeerAsync"));
}

#if CUDART_VERSION >= 12080
/// cudaMemcpyBatchAsync (CUDA 12.8; CUDA 13 dropped its failIdx argument), by the rules of its
/// documentation: the legacy NULL stream is refused; `attrsIdxs` starts at 0, increases, stays
/// below `count`, and `numAttrs` is at most `count`; every copy's attributes need a valid
/// srcAccessOrder, else cudaErrorInvalidValue. Each copy is checked as cudaMemcpyAsync checks
/// one (bad pointers are violations), all before anything is queued, so a refused batch moves no
/// byte. The batch runs in stream order as one operation; copies that depend on each other in
/// one batch are undefined ("no ordering guarantees for copies within a batch"): a violation.
/// Sources read "during the API call" (cudaMemcpySrcAccessOrderDuringApiCall) and pageable ones
/// are read at the call; a pageable destination makes the call wait, as with cudaMemcpyAsync.
cudaError_t CUDARTAPI cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes,
                                           size_t count, struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                           size_t numAttrs,
#  if CUDART_VERSION < 13000
                                           size_t* failIdx,
#  endif
                                           cudaStream_t stream) {
#  if CUDART_VERSION < 13000
  if (failIdx != nullptr) *failIdx = SIZE_MAX;  // "SIZE_MAX if the error doesn't pertain to any specific copy"
  auto failed_at = [&](std::size_t i) {
    if (failIdx != nullptr) *failIdx = i;
  };
#  else
  auto failed_at = [](std::size_t) {};
#  endif
  constexpr const char* api = "cudaMemcpyBatchAsync";
  SIM_ENTER("cudaMemcpyBatchAsync");
  if (stream == nullptr || stream == cudaStreamLegacy)
    return fail(cudaErrorInvalidValue);  // "Must not be legacy NULL stream"
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      attrsIdxs == nullptr || numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0) {
    return fail(cudaErrorInvalidValue);
  }
  for (std::size_t k = 0; k < numAttrs; ++k) {
    if ((k > 0 && attrsIdxs[k] <= attrsIdxs[k - 1]) || attrsIdxs[k] >= count) return fail(cudaErrorInvalidValue);
    const auto order = attrs[k].srcAccessOrder;
    if (order != cudaMemcpySrcAccessOrderStream && order != cudaMemcpySrcAccessOrderDuringApiCall &&
        order != cudaMemcpySrcAccessOrderAny) {
      return fail(cudaErrorInvalidValue);
    }
    if ((attrs[k].flags & ~static_cast<unsigned>(cudaMemcpyFlagPreferOverlapWithCompute)) != 0) {
      return fail(cudaErrorInvalidValue);
    }
  }
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, api, err);
  if (s == nullptr) return fail(err);
  if (cudaError_t c = capture_use(g, s); c != cudaSuccess) return fail(c);
  // Batched copies are not among the operations stream capture records: refused with
  // cudaErrorStreamCaptureUnsupported, which invalidates the capture ("Invalidation").
  if (s->capture != nullptr) {
    invalidate(s->capture);
    return fail(cudaErrorStreamCaptureUnsupported);
  }

  struct one_copy {
    void* dst;
    const void* src;
    std::size_t n;
    std::shared_ptr<std::vector<unsigned char>> staged;  ///< the source as read at the call
  };
  std::vector<one_copy> batch;
  std::vector<allocation*> dst_alloc;
  std::vector<allocation*> src_alloc;
  bool wait_for_it = false;
  std::vector<planned_access> accesses;  // for the race detector
  std::size_t attr = 0;
  for (std::size_t i = 0; i < count; ++i) {
    while (attr + 1 < numAttrs && attrsIdxs[attr + 1] <= i) ++attr;
    if (sizes[i] == 0) continue;
    if (dsts[i] == nullptr || srcs[i] == nullptr) {
      failed_at(i);
      return fail(cudaErrorInvalidValue);
    }
    allocation* d = nullptr;
    allocation* r = nullptr;
    if (cudaError_t e = check_range(g, dsts[i], sizes[i], api, d); e != cudaSuccess) {
      failed_at(i);
      return fail(e);
    }
    if (cudaError_t e = check_range(g, srcs[i], sizes[i], api, r); e != cudaSuccess) {
      failed_at(i);
      return fail(e);
    }
    const bool src_device = r != nullptr && r->kind == mem_kind::device;
    const bool dst_device = d != nullptr && d->kind == mem_kind::device;
    one_copy c{dsts[i], srcs[i], sizes[i], nullptr};
    if (attrs[attr].srcAccessOrder == cudaMemcpySrcAccessOrderDuringApiCall || (!src_device && !pinned(r))) {
      c.staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(srcs[i]),
                                                              static_cast<const unsigned char*>(srcs[i]) + sizes[i]);
    }
    if (!dst_device && !pinned(d)) wait_for_it = true;
    // A source staged at the call is read by the calling thread then, the rest in stream order.
    accesses.push_back({srcs[i], sizes[i], false, copy_end(d, r, true), c.staged != nullptr});
    accesses.push_back({dsts[i], sizes[i], true, copy_end(d, r, false)});
    batch.push_back(std::move(c));
    dst_alloc.push_back(d);
    src_alloc.push_back(r);
  }
  // Copies of one batch run in no particular order: a destination that overlaps another copy's
  // source or destination makes the result undefined. One sweep over the ranges sorted by start.
  struct range {
    std::uintptr_t begin;
    std::uintptr_t end;
    bool is_dst;
  };
  std::vector<range> ranges;
  for (const auto& c : batch) {
    ranges.push_back({reinterpret_cast<std::uintptr_t>(c.dst), reinterpret_cast<std::uintptr_t>(c.dst) + c.n, true});
    ranges.push_back({reinterpret_cast<std::uintptr_t>(c.src), reinterpret_cast<std::uintptr_t>(c.src) + c.n, false});
  }
  std::sort(ranges.begin(), ranges.end(), [](const range& a, const range& b) { return a.begin < b.begin; });
  std::uintptr_t any_end = 0;
  std::uintptr_t dst_end = 0;
  for (const auto& r : ranges) {
    if ((r.is_dst ? any_end : dst_end) > r.begin) {
      violation(g, api,
                "copies of one batch that overlap (a destination written by one and read or written by another)");
      return fail(cudaErrorInvalidValue);
    }
    any_end = std::max(any_end, r.end);
    if (r.is_dst) dst_end = std::max(dst_end, r.end);
  }
  std::vector<std::shared_ptr<host_uses>> uses;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    count_copy(g, dst_alloc[i], src_alloc[i]);
    for (allocation* a : {dst_alloc[i], src_alloc[i]}) note_pinned_use(a, uses);
  }
  ++g.copies.batch_calls;
  g.copies.batched_copies += batch.size();
  if (batch.empty()) return cudaSuccess;
  for (const auto& u : uses) ++u->pending;
  const std::uint64_t done = enqueue(
      g, s,
      [batch = std::move(batch), uses = std::move(uses)] {
        for (const auto& c : batch) std::memmove(c.dst, c.staged ? c.staged->data() : c.src, c.n);
        release_host_uses(uses);
      },
      {}, api, accesses);
  if (wait_for_it) {
    host_joins_stream(g, s);
    wait_until(g, e_.lk, s, done);
  }
  return cudaSuccess;
}
#endif

cudaError_t CUDARTAPI cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  SIM_ENTER_STREAM("cudaMemsetAsync", stream);
  if (cudaError_t c = capture_use(g, s); c != cudaSuccess) return fail(c);
  allocation* a = nullptr;
  if (cudaError_t c = check_range(g, devPtr, count, "cudaMemsetAsync", a); c != cudaSuccess) return fail(c);
  if (a == nullptr || a->kind != mem_kind::device) return fail(cudaErrorInvalidValue);
  enqueue(g, s, [devPtr, value, count] { std::memset(devPtr, value, count); }, {}, "cudaMemsetAsync",
          {{devPtr, count, true, "memset"}});
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count) {
  // Asynchronous with respect to the host for device memory ("API synchronization behavior",
  // memset), on the legacy default stream.
  return cudaMemsetAsync(devPtr, value, count, nullptr);
}
}  // extern "C"
