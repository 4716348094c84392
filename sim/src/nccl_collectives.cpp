// NCCL operations: all-reduce, broadcast, all-gather, reduce-scatter, send and recv.
// Locking: the calls hold the state's mutex (lock_state); a queued part takes it when it runs.
#include "capture.hpp"
#include "nccl.hpp"
#include "scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace devicekit::cuda_sim::detail {
namespace {

/// Whether the operation being issued on `device` is the one an injected fault picks (lock held);
/// `error` is then what it reports (0: nothing, a hang). See nccl_fault in state.hpp.
bool take_fault(state& g, int device, int& error) {
  auto it = g.nccl_faults.find(device);
  if (it == g.nccl_faults.end()) return false;
  if (it->second.remaining > 0) {
    --it->second.remaining;
    return false;
  }
  error = it->second.error;
  g.nccl_faults.erase(it);
  return true;
}

/// The faulty operation, when its stream reaches it (lock held): reports the error and holds
/// the stream until the clique is aborted (or the process ends).
void stall(state& g, std::unique_lock<std::mutex>& lock, clique& c, int rank, int device, int error) {
  if (error != 0) {
    c.async_error[static_cast<std::size_t>(rank)] = static_cast<ncclResult_t>(error);
    c.async_text[static_cast<std::size_t>(rank)] = "simulated asynchronous error on rank " + std::to_string(rank) +
                                                   " (device " + std::to_string(device) +
                                                   "), injected by nccl_async_error_after or DEVICEKIT_SIM_NCCL_FAULT";
  }
  while (!c.aborted && !g.stopping) nccl_cv.wait_for(lock, std::chrono::milliseconds(20));
}

/// Queues one rank's part of a collective; `compute` runs once, on the last rank to arrive,
/// with every rank's buffers. The rank's operation reads `send_bytes` of its send buffer and
/// writes `recv_bytes` of its receive buffer in stream order (what the race detector checks).
ncclResult_t collective(const char* api, ncclComm_t comm, cudaStream_t stream, collective_call mine,
                        std::size_t send_bytes, std::size_t recv_bytes,
                        std::function<void(const std::vector<collective_call>&)> compute) {
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
  if (torn_down) return ncclSystemError;
  if (const int e = static_cast<int>(injected(g, api)); e != 0) {
    (void)invalid(comm, std::string(api) + ": injected failure");
    return static_cast<ncclResult_t>(e);
  }
  if (comm == nullptr) return invalid(comm, std::string(api) + ": comm is NULL");
  if (comm->aborted) return invalid(comm, std::string(api) + ": the communicator was aborted");
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, api, err);
  if (s == nullptr) return invalid(comm, std::string(api) + ": invalid stream");
  if (s->device != comm->device) {
    return invalid(comm, std::string(api) + ": the stream is on another device than the communicator");
  }
  if (capture_use(g, s) != cudaSuccess) {
    (void)invalid(comm, std::string(api) +
                            ": the stream's capture was invalidated, or it is the legacy stream "
                            "while a blocking stream captures");
    return ncclInvalidUsage;
  }
  const std::uint64_t seq = comm->next_collective++;
  // Captured, the operation runs once per launch of its graph: the k-th launch of each rank's
  // graph meets the k-th launch of its peers' (a rendezvous per launch, apart from the eager
  // sequence numbers). An injected fault picked at the capture applies to every launch.
  std::shared_ptr<std::uint64_t> launches = s->capture != nullptr ? std::make_shared<std::uint64_t>(0) : nullptr;
  std::shared_ptr<clique> c = comm->group;
  const int rank = comm->rank;
  const int device = comm->device;
  int fault_error = 0;
  const bool faulty = take_fault(g, device, fault_error);
  enqueue(g, s,
          [c, seq, launches, rank, device, faulty, fault_error, mine, compute = std::move(compute)] {
            state& gs = global();
            std::unique_lock lock(gs.m);
            if (faulty) {
              stall(gs, lock, *c, rank, device, fault_error);
              return;
            }
            const std::uint64_t key = launches ? (std::uint64_t{1} << 63) | ((*launches)++ << 32) | seq : seq;
            rendezvous& rv = c->collectives[key];
            if (rv.calls.empty()) rv.calls.resize(static_cast<std::size_t>(c->nranks));
            rv.calls[static_cast<std::size_t>(rank)] = mine;
            if (++rv.arrived == c->nranks) {
              lock.unlock();
              compute(rv.calls);
              lock.lock();
              rv.done = true;
              nccl_cv.notify_all();
            } else {
              // Polled for the runtime's teardown too: a rank stuck behind a fault must not keep the
              // process from exiting when a test never aborted it.
              while (!nccl_cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return rv.done || c->aborted; })) {
                if (gs.stopping) break;
              }
              if (!rv.done) {  // a peer aborted: this rank's part is dropped, as ncclCommAbort does
                c->async_error[static_cast<std::size_t>(rank)] = ncclRemoteError;
                c->async_text[static_cast<std::size_t>(rank)] = "a peer aborted the communicator during a collective";
                --rv.arrived;
                return;
              }
            }
            if (--rv.arrived == 0) c->collectives.erase(key);  // the last one out
          },
          {}, api, {{mine.send, send_bytes, false, "send buffer"}, {mine.recv, recv_bytes, true, "receive buffer"}});
  return ncclSuccess;
}

