#pragma once
/// \file
/// NCCL for device memory: `nccl_communicator` runs devicekit's bucketed collectives (see
/// collectives.hpp) on GPU leaves.
///
///  - In one process over local GPUs: `nccl_communicator::init_all(devices)` (ncclCommInitAll;
///    one local rank per device, every call of a bucket grouped with ncclGroupStart/End). One
///    device gives a one-rank communicator, which is what a single-GPU machine runs.
///  - One rank per process: `init_rank(id, nranks, rank, device)` with the unique id from rank
///    0's `unique_id()`, or `from_mpi(mpi_comm, device)`, which broadcasts the id through MPI.
///
/// Errors: a failed NCCL call becomes communication_error (operation, call, rank, NCCL's error
/// string and last-error text). Each operation waits for its work by polling the stream and
/// ncclCommGetAsyncError; an asynchronous error, or a wait longer than the timeout (a peer that
/// died or never joined), aborts the communicator (ncclCommAbort) and throws.
///
/// Work runs on the communicator's stream per device, created blocking with respect to the
/// legacy default stream (so work queued there first is seen); `set_stream` hands it your own.
///
/// Available with DEVICEKIT_HAS_NCCL (link devicekit::nccl). Without NCCL this header declares
/// nothing.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_NCCL
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/runtime.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/distribute/collectives.hpp>
#  include <devicekit/memory/registry.hpp>
#  if DEVICEKIT_HAS_MPI
#    include <devicekit/distribute/mpi.hpp>
#  endif

#  include <cuda_bf16.h>
#  include <cuda_fp16.h>
#  include <nccl.h>

#  include <chrono>
#  include <cstdio>
#  include <map>
#  include <span>
#  include <string>
#  include <string_view>
#  include <thread>
#  include <utility>
#  include <vector>

#  include <unistd.h>

namespace devicekit {

template <>
struct element_type_traits<__half> {
  static constexpr element_type value = element_type::float16;
};
template <>
struct element_type_traits<__nv_bfloat16> {
  static constexpr element_type value = element_type::bfloat16;
};

/// The NCCL datatype of an element type, or false for the 16-bit integers, which NCCL lacks.
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
};

