#pragma once
// NCCL's shared pieces: cliques (a communicator set's ranks), rendezvous, channels, communicators.
// Locking: all of it is guarded by the state's mutex; nccl_cv announces arrivals and messages.
#include "entry.hpp"
#include "state.hpp"

#include <nccl.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
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
};

/// Announces arrivals, messages and aborts (waited on with the state's mutex).
extern std::condition_variable nccl_cv;

/// Locks the state for an NCCL call (reading the configuration at the first call).
inline std::unique_lock<std::mutex> lock_state() {
  bool torn_down = false;
  return enter(global(), torn_down);
}

/// Records `why` for ncclGetLastError (of `comm`, or of the thread when it is null) and returns
/// ncclInvalidArgument.
ncclResult_t invalid(ncclComm_t comm, const std::string& why);

/// The size of one element of `t`; 0 for a type the simulator does not know.
std::size_t type_size(ncclDataType_t t);
/// out[i] = op over the ranks of in[r][i], for `count` elements of type `t`.
void reduce_into(void* out, const std::vector<const void*>& in, std::size_t count, ncclDataType_t t, ncclRedOp_t op);

}  // namespace devicekit::cuda_sim::detail

struct ncclComm {
  std::shared_ptr<devicekit::cuda_sim::detail::clique> group;
  int rank = 0;
  int device = 0;
  std::uint64_t next_collective = 0;
  bool aborted = false;
  std::string last_error;
};