/// One rank's side of a send or a receive, as its queued operation sees it.
struct p2p_side {
  std::shared_ptr<clique> c;
  int rank = 0;
  int device = 0;
  std::size_t bytes = 0;
  bool faulty = false;  ///< an injected fault picked it: it stalls (see stall)
  int fault_error = 0;
};

/// Queues one rank's side of a send or a receive (`api`) of `count` elements with `peer`, after
/// the checks both make (lock taken here). When the stream reaches it, `run` moves the data,
/// unless an injected fault picked the operation. A send reads `buffer`, a receive writes it.
ncclResult_t point_to_point(const char* api, const void* buffer, bool receive, std::size_t count,
                            ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream,
                            std::function<void(const p2p_side&)> run) {
  state& g = global();
  auto lk = lock_state();
  if (comm == nullptr || peer < 0 || peer >= comm->group->nranks || type_size(datatype) == 0) {
    return invalid(comm, std::string(api) + ": bad peer or type");
  }
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, api, err);
  if (s == nullptr) return invalid(comm, std::string(api) + ": invalid stream");
  if (capture_use(g, s) != cudaSuccess) {
    (void)invalid(comm, std::string(api) +
                            ": the stream's capture was invalidated, or it is the legacy stream "
                            "while a blocking stream captures");
    return ncclInvalidUsage;
  }
  // Captured, each launch sends or receives once more on the same channel, in order.
  p2p_side side{comm->group, comm->rank, comm->device, count * type_size(datatype)};
  side.faulty = take_fault(g, side.device, side.fault_error);
  const std::size_t bytes = side.bytes;
  enqueue(g, s,
          [side = std::move(side), run = std::move(run)] {
            if (side.faulty) {
              std::unique_lock lock(global().m);
              stall(global(), lock, *side.c, side.rank, side.device, side.fault_error);
              return;
            }
            run(side);
          },
          {}, api, {{buffer, bytes, receive, receive ? "receive buffer" : "send buffer"}});
  return ncclSuccess;
}

}  // namespace
}  // namespace devicekit::cuda_sim::detail

using namespace devicekit::cuda_sim::detail;

