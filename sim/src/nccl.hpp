#pragma once
// NCCL's shared pieces: cliques (a communicator set's ranks), rendezvous, channels, communicators,
// and the cross-process transport (nccl_remote.cpp) for cliques whose ranks live in several
// processes.
// Locking: all of it is guarded by the state's mutex; nccl_cv announces arrivals and messages.
// The cross-process functions below take no lock: they work on files, and their waits must never
// hold the state's mutex (a peer process may take any time to arrive).
#include "entry.hpp"
#include "state.hpp"

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace devicekit::cuda_sim::detail {

struct collective_call {
  const void* send = nullptr;
  void* recv = nullptr;
};

struct rendezvous {
  std::vector<collective_call> calls;
  int arrived = 0;
  bool done = false;
};

struct clique {
  int nranks = 0;
  std::map<std::uint64_t, rendezvous> collectives;                                 ///< by sequence number
  std::map<std::pair<int, int>, std::deque<std::vector<unsigned char>>> channels;  ///< (from, to) -> messages
  bool aborted = false;
  int members = 0;  ///< communicators not yet destroyed
  /// Per rank: the asynchronous error (kept here, not in the communicator, which an abort
  /// deletes while its queued operations may still run), and what ncclGetLastError says of it.
  std::vector<ncclResult_t> async_error;
  std::vector<std::string> async_text;
  /// The rendezvous directory of ncclCommInitRank (see nccl_remote.cpp); empty for ncclCommInitAll
  /// and for ranks made inside a group.
  std::string dir;
  /// Some ranks live in other processes: operations exchange their data through files in `dir`
  /// instead of meeting in `collectives` and `channels`.
  bool remote = false;
  int ready = 0;  ///< local ranks past initialisation (the last removes a local clique's registrations)
};

/// Announces arrivals, messages and aborts (waited on with the state's mutex).
extern std::condition_variable nccl_cv;

/// Locks the state for an NCCL call (reading the configuration at the first call).
inline std::unique_lock<std::mutex> lock_state() {
  bool torn_down = false;
  return enter(global(), torn_down);
}

/// NCCL's device memory, modelled from NCCL's documented settings (sim/README.md, "NCCL's
/// memory"): a communicator takes nccl_init_bytes on its device when made, and the first operation
/// of each kind (every collective its own, ncclSend and ncclRecv together) connects its buffers,
/// nccl_connect_bytes more, as NCCL does with NCCL_RUNTIME_CONNECT (the default since 2.22).
std::uint64_t nccl_init_bytes();
std::uint64_t nccl_connect_bytes(int nranks);
/// Takes `bytes` of `comm`'s device for NCCL (lock held); ncclUnhandledCudaError, as NCCL reports
/// a cudaMalloc that failed, when the device has not that much free.
ncclResult_t nccl_take_memory(state& g, ncclComm_t comm, std::uint64_t bytes, const char* api);
/// The first operation of kind `kind` on `comm` connects its buffers (lock held).
ncclResult_t nccl_connect(state& g, ncclComm_t comm, const std::string& kind, const char* api);

/// Records `why` for ncclGetLastError (of `comm`, or of the thread when it is null) and returns
/// ncclInvalidArgument.
ncclResult_t invalid(ncclComm_t comm, const std::string& why);

/// The size of one element of `t`; 0 for a type the simulator does not know.
std::size_t type_size(ncclDataType_t t);
/// out[i] = op over the ranks of in[r][i], for `count` elements of type `t`.
void reduce_into(void* out, const std::vector<const void*>& in, std::size_t count, ncclDataType_t t, ncclRedOp_t op);

// --- the cross-process transport (nccl_remote.cpp) ---------------------------------------------

/// How long a cross-process wait (for the ranks at initialisation, for a peer's data) lasts before
/// it fails: DEVICEKIT_SIM_NCCL_TIMEOUT_S seconds (default 60).
std::chrono::milliseconds remote_timeout();
/// The rendezvous directory that a unique id names: under /dev/shm, or the temporary directory
/// ($TMPDIR, else /tmp) where /dev/shm is missing.
std::string rendezvous_dir(const std::string& id);
/// Registers `rank` of `nranks` (on `device`) in `dir` and waits, without the lock, until every
/// rank has registered. `spans_processes` then says whether some rank lives in another process.
/// On failure: an ncclResult_t and `why`.
ncclResult_t join_rendezvous(const std::string& dir, int nranks, int rank, int device, bool& spans_processes,
                             std::string& why);
/// Removes every registration of `dir` and the directory (all ranks have joined and none is in
/// another process: nothing there is needed any more).
void remove_rendezvous(const std::string& dir);
/// Rank `rank` is done with a cross-process clique (destroyed or aborted); the last of its
/// `nranks` ranks, in whatever process, removes the directory and whatever is left in it.
void leave_rendezvous(const std::string& dir, int rank, int nranks);
/// Leaves a mark in `dir` that rank `rank` aborted: the peers' waits end with ncclRemoteError.
void mark_aborted(const std::string& dir, int rank);

/// Why a cross-process wait ended without its data.
enum class remote_wait { ok, aborted, peer_aborted, timed_out, stopping };
/// Publishes `bytes` of `data` as file `name` of `dir` (written under a temporary name, then
/// renamed: a reader never sees part of it). False with `why` when the file system refuses.
bool publish(const std::string& dir, const std::string& name, const void* data, std::size_t bytes, std::string& why);
/// Waits (polling, with short sleeps, no lock held) for file `name` of `dir`, reads it into `out`
/// and removes it (each file has one reader). `c` is checked for an abort between polls.
remote_wait consume(const clique& c, const std::string& dir, const std::string& name, std::vector<unsigned char>& out);
/// The text of an asynchronous error for a wait that ended as `w` (not ok).
std::string describe(remote_wait w, const char* api, int rank, int peer);

}  // namespace devicekit::cuda_sim::detail

struct ncclComm {
  std::shared_ptr<devicekit::cuda_sim::detail::clique> group;
  int rank = 0;
  int device = 0;
  std::uint64_t next_collective = 0;
  bool aborted = false;
  std::string last_error;
  /// Across processes: messages sent to and received from each peer so far (ncclSend/ncclRecv
  /// name their files by these numbers, in the order the calls were issued).
  std::map<int, std::uint64_t> sent;
  std::map<int, std::uint64_t> received;
  /// NCCL's device memory for this rank as the simulator models it (nccl_memory below): counted in
  /// its device's bytes in use until the communicator is destroyed or aborted.
  std::uint64_t device_bytes = 0;
  std::set<std::string> connected;  ///< kinds of operation whose buffers are connected
};