/// The NCCL model of the collectives' backend (see collectives.hpp).
class nccl_backend {
 public:
  nccl_backend() = default;
  nccl_backend(const nccl_backend&) = delete;
  nccl_backend& operator=(const nccl_backend&) = delete;
  nccl_backend(nccl_backend&& o) noexcept { swap(o); }
  nccl_backend& operator=(nccl_backend&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~nccl_backend() { release(); }

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

  void set_operation(std::string_view op) {
    if (aborted_) {
      throw config_error("nccl_communicator: this communicator was aborted (" + abort_reason_ +
                         "); create a new one");
    }
    op_ = op;
    issued_ = 0;
  }
  void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  [[nodiscard]] nccl_participant& part(int p) { return parts_.at(static_cast<std::size_t>(p)); }
  [[nodiscard]] const nccl_participant& part(int p) const { return parts_.at(static_cast<std::size_t>(p)); }
  [[nodiscard]] bool aborted() const noexcept { return aborted_; }
  [[nodiscard]] const std::string& abort_reason() const noexcept { return abort_reason_; }

  void set_stream(int p, cudaStream_t s) {
    auto& q = part(p);
    if (q.own_stream && q.stream != nullptr && cuda_calls_allowed()) {
      (void)cudaStreamSynchronize(q.stream);
      (void)cudaStreamDestroy(q.stream);
    }
    q.stream = s;
    q.own_stream = false;
  }

  // --- the backend interface ---
  [[nodiscard]] int participants() const noexcept { return static_cast<int>(parts_.size()); }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int rank(int p) const { return part(p).rank; }
  [[nodiscard]] static std::string_view name() noexcept { return "NCCL"; }
  [[nodiscard]] static bool can_reduce(element_type t) noexcept {
    ncclDataType_t d{};
    return t != element_type::opaque && nccl_datatype(t, d);
  }
  void group_begin() {
    nccl_check(ncclGroupStart(), "ncclGroupStart", 0);
    in_group_ = true;
  }
  void group_end() {
    in_group_ = false;
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", 0);
  }
  void* scratch(int p, int slot, std::size_t bytes) {
    auto& q = part(p);
    auto& cap = q.capacity[slot];
    if (cap < bytes) {
      scoped_device on(q.dev.ordinal());
      if (q.scratch[slot] != nullptr) {
        // Queued work may still use the old buffer: wait for it under the timeout and NCCL's
        // error polling, as finish() does. A collective queued earlier in this operation may be
        // stuck on a failed or dead peer, and cudaStreamSynchronize would then block for ever.
        wait(p, op_);
        free_scratch(q, slot);
        cap = 0;
      }
      std::size_t want = std::size_t{1} << 20;
      while (want < bytes) want *= 2;
      // From the device's pool (memory/registry.hpp), counted as scratch: inside its budget and
      // stats, and cached for the next communicator instead of cudaMalloc'd each time.
      q.scratch[slot] = default_memory(q.dev).allocate(want);
      detail::process_memory::instance().note_scratch_taken(q.dev, want);
      cap = want;
    }
    return q.scratch[slot];
  }
  /// Gives a scratch buffer back to the device's pool; the caller has waited for the work using it.
  static void free_scratch(nccl_participant& q, int slot) noexcept {
    if (q.scratch[slot] == nullptr) return;
    try {
      default_memory(q.dev).deallocate(q.scratch[slot], q.capacity[slot]);
    } catch (...) {
      // Only a foreign pointer or a wrong size throws, neither of which can happen here.
    }
    detail::process_memory::instance().note_scratch_freed(q.dev, q.capacity[slot]);
    q.scratch[slot] = nullptr;
    q.capacity[slot] = 0;
  }
  void copy(int p, void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0) return;
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, part(p).stream), "cudaMemcpyAsync", p);
  }
  /// Host records through the device: one ncclAllGather of bytes_each per rank.
  void exchange(const void* mine, std::size_t bytes_each, void* all) {
    std::vector<void*> buf(parts_.size());
    for (int p = 0; p < participants(); ++p) {
      buf[static_cast<std::size_t>(p)] = scratch(p, 2, bytes_each * (1 + static_cast<std::size_t>(size_)));
      copy(p, buf[static_cast<std::size_t>(p)], byte_at(mine, static_cast<std::size_t>(p) * bytes_each), bytes_each);
    }
    group_begin();
    for (int p = 0; p < participants(); ++p) {
      auto& q = part(p);
      issue_check(ncclAllGather(buf[static_cast<std::size_t>(p)], byte_at(buf[static_cast<std::size_t>(p)], bytes_each),
                               bytes_each, ncclUint8, q.comm, q.stream),
                 "ncclAllGather", p);
    }
    group_end();
    // Wait first, under the timeout and abort rules: `all` is pageable host memory, and a copy
    // into pageable memory returns only once done (cudaMemcpyAsync, "API synchronization
    // behavior"), so copying first would block here, past the timeout, on a peer that never came.
    finish(op_);
    copy(0, all, byte_at(buf[0], bytes_each), bytes_each * static_cast<std::size_t>(size_));
    finish(op_);
  }
  void broadcast(int p, void* buf, std::size_t count, element_type t, int root) {
    auto& q = part(p);
    issue_check(ncclBroadcast(buf, buf, count, dtype(t), root, q.comm, q.stream), "ncclBroadcast", p);
  }
  void all_reduce(int p, const void* s, void* r, std::size_t count, element_type t, reduce_op op) {
    auto& q = part(p);
    issue_check(ncclAllReduce(s, r, count, dtype(t), nccl_op(op), q.comm, q.stream), "ncclAllReduce", p);
  }
  void all_gather(int p, const void* s, void* r, std::size_t count, element_type t) {
    auto& q = part(p);
    issue_check(ncclAllGather(s, r, count, dtype(t), q.comm, q.stream), "ncclAllGather", p);
  }
  void reduce_scatter(int p, const void* s, void* r, std::size_t recv_count, element_type t, reduce_op op) {
    auto& q = part(p);
    issue_check(ncclReduceScatter(s, r, recv_count, dtype(t), nccl_op(op), q.comm, q.stream), "ncclReduceScatter", p);
  }
  /// Unequal sizes: the root sends each rank its bytes (ncclSend), every rank receives
  /// (ncclRecv); collectives.hpp issues these inside one group.
  void scatter(int p, const void* s, const std::size_t* bytes, const std::size_t* displs, void* r,
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
  /// Waits for every local rank's stream, polling NCCL's asynchronous errors.
  void finish(std::string_view operation) {
    for (int p = 0; p < participants(); ++p) wait(p, operation);
  }

  /// Waits for local rank p; aborts and throws on an asynchronous error or the timeout.
  void wait(int p, std::string_view operation) {
    auto& q = part(p);
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      const cudaError_t e = cudaStreamQuery(q.stream);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        (void)cudaGetLastError();
        const std::string detail = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
        abort_all("CUDA error while waiting: " + detail);
        throw communication_error("NCCL", operation, "cudaStreamQuery", q.rank, size_, static_cast<int>(e), detail);
      }
      // Every local rank's asynchronous error, not only p's: p may wait for a rank whose peer died.
      for (int k = 0; k < participants(); ++k) poll(k, operation);
      if (timeout_.count() > 0 && std::chrono::steady_clock::now() - start > timeout_) {
        const std::string detail = "timed out after " + std::to_string(timeout_.count()) +
                                   " ms: a rank did not take part (a dead peer, or ranks calling different "
                                   "collectives); the communicator was aborted";
        abort_all("timeout in " + std::string(operation));
        throw communication_error("NCCL", operation, "wait", q.rank, size_, static_cast<int>(ncclInternalError), detail);
      }
      if (spins < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  /// Throws (after aborting) when NCCL reports an asynchronous error on local rank p.
  void poll(int p, std::string_view operation) {
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
    aborted_ = true;
    abort_reason_ = std::move(reason);
    for (auto& q : parts_) {
      if (q.comm != nullptr) (void)ncclCommAbort(q.comm);
      q.comm = nullptr;
    }
  }

  /// nccl_check for a call that moves data: once one has been issued in an operation, a failure
  /// of a later one leaves the peers waiting for what will never come, so it aborts (below).
  void issue_check(ncclResult_t r, std::string_view call, int p) {
    nccl_check(r, call, p);
    ++issued_;
  }
  void nccl_check(ncclResult_t r, std::string_view call, int p) {
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
  void cuda_check(cudaError_t e, std::string_view call, int p) {
    if (e == cudaSuccess) return;
    (void)cudaGetLastError();
    throw communication_error("NCCL", op_, call, part(p).rank, size_, static_cast<int>(e),
                              std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
  }

  static std::string describe(ncclResult_t r, [[maybe_unused]] ncclComm_t comm) {
    std::string s = ncclGetErrorString(r);
#  if NCCL_VERSION_CODE >= 21300
    if (comm != nullptr) {
      const char* last = ncclGetLastError(comm);
      if (last != nullptr && *last != '\0') s.append("; ").append(last);
    }
#  endif
    return s;
  }

 private:
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
  void swap(nccl_backend& o) noexcept {
    std::swap(parts_, o.parts_);
    std::swap(size_, o.size_);
    std::swap(op_, o.op_);
    std::swap(timeout_, o.timeout_);
    std::swap(aborted_, o.aborted_);
    std::swap(abort_reason_, o.abort_reason_);
    std::swap(in_group_, o.in_group_);
  }
  void release() noexcept {
    // After exit has begun the CUDA runtime may be gone: leave everything to the process's end.
    if (!cuda_calls_allowed()) return;
    // Work still queued (a collective whose peers are gone) may never finish: wait for it under
    // the timeout and NCCL's error polling, and abort past it, rather than block for ever in
    // cudaStreamSynchronize or ncclCommDestroy (which waits for the peers too).
    if (!aborted_) {
      try {
        for (int p = 0; p < participants(); ++p) wait(p, "release");
      } catch (...) {
        abort_all("release: queued work did not finish");
      }
    }
    for (auto& q : parts_) {
      if (q.stream != nullptr) (void)cudaStreamSynchronize(q.stream);
      if (q.comm != nullptr) (void)ncclCommDestroy(q.comm);
      for (int slot = 0; slot < 3; ++slot) free_scratch(q, slot);
      if (q.own_stream && q.stream != nullptr) (void)cudaStreamDestroy(q.stream);
    }
    parts_.clear();
  }

  std::vector<nccl_participant> parts_;
  int size_ = 0;
  std::string_view op_ = "setup";
  std::size_t issued_ = 0;  ///< data-moving NCCL calls issued in the current operation
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};  // PyTorch's default watchdog
  bool aborted_ = false;
  std::string abort_reason_;
  bool in_group_ = false;
};

inline void nccl_setup_check(ncclResult_t r, std::string_view call, int rank, int size) {
  if (r == ncclSuccess) return;
  throw communication_error("NCCL", "init", call, rank, size, static_cast<int>(r), ncclGetErrorString(r));
}

}  // namespace detail

/// Collectives over NCCL on device leaves. See the file comment for the ways to create one.
class nccl_communicator {
 public:
  /// One process, one local rank per device (ncclCommInitAll), in the order given. One device
  /// gives a one-rank communicator.
  [[nodiscard]] static nccl_communicator init_all(std::span<const device> devices, collective_options options = {}) {
    if (devices.empty()) throw config_error("nccl_communicator::init_all: no devices given");
    std::vector<int> ordinals;
    for (const auto& d : devices) {
      if (!d.is_cuda()) throw config_error("nccl_communicator: " + d.str() + " is not a CUDA device");
      ordinals.push_back(d.ordinal());
    }
    const int n = static_cast<int>(devices.size());
    std::vector<ncclComm_t> comms(devices.size(), nullptr);
    detail::nccl_setup_check(ncclCommInitAll(comms.data(), n, ordinals.data()), "ncclCommInitAll", 0, n);
    std::vector<detail::nccl_participant> parts(devices.size());
    for (int i = 0; i < n; ++i) {
      const auto ii = static_cast<std::size_t>(i);
      parts[ii].dev = devices[ii];
      parts[ii].rank = i;
      parts[ii].comm = comms[ii];
    }
    nccl_communicator c(options);
    c.backend_.adopt(std::move(parts), n);
    return c;
  }
  [[nodiscard]] static nccl_communicator one_rank(device d, collective_options options = {}) {
    return init_all(std::span<const device>(&d, 1), options);
  }

  /// A fresh unique id (on rank 0 of a multi-process communicator; hand it to every rank).
  [[nodiscard]] static ncclUniqueId unique_id() {
    ncclUniqueId id{};
    detail::nccl_setup_check(ncclGetUniqueId(&id), "ncclGetUniqueId", 0, 0);
    return id;
  }
  /// Rank `rank` of `nranks`, on `dev`.
  [[nodiscard]] static nccl_communicator init_rank(const ncclUniqueId& id, int nranks, int rank, device dev,
                                                   collective_options options = {}) {
    if (!dev.is_cuda()) throw config_error("nccl_communicator: " + dev.str() + " is not a CUDA device");
    ncclComm_t comm = nullptr;
    {
      scoped_device on(dev.ordinal());
      detail::nccl_setup_check(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank", rank, nranks);
    }
    std::vector<detail::nccl_participant> parts(1);
    parts[0].dev = dev;
    parts[0].rank = rank;
    parts[0].comm = comm;
    nccl_communicator c(options);
    c.backend_.adopt(std::move(parts), nranks);
    return c;
  }
#  if DEVICEKIT_HAS_MPI
  /// NCCL needs a distinct GPU for every rank of a communicator; two ranks on one GPU make
  /// ncclCommInitRank fail with a bare "invalid usage" (NCCL's "Duplicate GPU detected"). Each
  /// rank shares its host name and its device's PCI bus id; every rank then sees the same
  /// duplicates and throws the same config_error, before any NCCL call.
  static void check_distinct_devices(mpi_communicator& mpi, device dev) {
    constexpr std::size_t width = 192;
    char mine[width] = {};
    char bus[64] = {};
    DEVICEKIT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus), dev.ordinal()));
    char host[96] = {};
    (void)::gethostname(host, sizeof host - 1);
    std::snprintf(mine, width, "%s|%s", host, bus);
    std::vector<char> all(width * static_cast<std::size_t>(mpi.size()));
    mpi.backend().set_operation("nccl bootstrap");
    mpi.backend().check(MPI_Allgather(mine, static_cast<int>(width), MPI_CHAR, all.data(), static_cast<int>(width), MPI_CHAR,
                                      mpi.native_handle()),
                        "MPI_Allgather");
    std::map<std::string, int> first_rank;  // "host|bus" -> the lowest rank using it
    for (int b = 0; b < mpi.size(); ++b) {
      const std::string key(all.data() + static_cast<std::size_t>(b) * width);
      const auto [it, fresh] = first_rank.emplace(key, b);
      if (fresh) continue;
      const auto bar = key.find('|');
      throw config_error("nccl_communicator::from_mpi: ranks " + std::to_string(it->second) + " and " +
                         std::to_string(b) + " both use the GPU at PCI " + key.substr(bar + 1) + " on host " +
                         key.substr(0, bar) +
                         "; NCCL needs a distinct GPU for each rank. Run at most as many processes per node as it "
                         "has GPUs, give each rank its own device (DEVICEKIT_DEVICE or CUDA_VISIBLE_DEVICES), or "
                         "reduce on the host over MPI.");
    }
  }

  /// One rank per MPI process: rank 0 creates the unique id and MPI broadcasts it.
  [[nodiscard]] static nccl_communicator from_mpi(mpi_communicator& mpi, device dev, collective_options options = {}) {
    check_distinct_devices(mpi, dev);
    ncclUniqueId id{};
    if (mpi.rank() == 0) id = unique_id();
    mpi.backend().set_operation("nccl bootstrap");
    mpi.backend().check(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi.native_handle()), "MPI_Bcast");
    return init_rank(id, mpi.size(), mpi.rank(), dev, options);
  }
