// NCCL communicators: unique ids, ncclCommInitAll/InitRank, destroy, abort, errors, groups.
// Locking: each call holds the state's mutex (lock_state), except ncclCommInitRank while it waits
// for the other ranks. ncclCommInitAll makes several devices' ranks in one thread,
// ncclCommInitRank one rank per thread or process, meeting the others by unique id: every rank
// registers in the id's rendezvous directory (nccl_remote.cpp). When all ranks turn out to be in
// this process, they share one clique in memory (pending_ids) and the directory goes; otherwise
// the clique is remote and its operations exchange data through that directory.
#include "memory_model.hpp"
#include "nccl.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include <unistd.h>

namespace devicekit::cuda_sim::detail {

std::condition_variable nccl_cv;

namespace {

std::map<std::string, std::pair<std::shared_ptr<clique>, int>> pending_ids;  // unique id -> clique, ranks joined
std::uint64_t next_id = 1;
thread_local int group_depth = 0;
thread_local std::string last_error_text;

ncclComm_t make_comm(const std::shared_ptr<clique>& c, int rank, int device) {
  auto* comm = new ncclComm;
  comm->group = c;
  comm->rank = rank;
  comm->device = device;
  ++c->members;
  if (c->async_error.size() < static_cast<std::size_t>(c->nranks)) {
    c->async_error.assign(static_cast<std::size_t>(c->nranks), ncclSuccess);
    c->async_text.assign(static_cast<std::size_t>(c->nranks), std::string());
  }
  return comm;
}

/// Frees `comm` and its device memory; its clique stays while other communicators or queued
/// operations hold it.
void release(ncclComm_t comm) {
  auto& in_use = global().bytes_in_use[static_cast<std::size_t>(comm->device)];
  in_use -= std::min(in_use, comm->device_bytes);
  --comm->group->members;
  delete comm;
}

/// A positive integer from NCCL's environment variable `name`, else `fallback` (NCCL ignores a
/// value it cannot read, and so does the simulator).
std::uint64_t nccl_setting(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 0);
  return end != nullptr && *end == '\0' && n > 0 ? n : fallback;
}

}  // namespace

std::uint64_t nccl_init_bytes() { return std::uint64_t{8} << 20; }

std::uint64_t nccl_connect_bytes(int nranks) {
  // Each channel keeps a send and a receive buffer of NCCL_BUFFSIZE (NCCL's default: 4 MiB) per
  // connected peer; a ring or a pair connects at most two peers. NCCL picks its channel count from
  // the topology; the simulator takes NCCL_MIN_NCHANNELS, or 2.
  const std::uint64_t peers = static_cast<std::uint64_t>(std::min(nranks - 1, 2));
  return nccl_setting("NCCL_MIN_NCHANNELS", 2) * peers * 2 * nccl_setting("NCCL_BUFFSIZE", std::uint64_t{4} << 20);
}

ncclResult_t nccl_take_memory(state& g, ncclComm_t comm, std::uint64_t bytes, const char* api) {
  const auto d = static_cast<std::size_t>(comm->device);
  if (bytes > free_device_bytes(g.devices[d], g.bytes_in_use[d])) {
    last_error_text = std::string(api) + ": Cuda failure 2 'out of memory' (NCCL needs " + std::to_string(bytes) +
                      " more bytes of device " + std::to_string(comm->device) + ")";
    comm->last_error = last_error_text;
    return ncclUnhandledCudaError;
  }
  g.bytes_in_use[d] += bytes;
  comm->device_bytes += bytes;
  return ncclSuccess;
}

ncclResult_t nccl_connect(state& g, ncclComm_t comm, const std::string& kind, const char* api) {
  if (comm->connected.count(kind) != 0) return ncclSuccess;
  const ncclResult_t r = nccl_take_memory(g, comm, nccl_connect_bytes(comm->group->nranks), api);
  if (r == ncclSuccess) comm->connected.insert(kind);
  return r;
}

ncclResult_t invalid(ncclComm_t comm, const std::string& why) {
  last_error_text = why;
  if (comm != nullptr) comm->last_error = why;
  return ncclInvalidArgument;
}

}  // namespace devicekit::cuda_sim::detail

