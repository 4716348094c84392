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
/// string and last-error text). Each operation waits for its work in cudaStreamSynchronize while
/// a watchdog thread polls ncclCommGetAsyncError (detail/nccl_watchdog.hpp); an asynchronous
/// error, or a wait longer than the timeout (a peer that died or never joined), aborts the
/// communicator (ncclCommAbort), which ends the wait, and the operation throws.
///
/// Work runs on the communicator's stream per device, created blocking with respect to the
/// legacy default stream (so work queued there first is seen); `set_stream` hands it your own.
///
/// Inside a CUDA graph: when the stream of every local rank is being captured (set_stream to the
/// capturing streams; with several local ranks, each stream captured, for example one
/// dk::capture nested in another, or one capture that the other streams join through events),
/// a collective queues its packing, NCCL calls and unpacking on those streams and returns without
/// waiting: NCCL records its collectives as graph nodes that run at each launch (NCCL docs, "Using
/// NCCL with CUDA Graphs", NCCL 2.9 and later). What needs the host is refused with capture_error:
/// some local ranks capturing and others not, a staging buffer that would have to grow (run the
/// collective once before capturing), and an exchange read back on the host when ranks span
/// processes (the structure check: capture with check_structure off after one eager call; with
/// every rank local, the check is made on the host at capture time). A launched graph is not
/// polled and the timeout does not apply to it: call check_async_errors() after launches. The
/// graph uses the communicator's NCCL communicators and staging buffers, so the communicator
/// must outlive it; staging buffers a graph uses are kept (not freed) when a later eager call
/// needs larger ones. Eager collectives and graph launches share the staging buffers: order them
/// on one stream. NCCL's guide warns that capture with several GPUs per process may deadlock in
/// cudaGraphLaunch and recommends one GPU per process (init_rank, from_mpi) on real GPUs.
///
/// Available with DEVICEKIT_HAS_NCCL (link devicekit::nccl). Without NCCL this header declares
/// nothing.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_NCCL
#  include <devicekit/core/device.hpp>
#  include <devicekit/core/runtime.hpp>
#  include <devicekit/core/stream.hpp>
#  include <devicekit/distribute/collectives.hpp>
#  include <devicekit/distribute/detail/nccl_transport.hpp>
#  include <devicekit/memory/registry.hpp>
#  if DEVICEKIT_HAS_MPI
#    include <devicekit/distribute/mpi.hpp>
#  endif

#  include <nccl.h>

#  include <chrono>
#  include <cstdio>
#  include <cstring>
#  include <map>
#  include <span>
#  include <string>
#  include <string_view>
#  include <thread>
#  include <utility>
#  include <vector>

#  include <unistd.h>

namespace devicekit {

namespace detail {

/// The NCCL model of collective_backend (see collectives.hpp): nccl_transport
/// (detail/nccl_transport.hpp) plus the staging buffers, scratch() and what uses it (exchange),
/// and the release of everything at the end.
class nccl_backend : public nccl_transport {
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

