#pragma once
/// \file
/// The machinery of the NCCL communicator (distribute/nccl.hpp): the NCCL datatype of an element
/// type, one local rank's state (nccl_participant), and nccl_transport, the NCCL calls of
/// collective_backend with their error handling, waits, timeout and abort. Included by nccl.hpp;
/// available with DEVICEKIT_HAS_NCCL.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_NCCL
#  include <devicekit/core/capture.hpp>
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/element_type.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/core/runtime.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/distribute/detail/nccl_watchdog.hpp>
#  include <devicekit/distribute/detail/pack.hpp>
#  include <devicekit/distribute/errors.hpp>
#  include <devicekit/distribute/options.hpp>
#  include <devicekit/memory/clients.hpp>
#  include <devicekit/memory/device_memory.hpp>
#  include <devicekit/transfer/detail/copy.hpp>

#  include <nccl.h>

#  include <algorithm>
#  include <chrono>
#  include <cstddef>
#  include <cstdint>
#  include <memory>
#  include <new>
#  include <span>
#  include <string>
#  include <string_view>
#  include <thread>
#  include <utility>
#  include <vector>

namespace devicekit {

/// The NCCL datatype of an element type, or false for the 16-bit integers, which NCCL lacks, and
/// for fp8 before NCCL 2.24 (which added ncclFloat8e4m3 and ncclFloat8e5m2; NCCL computes their
/// reductions in half precision on sm_90 and later).
[[nodiscard]] inline bool nccl_datatype(element_type t, ncclDataType_t& out) noexcept {
  switch (t) {
    case element_type::opaque:
    case element_type::uint8: out = ncclUint8; return true;
    case element_type::int8: out = ncclInt8; return true;
    case element_type::int32: out = ncclInt32; return true;
    case element_type::uint32: out = ncclUint32; return true;
    case element_type::int64: out = ncclInt64; return true;
    case element_type::uint64: out = ncclUint64; return true;
    case element_type::float16: out = ncclFloat16; return true;
    case element_type::bfloat16: out = ncclBfloat16; return true;
    case element_type::float32: out = ncclFloat32; return true;
    case element_type::float64: out = ncclFloat64; return true;
#  if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    case element_type::float8_e4m3fn: out = ncclFloat8e4m3; return true;
    case element_type::float8_e5m2: out = ncclFloat8e5m2; return true;
#  endif
    default: return false;
  }
}

namespace detail {

/// One local rank: its device, communicator, stream and staging buffers.
struct nccl_participant {
  device dev;
  int rank = -1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  void* scratch[3] = {nullptr, nullptr, nullptr};  // send, receive, structure exchange
  std::size_t capacity[3] = {0, 0, 0};
  bool in_graph[3] = {false, false, false};  ///< used by a captured operation: a graph may read it
  /// Staging buffers replaced while a graph may still use them: kept until the communicator goes.
  std::vector<std::pair<void*, std::size_t>> retired;
  /// The device memory NCCL took for this rank, as measured (nccl_memory): the client "nccl" of the
  /// device (memory/clients.hpp) until the communicator goes.
  std::uint64_t nccl_bytes = 0;
  std::uint64_t free_before = 0;  ///< the device's free memory at the last snapshot (0: none)
  std::uint64_t held_before = 0;  ///< what devicekit's pools held on the device then
};

/// NCCL's device memory, which NCCL has no call to report: the device's free memory drops by it
/// when a communicator is made and at the first collective of each kind (NCCL connects its peers'
/// buffers when they are first needed: NCCL_RUNTIME_CONNECT, on by default since 2.22), while
/// devicekit's own pools may grow meanwhile (pool_held_bytes), which is taken off. Another thread
/// allocating at the same moment would be counted too: the figure is what the device lost.
struct nccl_memory {
  static void snapshot(nccl_participant& q) noexcept {
    q.free_before = free_bytes(q.dev);
    q.held_before = q.free_before != 0 ? pool_held_bytes(q.dev) : 0;
  }
  /// Charges what the device lost since the snapshot to the rank's NCCL memory.
  static void charge(nccl_participant& q) noexcept {
    if (q.free_before == 0) return;
    const std::uint64_t now = free_bytes(q.dev);
    const std::uint64_t held = pool_held_bytes(q.dev);
    const std::uint64_t grown = held > q.held_before ? held - q.held_before : 0;
    const std::uint64_t lost = q.free_before > now ? q.free_before - now : 0;
    q.free_before = 0;
    if (lost <= grown || now == 0) return;
    q.nccl_bytes += lost - grown;
    device_client_ledger(q.dev, "nccl").allocated(lost - grown);
  }
  /// The communicator went: its memory is the device's again.
  static void release(nccl_participant& q) noexcept {
    if (q.nccl_bytes == 0) return;
    device_client_ledger(q.dev, "nccl").freed(q.nccl_bytes);
    q.nccl_bytes = 0;
  }
  static std::uint64_t free_bytes(device dev) noexcept {
    try {
      scoped_device on(dev.ordinal());
      std::size_t free = 0;
      std::size_t total = 0;
      if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
      }
      return free;
    } catch (...) {
      return 0;
    }
  }
};

/// Everything of the NCCL backend but its staging buffers (see nccl_backend in
/// distribute/nccl.hpp): the local ranks, the NCCL calls and their error handling, the waits
/// under the timeout, and the abort.
class nccl_transport {
 public:
  /// Takes communicators already initialised, one per local device (ranks given).
  void adopt(std::vector<nccl_participant> parts, int size) {
    parts_ = std::move(parts);
    size_ = size;
    for (auto& p : parts_) {
      scoped_device on(p.dev.ordinal());
      // Blocking with respect to the legacy default stream, so that work the caller queued
      // there (the usual case) is complete before a collective reads the leaves.
      DEVICEKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&p.stream, cudaStreamDefault));
      p.own_stream = true;
    }
    note_cuda_runtime_used();
  }

  /// Starts an operation: refuses one on an aborted communicator, and notes whether it is
  /// captured. Captured means every local rank's stream is capturing (CUDA Graphs, stream
  /// capture; NCCL docs, "Using NCCL with CUDA Graphs"): the operation then queues its work and
  /// returns without the host waits (see captured()). Some local ranks capturing and others not
  /// is refused: the captured ranks' collectives would run only at the graph's launches, and the
  /// eager ranks' collectives now, so neither would meet its peers'.
  void set_operation(std::string_view op) {
    if (aborted_) {
      throw config_error("nccl_communicator: this communicator was aborted (" + abort_reason_ + "); create a new one");
    }
    std::string capturing, eager;
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      const nccl_participant& q = parts_[p];
      std::string& list = q.stream != nullptr && capture_of(q.stream).active ? capturing : eager;
      list.append(list.empty() ? "" : ",").append(std::to_string(p));
    }
    if (!capturing.empty() && !eager.empty()) {
      refuse_in_capture("nccl_communicator: " + std::string(op),
                        "the streams of local rank(s) " + capturing +
                            " are being captured and those of local rank(s) " + eager +
                            " are not (a captured collective runs at each launch of its graph, an eager one "
                            "now: they would never meet)",
                        "capture the streams of every local rank together (set_stream, then a capture on each "
                        "stream, or one capture that the other streams join through events), or none");
    }
    captured_ = !capturing.empty();
    op_ = op;
    issued_ = 0;
    // The first eager operation of each kind is measured (nccl_memory): NCCL may connect buffers.
    measuring_ = !captured_ && std::find(measured_.begin(), measured_.end(), op) == measured_.end();
    if (measuring_) {
      measured_.emplace_back(op);
      for (auto& q : parts_) nccl_memory::snapshot(q);
    }
  }
  /// Whether the current operation is being captured: its work is queued on the capturing
  /// streams and nothing waits for it on the host (finish() returns at once; no timeout, no
  /// polling: after launches of the graph, check_async_errors() polls NCCL's errors).
  [[nodiscard]] bool captured() const noexcept { return captured_; }
  void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  [[nodiscard]] nccl_participant& part(std::size_t p) { return parts_.at(p); }
  [[nodiscard]] const nccl_participant& part(std::size_t p) const { return parts_.at(p); }
  [[nodiscard]] bool aborted() const noexcept { return aborted_; }
  [[nodiscard]] const std::string& abort_reason() const noexcept { return abort_reason_; }

  void set_stream(std::size_t p, cudaStream_t s) {
    auto& q = part(p);
    if (q.own_stream && q.stream != nullptr && cuda_calls_allowed()) {
      (void)cudaStreamSynchronize(q.stream);
      (void)cudaStreamDestroy(q.stream);
    }
    q.stream = s;
    q.own_stream = false;
  }

  // --- the backend interface ---
  [[nodiscard]] std::size_t participants() const noexcept { return parts_.size(); }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int rank(std::size_t p) const { return part(p).rank; }
  [[nodiscard]] static std::string_view name() noexcept { return "NCCL"; }
  [[nodiscard]] static bool can_reduce(element_type t) noexcept {
    ncclDataType_t d{};
    return t != element_type::opaque && nccl_datatype(t, d);
  }
  /// NCCL moves the memory of each local rank's device.
  [[nodiscard]] bool accepts(device d, std::size_t p) const { return d == part(p).dev; }
  /// Where local rank p's collectives run, for a memory trace's transfer records.
  [[nodiscard]] device device_of(std::size_t p) const { return part(p).dev; }
  [[nodiscard]] const void* stream_of(std::size_t p) const { return part(p).stream; }
  [[nodiscard]] std::string memory_description(std::size_t p) const {
    return "NCCL local rank " + std::to_string(p) + " cannot use: it works on " + part(p).dev.str();
  }
  void group_begin() {
    nccl_check(ncclGroupStart(), "ncclGroupStart", 0);
    in_group_ = true;
  }
  void group_end() {
    in_group_ = false;
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", 0);
  }
  void copy(std::size_t p, void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, part(p).stream), "cudaMemcpyAsync", p);
  }
  /// A bucket's pack or unpack, every leaf of it, as one list of device-to-device runs on the
  /// local rank's stream through the copy engine's same-device path (transfer/detail/copy.hpp:
  /// copy_same_device): one batched launch (CUB's DeviceMemcpy::Batched when a .cu file of the
  /// program includes transfer/batched_copy.cuh) instead of a cudaMemcpyAsync per leaf, whose
  /// few microseconds of launch each would dominate a bucket of many small leaves (the reason
  /// PyTorch DDP flattens a bucket's gradients with one kernel).
  void copy_batch(std::size_t p, std::span<const copy_span> runs) {
    if (runs.empty()) return;
    auto& q = part(p);
    std::vector<copy_run> list;
    list.reserve(runs.size());
    for (const auto& r : runs) {
      list.push_back({static_cast<const std::byte*>(r.src), q.dev, static_cast<std::byte*>(r.dst), r.bytes});
    }
    try {
      scoped_device on(q.dev.ordinal());
      copy_same_device(std::span<const copy_run>(list), q.stream);
    } catch (const cuda_error& e) {
      throw communication_error("NCCL", op_, e.call(), q.rank, size_, e.code(), e.what());
    }
  }
  void broadcast(std::size_t p, void* buf, std::size_t count, element_type t, int root) {
    auto& q = part(p);
    issue_check(ncclBroadcast(buf, buf, count, dtype(t), root, q.comm, q.stream), "ncclBroadcast", p);
  }
  void all_reduce(std::size_t p, const void* s, void* r, std::size_t count, element_type t, reduce_op op) {
    auto& q = part(p);
    issue_check(ncclAllReduce(s, r, count, dtype(t), nccl_op(op), q.comm, q.stream), "ncclAllReduce", p);
  }
  void all_gather(std::size_t p, const void* s, void* r, std::size_t count, element_type t) {
    auto& q = part(p);
    issue_check(ncclAllGather(s, r, count, dtype(t), q.comm, q.stream), "ncclAllGather", p);
  }
  void reduce_scatter(std::size_t p, const void* s, void* r, std::size_t recv_count, element_type t, reduce_op op) {
    auto& q = part(p);
    issue_check(ncclReduceScatter(s, r, recv_count, dtype(t), nccl_op(op), q.comm, q.stream), "ncclReduceScatter", p);
  }
  /// Unequal sizes: the root sends each rank its bytes (ncclSend), every rank receives
  /// (ncclRecv); collectives.hpp issues these inside one group.
  void scatter(std::size_t p, const void* s, const std::size_t* bytes, const std::size_t* displs, void* r,
               std::size_t recv_bytes, int root) {
    auto& q = part(p);
    if (q.rank == root) {
      for (int dst = 0; dst < size_; ++dst) {
        const auto d = static_cast<std::size_t>(dst);
        if (bytes[d] == 0) continue;
        if (dst == root) {
          copy(p, r, byte_at(s, displs[d]), bytes[d]);
        } else {
          issue_check(ncclSend(byte_at(s, displs[d]), bytes[d], ncclUint8, dst, q.comm, q.stream), "ncclSend", p);
        }
      }
    } else if (recv_bytes > 0) {
      issue_check(ncclRecv(r, recv_bytes, ncclUint8, root, q.comm, q.stream), "ncclRecv", p);
    }
  }
  /// Waits for every local rank's stream under the watchdog; a captured operation returns at once
  /// (the graph's launches run its work).
  void finish(std::string_view operation) {
    if (captured_) return;
    wait_streams(0, participants(), operation);
    if (measuring_) {
      measuring_ = false;
      for (auto& q : parts_) nccl_memory::charge(q);
    }
  }

  /// Waits for local rank p's stream; aborts and throws on an asynchronous error or the timeout.
  void wait(std::size_t p, std::string_view operation) { wait_streams(p, p + 1, operation); }

  /// Waits for the streams of local ranks [first, last) in cudaStreamSynchronize, as a
  /// hand-written program does, while the watchdog (nccl_watchdog.hpp) watches every local
  /// communicator: an asynchronous error on any of them (the rank waited for may be stuck on a
  /// peer whose own rank failed), or the timeout, aborts them all, which ends the wait, and then
  /// throws here. Without a watchdog (its thread could not be started) the wait polls instead.
  void wait_streams(std::size_t first, std::size_t last, std::string_view operation) {
    watched_.clear();
    bool watched = false;
    try {
      for (const auto& q : parts_) {
        if (q.comm != nullptr) watched_.push_back(q.comm);
      }
      if (!watchdog_) watchdog_ = std::make_unique<nccl_watchdog>();
      watched = watchdog_->watch(watched_, timeout_);
    } catch (const std::bad_alloc&) {
      // No memory for the watchdog: the polling wait below needs none.
    }
    if (!watched) {
      poll_streams(first, last, operation);
      return;
    }
    cudaError_t failed = cudaSuccess;
    std::size_t at = first;
    for (; at < last; ++at) {
      failed = cudaStreamSynchronize(part(at).stream);
      if (failed != cudaSuccess) break;
    }
    const nccl_watchdog::verdict found = watchdog_->done();
    if (found.what == nccl_watchdog::verdict::kind::async_error) {
      const int rank = rank_of_watched(found.index);
      forget_comms("asynchronous error: " + found.text);
      throw communication_error("NCCL", operation, "ncclCommGetAsyncError", rank, size_, static_cast<int>(found.code),
                                found.text);
    }
    if (found.what == nccl_watchdog::verdict::kind::timed_out) {
      forget_comms("timeout in " + std::string(operation));
      throw_timed_out(first, operation);
    }
    if (failed != cudaSuccess) throw_wait_failed(at, failed, operation);
  }

  /// The wait without a watchdog thread: each stream queried (cudaStreamQuery) until done, every
  /// local communicator asked for its asynchronous error and the deadline checked between queries,
  /// at intervals growing from 1 us to 1 ms. Slower to notice the end of a short collective than
  /// the blocking wait, and so used only when the process could not start the watchdog's thread.
  void poll_streams(std::size_t first, std::size_t last, std::string_view operation) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (std::size_t at = first; at < last; ++at) {
      std::chrono::microseconds interval{1};
      for (;;) {
        const cudaError_t q = cudaStreamQuery(part(at).stream);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) throw_wait_failed(at, q, operation);
        for (std::size_t p = 0; p < parts_.size(); ++p) {
          if (parts_[p].comm != nullptr) poll(p, operation);
        }
        if (timeout_.count() > 0 && std::chrono::steady_clock::now() >= deadline) {
          abort_all("timeout in " + std::string(operation));
          throw_timed_out(first, operation);
        }
        std::this_thread::sleep_for(interval);
        interval = std::min<std::chrono::microseconds>(interval * 2, std::chrono::milliseconds(1));
      }
    }
  }

  /// communication_error for a wait past the timeout (the communicators are already aborted).
  [[noreturn]] void throw_timed_out(std::size_t first, std::string_view operation) const {
    const std::string detail = "timed out after " + std::to_string(timeout_.count()) +
                               " ms: a rank did not take part (a dead peer, or ranks calling different "
                               "collectives); the communicator was aborted";
    throw communication_error("NCCL", operation, "wait", part(first).rank, size_, static_cast<int>(ncclInternalError),
                              detail);
  }

  /// Aborts, then communication_error for a CUDA error from the wait on local rank `at`'s stream.
  [[noreturn]] void throw_wait_failed(std::size_t at, cudaError_t failed, std::string_view operation) {
    (void)cudaGetLastError();
    const std::string detail = std::string(cudaGetErrorName(failed)) + ": " + cudaGetErrorString(failed);
    abort_all("CUDA error while waiting: " + detail);
    throw communication_error("NCCL", operation, "cudaStreamSynchronize", part(at).rank, size_,
                              static_cast<int>(failed), detail);
  }

  /// Throws (after aborting) when NCCL reports an asynchronous error on local rank p.
  void poll(std::size_t p, std::string_view operation) {
    auto& q = part(p);
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(q.comm, &async);
    const ncclResult_t bad = r != ncclSuccess ? r : async;
    if (bad == ncclSuccess || bad == ncclInProgress) return;
    const std::string detail = describe(bad, q.comm);
    abort_all("asynchronous error: " + detail);
    throw communication_error("NCCL", operation, "ncclCommGetAsyncError", q.rank, size_, static_cast<int>(bad), detail);
  }

  /// Aborts every local communicator (ncclCommAbort): pending work is dropped, later calls throw.
  void abort_all(std::string reason) noexcept {
    if (aborted_) return;
    for (auto& q : parts_) {
      if (q.comm != nullptr) (void)ncclCommAbort(q.comm);
    }
    forget_comms(std::move(reason));
  }

  /// After the communicators were aborted (here, or by the watchdog): later calls throw, and the
  /// memory NCCL held is the device's again (ncclCommAbort frees an aborted communicator's
  /// resources).
  void forget_comms(std::string reason) noexcept {
    aborted_ = true;
    abort_reason_ = std::move(reason);
    for (auto& q : parts_) {
      q.comm = nullptr;
      nccl_memory::release(q);
    }
  }

  /// The rank of the k-th communicator the watchdog watched (those not null, in local order).
  [[nodiscard]] int rank_of_watched(std::size_t k) const {
    for (const auto& q : parts_) {
      if (q.comm != nullptr && k-- == 0) return q.rank;
    }
    return -1;
  }

  /// nccl_check for a call that moves data: once one has been issued in an operation, a failure
  /// of a later one leaves the peers waiting for what will never come, so it aborts (below).
  void issue_check(ncclResult_t r, std::string_view call, std::size_t p) {
    nccl_check(r, call, p);
    ++issued_;
  }
  void nccl_check(ncclResult_t r, std::string_view call, std::size_t p) {
    if (r == ncclSuccess) return;
    if (in_group_) {
      in_group_ = false;
      (void)ncclGroupEnd();  // leave no group open behind the exception
    }
    const auto& q = part(p);
    const std::string detail = describe(r, q.comm);
    const int rank = q.rank;
    // Argument errors leave the communicator usable, unless part of this operation has already
    // gone to the peers (issued_): they would wait for the rest for ever. Anything else may not.
    if ((r != ncclInvalidArgument && r != ncclInvalidUsage) || issued_ > 0) {
      abort_all(std::string(call) + " failed: " + detail);
    }
    throw communication_error("NCCL", op_, call, rank, size_, static_cast<int>(r), detail);
  }
  void cuda_check(cudaError_t e, std::string_view call, std::size_t p) {
    if (e == cudaSuccess) return;
    (void)cudaGetLastError();
    throw communication_error("NCCL", op_, call, part(p).rank, size_, static_cast<int>(e),
                              std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
  }

  static std::string describe(ncclResult_t r, ncclComm_t comm) { return nccl_error_text(r, comm); }

 protected:
  static ncclDataType_t dtype(element_type t) {
    ncclDataType_t d{};
    if (!nccl_datatype(t, d)) {
      throw config_error("NCCL has no " + std::string(to_string(t)) + " type; such leaves can only be moved as bytes");
    }
    return d;
  }
  static ncclRedOp_t nccl_op(reduce_op op) noexcept {
    switch (op) {
      case reduce_op::average: return ncclAvg;
      case reduce_op::min: return ncclMin;
      case reduce_op::max: return ncclMax;
      case reduce_op::product: return ncclProd;
      default: return ncclSum;
    }
  }
  /// Exchanges the state with `o` (the move of nccl_backend).
  void swap_state(nccl_transport& o) noexcept {
    std::swap(parts_, o.parts_);
    std::swap(size_, o.size_);
    std::swap(op_, o.op_);
    std::swap(timeout_, o.timeout_);
    std::swap(aborted_, o.aborted_);
    std::swap(abort_reason_, o.abort_reason_);
    std::swap(in_group_, o.in_group_);
    std::swap(captured_, o.captured_);
    std::swap(measured_, o.measured_);
    std::swap(measuring_, o.measuring_);
    std::swap(watchdog_, o.watchdog_);
  }
  std::vector<nccl_participant> parts_;
  int size_ = 0;
  std::string_view op_ = "setup";
  std::size_t issued_ = 0;  ///< data-moving NCCL calls issued in the current operation
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};  // PyTorch's default watchdog
  bool aborted_ = false;
  std::string abort_reason_;
  bool in_group_ = false;
  bool captured_ = false;                    ///< the current operation is captured (set_operation)
  std::vector<std::string> measured_;        ///< operations whose first run measured NCCL's memory
  bool measuring_ = false;                   ///< the current operation is one of them, not yet charged
  std::unique_ptr<nccl_watchdog> watchdog_;  ///< made at the first wait; its thread with it
  std::vector<ncclComm_t> watched_;          ///< what the watchdog watches (kept: no allocation per wait)
};

inline void nccl_setup_check(ncclResult_t r, std::string_view call, int rank, int size) {
  if (r == ncclSuccess) return;
  throw communication_error("NCCL", "init", call, rank, size, static_cast<int>(r), ncclGetErrorString(r));
}

}  // namespace detail
}  // namespace devicekit

#endif  // DEVICEKIT_HAS_NCCL