using namespace devicekit::cuda_sim::detail;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  return comm != nullptr && !comm->last_error.empty() ? comm->last_error.c_str() : last_error_text.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return ncclInvalidArgument;
  auto lk = lock_state();
  // The creating process, a counter and a random nonce: unique on the host, also against the
  // rendezvous directory of an earlier run whose pid was the same (nccl_remote.cpp).
  static const unsigned long long nonce = [] {
    std::random_device rd;
    return (static_cast<unsigned long long>(rd()) << 32) ^ rd();
  }();
  std::memset(uniqueId->internal, 0, NCCL_UNIQUE_ID_BYTES);
  std::snprintf(uniqueId->internal, NCCL_UNIQUE_ID_BYTES, "devicekit-sim-nccl-%ld-%llu-%016llx",
                static_cast<long>(::getpid()), static_cast<unsigned long long>(next_id++), nonce);
  return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev <= 0) return invalid(nullptr, "ncclCommInitAll: comms is NULL or ndev < 1");
  state& g = global();
  auto lk = lock_state();
  std::vector<int> devs;
  for (int i = 0; i < ndev; ++i) {
    const int d = devlist != nullptr ? devlist[i] : i;
    if (d < 0 || static_cast<std::size_t>(d) >= g.devices.size())
      return invalid(nullptr, "ncclCommInitAll: invalid device");
    if (std::find(devs.begin(), devs.end(), d) != devs.end()) {
      return invalid(nullptr, "ncclCommInitAll: duplicate device (NCCL needs one GPU per rank)");
    }
    devs.push_back(d);
  }
  auto c = std::make_shared<clique>();
  c->nranks = ndev;
  for (int i = 0; i < ndev; ++i) comms[i] = make_comm(c, i, devs[static_cast<std::size_t>(i)]);
  for (int i = 0; i < ndev; ++i) {
    if (const ncclResult_t r = nccl_take_memory(g, comms[i], nccl_init_bytes(), "ncclCommInitAll"); r != ncclSuccess) {
      for (int k = 0; k < ndev; ++k) release(comms[k]);  // nothing is left behind
      for (int k = 0; k < ndev; ++k) comms[k] = nullptr;
      return r;
    }
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (comm == nullptr || nranks <= 0 || rank < 0 || rank >= nranks) {
    return invalid(nullptr, "ncclCommInitRank: invalid nranks or rank");
  }
  auto lk = lock_state();
  const std::string id(commId.internal, strnlen(commId.internal, NCCL_UNIQUE_ID_BYTES));
  // Inside a group the ranks must all be this process's (none may wait, so none could learn where
  // the others are): an id that another process made says otherwise.
  long creator = 0;
  if (group_depth != 0 && std::sscanf(id.c_str(), "devicekit-sim-nccl-%ld-", &creator) == 1 &&
      creator != static_cast<long>(::getpid())) {
    last_error_text =
        "ncclCommInitRank: inside ncclGroupStart/ncclGroupEnd with a unique id made by another "
        "process (pid " +
        std::to_string(creator) + "): the simulator joins ranks across processes only outside a group";
    return ncclInvalidUsage;
  }
  auto& pending = pending_ids[id];
  if (!pending.first) {
    pending.first = std::make_shared<clique>();
    pending.first->nranks = nranks;
  }
  std::shared_ptr<clique> c = pending.first;
  if (c->nranks != nranks) return invalid(nullptr, "ncclCommInitRank: ranks disagree on nranks");
  *comm = make_comm(c, rank, tl_device);
  if (const ncclResult_t r = nccl_take_memory(global(), *comm, nccl_init_bytes(), "ncclCommInitRank");
      r != ncclSuccess) {
    release(*comm);
    *comm = nullptr;
    return r;
  }
  ++pending.second;
  nccl_cv.notify_all();
  // Inside a group the ranks are this process's (several in one thread, so none may wait).
  if (group_depth != 0) return ncclSuccess;
  // Outside a group, initialisation waits for every rank (ncclCommInitRank is collective), in this
  // process or another: each registers in the id's rendezvous directory and waits there, without
  // the lock (a peer process may take any time).
  ncclComm_t mine = *comm;
  const std::string dir = rendezvous_dir(id);
  const int device = mine->device;
  lk.unlock();
  bool spans_processes = false;
  std::string why;
  const ncclResult_t r = join_rendezvous(dir, nranks, rank, device, spans_processes, why);
  if (r != ncclSuccess) {
    // Every rank that saw the registrations fails alike; the last to leave removes the directory.
    if (r != ncclRemoteError) leave_rendezvous(dir, rank, nranks);
    lk.lock();
    release(mine);
    *comm = nullptr;
    last_error_text = "ncclCommInitRank: " + why;
    return r;
  }
  lk.lock();
  // Written by the first of this process's ranks only: the queued operations of the others read
  // them without the lock.
  if (c->dir.empty()) c->dir = dir;
  if (spans_processes && !c->remote) c->remote = true;
  // All ranks here: the clique stays in memory, and once the last one is past this point no rank
  // reads the registrations any more.
  const bool last_local = !spans_processes && ++c->ready == nranks;
  lk.unlock();
  if (last_local) remove_rendezvous(dir);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  auto lk = lock_state();
  const bool remote = comm->group->remote;
  const std::string dir = comm->group->dir;
  const int rank = comm->rank;
  const int nranks = comm->group->nranks;
  release(comm);
  lk.unlock();
  if (remote) leave_rendezvous(dir, rank, nranks);  // the last rank of all processes removes it
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  auto lk = lock_state();
  comm->aborted = true;
  comm->group->aborted = true;  // ranks waiting in a collective give up
  nccl_cv.notify_all();
  const bool remote = comm->group->remote;
  const std::string dir = comm->group->dir;
  const int rank = comm->rank;
  const int nranks = comm->group->nranks;
  release(comm);
  lk.unlock();
  if (remote) {  // the peer processes' waits give up too (ncclRemoteError)
    mark_aborted(dir, rank);
    leave_rendezvous(dir, rank, nranks);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) return ncclInvalidArgument;
  auto lk = lock_state();
  *asyncError = comm->group->async_error[static_cast<std::size_t>(comm->rank)];
  // What ncclGetLastError then tells (copied here, under the lock, from the clique that the
  // stream workers write).
  const std::string& text = comm->group->async_text[static_cast<std::size_t>(comm->rank)];
  if (*asyncError != ncclSuccess && !text.empty()) comm->last_error = text;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->group->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return invalid(nullptr, "ncclGroupEnd: no group is open");
  --group_depth;
  return ncclSuccess;
}

}  // extern "C"