extern "C" {

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (type_size(datatype) == 0 || op < ncclSum || op >= ncclNumOps)
    return invalid(comm, "ncclAllReduce: bad type or op");
  return collective("ncclAllReduce", comm, stream, {sendbuff, recvbuff}, count * type_size(datatype),
                    count * type_size(datatype), [=](const std::vector<collective_call>& calls) {
                      std::vector<const void*> in;
                      for (const auto& c : calls) in.push_back(c.send);
                      std::vector<unsigned char> result(count * type_size(datatype));
                      reduce_into(result.data(), in, count, datatype, op);
                      for (const auto& c : calls) std::memcpy(c.recv, result.data(), result.size());
                    });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr || root < 0 || root >= comm->group->nranks || type_size(datatype) == 0) {
    return invalid(comm, "ncclBroadcast: bad root or type");
  }
  // Only the root's send buffer is read ("sendbuff ... is only used on rank root").
  return collective("ncclBroadcast", comm, stream, {sendbuff, recvbuff},
                    comm->rank == root ? count * type_size(datatype) : 0, count * type_size(datatype),
                    [=](const std::vector<collective_call>& calls) {
                      const std::size_t bytes = count * type_size(datatype);
                      std::vector<unsigned char> data(
                          static_cast<const unsigned char*>(calls[static_cast<std::size_t>(root)].send),
                          static_cast<const unsigned char*>(calls[static_cast<std::size_t>(root)].send) + bytes);
                      for (const auto& c : calls) std::memcpy(c.recv, data.data(), bytes);
                    });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (type_size(datatype) == 0) return invalid(comm, "ncclAllGather: bad type");
  return collective(
      "ncclAllGather", comm, stream, {sendbuff, recvbuff}, sendcount * type_size(datatype),
      static_cast<std::size_t>(comm != nullptr ? comm->group->nranks : 0) * sendcount * type_size(datatype),
      [=](const std::vector<collective_call>& calls) {
        const std::size_t bytes = sendcount * type_size(datatype);
        std::vector<unsigned char> all;
        for (const auto& c : calls) {
          all.insert(all.end(), static_cast<const unsigned char*>(c.send),
                     static_cast<const unsigned char*>(c.send) + bytes);
        }
        for (const auto& c : calls) std::memcpy(c.recv, all.data(), all.size());
      });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (type_size(datatype) == 0 || op < ncclSum || op >= ncclNumOps)
    return invalid(comm, "ncclReduceScatter: bad type or op");
  return collective(
      "ncclReduceScatter", comm, stream, {sendbuff, recvbuff},
      static_cast<std::size_t>(comm != nullptr ? comm->group->nranks : 0) * recvcount * type_size(datatype),
      recvcount * type_size(datatype), [=](const std::vector<collective_call>& calls) {
        const std::size_t n = calls.size();
        std::vector<const void*> in;
        for (const auto& c : calls) in.push_back(c.send);
        std::vector<unsigned char> result(n * recvcount * type_size(datatype));
        reduce_into(result.data(), in, n * recvcount, datatype, op);
        for (std::size_t r = 0; r < n; ++r) {
          std::memcpy(calls[r].recv, result.data() + r * recvcount * type_size(datatype),
                      recvcount * type_size(datatype));
        }
      });
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point("ncclSend", sendbuff, false, count, datatype, peer, comm, stream,
                        [peer, sendbuff](const p2p_side& side) {
                          std::vector<unsigned char> msg(static_cast<const unsigned char*>(sendbuff),
                                                         static_cast<const unsigned char*>(sendbuff) + side.bytes);
                          std::lock_guard lock(global().m);
                          side.c->channels[{side.rank, peer}].push_back(std::move(msg));
                          nccl_cv.notify_all();
                        });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(
      "ncclRecv", recvbuff, true, count, datatype, peer, comm, stream, [peer, recvbuff](const p2p_side& side) {
        const int to = side.rank;
        std::unique_lock lock(global().m);
        auto& q = side.c->channels[{peer, to}];
        while (!nccl_cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return !q.empty() || side.c->aborted; })) {
          if (global().stopping) break;  // the runtime's teardown, as in collective()
        }
        if (q.empty()) {
          side.c->async_error[static_cast<std::size_t>(to)] = ncclRemoteError;
          side.c->async_text[static_cast<std::size_t>(to)] = "a peer aborted the communicator before its send came";
          return;
        }
        std::vector<unsigned char> msg = std::move(q.front());
        q.pop_front();
        lock.unlock();
        std::memcpy(recvbuff, msg.data(), std::min(side.bytes, msg.size()));
      });
}

}  // extern "C"