#  endif

  [[nodiscard]] int size() const noexcept { return backend_.size(); }
  /// How many ranks this process drives (init_all: one per device; otherwise 1).
  [[nodiscard]] int local_ranks() const noexcept { return backend_.participants(); }
  [[nodiscard]] int rank(int local = 0) const { return backend_.rank(local); }
  [[nodiscard]] device device_of(int local = 0) const { return backend_.part(local).dev; }
  [[nodiscard]] cudaStream_t stream(int local = 0) const { return backend_.part(local).stream; }
  [[nodiscard]] ncclComm_t native_handle(int local = 0) const { return backend_.part(local).comm; }
  /// Runs this local rank's work on `s` (owned by the caller) instead of the communicator's stream.
  void set_stream(int local, cudaStream_t s) { backend_.set_stream(local, s); }
  /// The same with a stream reference, which must be a stream of this local rank's device: NCCL
  /// requires the stream of a call to belong to the communicator's device (NCCL docs, "CUDA
  /// Stream Semantics").
  void set_stream(int local, stream_ref s) {
    if (s.get_device() != device_of(local)) {
      throw config_error("nccl_communicator::set_stream: local rank " + std::to_string(local) + " works on " +
                         device_of(local).str() + " but the stream is on " + s.get_device().str() +
                         "; pass a stream of " + device_of(local).str());
    }
    backend_.set_stream(local, s.native_handle());
  }

  /// NCCL moves the memory of each local rank's device.
  [[nodiscard]] bool accepts(device d, int local = 0) const { return d == device_of(local); }
  [[nodiscard]] std::string memory_description(int local = 0) const {
    return "NCCL local rank " + std::to_string(local) + " cannot use: it works on " + device_of(local).str();
  }

  [[nodiscard]] const collective_options& options() const noexcept { return options_; }
  nccl_communicator& set_options(const collective_options& o) noexcept {
    options_ = o;
    return *this;
  }
  nccl_communicator& set_bucket_bytes(std::size_t bytes) noexcept {
    options_.bucket_bytes = bytes;
    return *this;
  }
  /// How long an operation may wait before the communicator is aborted (0: forever).
  nccl_communicator& set_timeout(std::chrono::milliseconds t) noexcept {
    backend_.set_timeout(t);
    return *this;
  }
  [[nodiscard]] bool aborted() const noexcept { return backend_.aborted(); }
  /// Aborts now (for example from a watchdog): pending work is dropped, later calls throw.
  void abort(std::string reason = "aborted by the caller") noexcept { backend_.abort_all(std::move(reason)); }
  /// Throws communication_error (and aborts) if NCCL reports an asynchronous error.
  void check_async_errors() {
    for (int p = 0; p < local_ranks(); ++p) backend_.poll(p, "check_async_errors");
  }

  // --- one local rank (init_rank, from_mpi, one_rank): leaves in device memory ---
  void broadcast(std::span<const leaf_span> leaves, int root = 0) {
    single("broadcast");
    detail::broadcast(backend_, one(leaves), root, options_);
  }
  void all_reduce(std::span<const leaf_span> leaves, reduce_op op = reduce_op::sum) {
    single("all_reduce");
    detail::all_reduce(backend_, one(leaves), op, options_);
  }
  void all_gather(std::span<const const_leaf_span> in, std::span<const leaf_span> out) {
    single("all_gather");
    detail::all_gather(backend_, one(in), one(out), options_);
  }
  void reduce_scatter(std::span<const const_leaf_span> in, std::span<const leaf_span> out,
                      reduce_op op = reduce_op::sum) {
    single("reduce_scatter");
    detail::reduce_scatter(backend_, one(in), one(out), op, options_);
  }
  void scatter(std::span<const const_leaf_span> in, std::span<const leaf_span> out, int root = 0) {
    single("scatter");
    detail::scatter(backend_, one(in), one(out), root, options_);
  }

  // --- several local ranks (init_all): one leaf list per local rank, in device order ---
  void broadcast(std::span<const std::vector<leaf_span>> per_rank, int root = 0) {
    multi("broadcast", per_rank.size());
    const auto v = views(per_rank);
    detail::broadcast(backend_, v, root, options_);
  }
  void all_reduce(std::span<const std::vector<leaf_span>> per_rank, reduce_op op = reduce_op::sum) {
    multi("all_reduce", per_rank.size());
    const auto v = views(per_rank);
    detail::all_reduce(backend_, v, op, options_);
  }
  void all_gather(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out) {
    multi("all_gather", in.size());
    multi("all_gather", out.size());
    const auto vi = views(in);
    const auto vo = views(out);
    detail::all_gather(backend_, vi, vo, options_);
  }
  void reduce_scatter(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out,
                      reduce_op op = reduce_op::sum) {
    multi("reduce_scatter", in.size());
    multi("reduce_scatter", out.size());
    const auto vi = views(in);
    const auto vo = views(out);
    detail::reduce_scatter(backend_, vi, vo, op, options_);
  }
  void scatter(std::span<const std::vector<const_leaf_span>> in, std::span<const std::vector<leaf_span>> out,
               int root = 0) {
    multi("scatter", in.size());
    multi("scatter", out.size());
    const auto vi = views(in);
    const auto vo = views(out);
    detail::scatter(backend_, vi, vo, root, options_);
  }

  [[nodiscard]] detail::nccl_backend& backend() noexcept { return backend_; }

 private:
  explicit nccl_communicator(collective_options options) : options_(options) {}

  void single(std::string_view op) {
    backend_.set_operation(op);
    if (local_ranks() != 1) {
      throw config_error("nccl_communicator::" + std::string(op) + ": this communicator drives " +
                         std::to_string(local_ranks()) + " local ranks; pass one leaf list per local rank");
    }
  }
  void multi(std::string_view op, std::size_t given) {
    backend_.set_operation(op);
    if (given != static_cast<std::size_t>(local_ranks())) {
      throw config_error("nccl_communicator::" + std::string(op) + ": " + std::to_string(given) +
                         " leaf lists for " + std::to_string(local_ranks()) + " local ranks");
    }
  }
  template <class T>
  static std::span<const std::span<const T>, 1> one(std::span<const T>& s) noexcept {
    return std::span<const std::span<const T>, 1>(&s, 1);
  }
  template <class T>
  static std::vector<std::span<const T>> views(std::span<const std::vector<T>> lists) {
    return {lists.begin(), lists.end()};
  }

  detail::nccl_backend backend_;
  collective_options options_;
};

}  // namespace devicekit

#endif  // DEVICEKIT_HAS_NCCL