  /// Local rank p's staging buffer `slot`, of at least `bytes`. Growing it takes memory from the
  /// device's pool and, eagerly, waits for the work that used the old buffer; a captured operation
  /// refuses to grow it (capture_error): the graph must use buffers that exist before the capture.
  void* scratch(std::size_t p, int slot, std::size_t bytes) {
    auto& q = part(p);
    auto& cap = q.capacity[slot];
    if (cap < bytes) {
      if (captured_) {
        refuse_in_capture("nccl_communicator: " + std::string(op_),
                          "local rank " + std::to_string(p) + "'s staging buffer holds " + std::to_string(cap) +
                              " bytes and this collective needs " + std::to_string(bytes) +
                              " (growing it allocates, and waits on the host for the work using the old one)",
                          "run this collective once before capturing, so that its staging buffers exist");
      }
      scoped_device on(q.dev.ordinal());
      if (q.scratch[slot] != nullptr && q.in_graph[slot]) {
        // A graph captured with this buffer reads it at each launch: keep it until release().
        q.retired.emplace_back(q.scratch[slot], cap);
        q.scratch[slot] = nullptr;
        q.in_graph[slot] = false;
        cap = 0;
      } else if (q.scratch[slot] != nullptr) {
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
    if (captured_) q.in_graph[slot] = true;
    return q.scratch[slot];
  }
  /// Gives a scratch buffer back to the device's pool; the caller has waited for the work using it.
  static void free_scratch(nccl_participant& q, int slot) noexcept {
    if (q.scratch[slot] == nullptr) return;
    give_back(q.dev, q.scratch[slot], q.capacity[slot]);
    q.scratch[slot] = nullptr;
    q.capacity[slot] = 0;
    q.in_graph[slot] = false;
  }
  static void give_back(device dev, void* ptr, std::size_t bytes) noexcept {
    try {
      default_memory(dev).deallocate(ptr, bytes);
    } catch (...) {
      // Only a foreign pointer or a wrong size throws, neither of which can happen here.
    }
    detail::process_memory::instance().note_scratch_freed(dev, bytes);
  }
  /// Host records through the device: one ncclAllGather of bytes_each per rank. A captured
  /// operation cannot read an answer back on the host: when every rank is local (init_all) the
  /// records are already here and are placed in rank order; otherwise it is refused.
  void exchange(const void* mine, std::size_t bytes_each, void* all) {
    if (captured_) {
      if (participants() != static_cast<std::size_t>(size_)) {
        refuse_in_capture("nccl_communicator: " + std::string(op_),
                          "this collective exchanges records with the other processes' ranks and reads them on the "
                          "host (the structure check, or scatter's sizes)",
                          "check the structure with one eager call before capturing, then capture with "
                          "collective_options::check_structure = false (set_options); scatter cannot be captured "
                          "when ranks span processes");
      }
      for (std::size_t p = 0; p < participants(); ++p) {
        std::memcpy(byte_at(all, static_cast<std::size_t>(rank(p)) * bytes_each), byte_at(mine, p * bytes_each),
                    bytes_each);
      }
      return;
    }
    std::vector<void*> buf(parts_.size());
    for (std::size_t p = 0; p < participants(); ++p) {
      buf[p] = scratch(p, 2, bytes_each * (1 + static_cast<std::size_t>(size_)));
      copy(p, buf[p], byte_at(mine, p * bytes_each), bytes_each);
    }
    group_begin();
    for (std::size_t p = 0; p < participants(); ++p) {
      auto& q = part(p);
      issue_check(ncclAllGather(buf[p], byte_at(buf[p], bytes_each), bytes_each, ncclUint8, q.comm, q.stream),
                  "ncclAllGather", p);
    }
    group_end();
    // Wait first, under the timeout and abort rules: `all` is pageable host memory, and a copy
    // into pageable memory returns only once done (cudaMemcpyAsync, "API synchronization
    // behavior"), so copying first would block here, past the timeout, on a peer that never came.
    finish(op_);
    // The copy is on local rank 0's stream only, and into pageable memory it has already
    // completed; the wait is for a destination the program has pinned (cudaHostRegister).
    copy(0, all, byte_at(buf[0], bytes_each), bytes_each * static_cast<std::size_t>(size_));
    wait(0, op_);
  }

 private:
  void swap(nccl_backend& o) noexcept { swap_state(o); }
  void release() noexcept {
    // After exit has begun the CUDA runtime may be gone: leave everything to the process's end.
    if (!cuda_calls_allowed()) return;
    // Work still queued (a collective whose peers are gone) may never finish: wait for it under
    // the timeout and NCCL's error polling, and abort past it, rather than block for ever in
    // cudaStreamSynchronize or ncclCommDestroy (which waits for the peers too).
    if (!aborted_) {
      try {
        for (std::size_t p = 0; p < participants(); ++p) wait(p, "release");
      } catch (...) {
        abort_all("release: queued work did not finish");
      }
    }
    for (auto& q : parts_) {
      if (q.stream != nullptr) (void)cudaStreamSynchronize(q.stream);
      if (q.comm != nullptr) (void)ncclCommDestroy(q.comm);
      nccl_memory::release(q);
      for (int slot = 0; slot < 3; ++slot) free_scratch(q, slot);
      for (const auto& [ptr, bytes] : q.retired) give_back(q.dev, ptr, bytes);
      q.retired.clear();
      if (q.own_stream && q.stream != nullptr) (void)cudaStreamDestroy(q.stream);
    }
    parts_.clear();
  }
};

static_assert(collective_backend<nccl_backend>);

}  // namespace detail

/// Collectives over NCCL on device leaves. See the file comment for the ways to create one. The
/// collectives (one leaf list, or one per local rank), options and rank queries are
/// basic_communicator's; what is NCCL's own (creation, devices, streams, the timeout and the
/// abort) is here.
class nccl_communicator : public basic_communicator<detail::nccl_backend, nccl_communicator> {
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
    std::vector<detail::nccl_participant> parts(devices.size());
    for (int i = 0; i < n; ++i) {
      const auto ii = static_cast<std::size_t>(i);
      parts[ii].dev = devices[ii];
      parts[ii].rank = i;
      detail::nccl_memory::snapshot(parts[ii]);
    }
    detail::nccl_setup_check(ncclCommInitAll(comms.data(), n, ordinals.data()), "ncclCommInitAll", 0, n);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      parts[i].comm = comms[i];
      detail::nccl_memory::charge(parts[i]);  // the client "nccl" of the device
    }
    nccl_communicator c(options);
    c.backend().adopt(std::move(parts), n);
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
    std::vector<detail::nccl_participant> parts(1);
    parts[0].dev = dev;
    parts[0].rank = rank;
    detail::nccl_memory::snapshot(parts[0]);
    {
      scoped_device on(dev.ordinal());
      detail::nccl_setup_check(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank", rank, nranks);
    }
    parts[0].comm = comm;
    detail::nccl_memory::charge(parts[0]);  // the client "nccl" of the device
    nccl_communicator c(options);
    c.backend().adopt(std::move(parts), nranks);
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
    mpi.backend().check(MPI_Allgather(mine, static_cast<int>(width), MPI_CHAR, all.data(), static_cast<int>(width),
                                      MPI_CHAR, mpi.native_handle()),
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

  [[nodiscard]] device device_of(int local = 0) const { return backend().part(index(local)).dev; }
  [[nodiscard]] cudaStream_t stream(int local = 0) const { return backend().part(index(local)).stream; }
  [[nodiscard]] ncclComm_t native_handle(int local = 0) const { return backend().part(index(local)).comm; }
  /// Runs this local rank's work on `s` (owned by the caller) instead of the communicator's stream;
  /// while `s` is being captured, the collectives are captured (see the file comment).
  void set_stream(int local, cudaStream_t s) { backend().set_stream(index(local), s); }
  /// The same with a stream reference, which must be a stream of this local rank's device: NCCL
  /// requires the stream of a call to belong to the communicator's device (NCCL docs, "CUDA
  /// Stream Semantics").
  void set_stream(int local, stream_ref s) {
    if (s.get_device() != device_of(local)) {
      throw config_error("nccl_communicator::set_stream: local rank " + std::to_string(local) + " works on " +
                         device_of(local).str() + " but the stream is on " + s.get_device().str() +
                         "; pass a stream of " + device_of(local).str());
    }
    backend().set_stream(index(local), s.native_handle());
  }

  /// How long an operation may wait before the communicator is aborted (0: forever); a captured
  /// operation does not wait, and a graph launch is not timed.
  nccl_communicator& set_timeout(std::chrono::milliseconds t) noexcept {
    backend().set_timeout(t);
    return *this;
  }
  [[nodiscard]] bool aborted() const noexcept { return backend().aborted(); }
  /// Aborts now (for example from a watchdog): pending work is dropped, later calls throw.
  void abort(std::string reason = "aborted by the caller") noexcept { backend().abort_all(std::move(reason)); }
  /// Throws communication_error (and aborts) if NCCL reports an asynchronous error. Graph launches
  /// of captured collectives are never polled otherwise: call it after them.
  void check_async_errors() {
    for (std::size_t p = 0; p < backend().participants(); ++p) backend().poll(p, "check_async_errors");
  }

 private:
  explicit nccl_communicator(collective_options options) : basic_communicator(options) {}
  static std::size_t index(int local) noexcept { return static_cast<std::size_t>(local); }
};

}  // namespace devicekit

#endif  // DEVICEKIT_HAS_NCCL
