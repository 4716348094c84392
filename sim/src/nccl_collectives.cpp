// NCCL operations: all-reduce, broadcast, all-gather, reduce-scatter, send and recv.
// Locking: the calls hold the state's mutex (lock_state); a queued part takes it when it runs.
// Ranks in one process meet in memory (a rendezvous per collective, channels for send/recv). A
// clique whose ranks span processes (clique::remote) exchanges the same bytes through files
// instead (nccl_remote.cpp): each rank publishes what each peer needs, reads what it needs, and
// computes its own result; its queued part takes the state's mutex only to record an error.
#include "capture.hpp"
#include "nccl.hpp"
#include "scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
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

/// A collective across processes, as each rank runs it: `portion(from, to)` is the (offset, bytes)
/// of rank `from`'s send buffer that rank `to` needs (0 bytes: nothing); `finish(in, rank)` fills
/// rank `rank`'s receive buffer from `in[r]`, rank r's portion for it (its own from its send
/// buffer; null where the portion is empty).
struct remote_part {
  std::function<std::pair<std::size_t, std::size_t>(int from, int to)> portion;
  std::function<void(const std::vector<const unsigned char*>& in, int rank)> finish;
};

/// A remote operation that cannot complete (a peer is gone, aborted, or sent the wrong size):
/// records the asynchronous error of rank `rank` (what ncclCommGetAsyncError and ncclGetLastError
/// then report) and, as a real NCCL kernel whose peer is gone, holds its stream until the clique
/// is aborted (or the runtime shuts down). Returning at once would complete the stream with the
/// receive buffer unwritten, and a caller that waits for the stream would read it as a result.
void remote_failure(clique& c, int rank, ncclResult_t error, std::string text) {
  state& g = global();
  std::unique_lock lock(g.m);
  c.async_error[static_cast<std::size_t>(rank)] = error;
  c.async_text[static_cast<std::size_t>(rank)] = std::move(text);
  while (!c.aborted && !g.stopping) nccl_cv.wait_for(lock, std::chrono::milliseconds(20));
}

/// One rank's part of collective number `seq` of a remote clique, when its stream reaches it.
void run_remote(clique& c, const char* api, std::uint64_t seq, int rank, const collective_call& mine,
                const remote_part& part) {
  const auto file = [seq](int from, int to) {
    // Appended to a std::string: "c" + std::to_string(...) trips g++ 12's -Wrestrict at -O3.
    std::string name = "c";
    name.append(std::to_string(seq)).append("-").append(std::to_string(from)).append("to").append(std::to_string(to));
    return name;
  };
  const auto* send = static_cast<const unsigned char*>(mine.send);
  for (int to = 0; to < c.nranks; ++to) {
    const auto [offset, bytes] = part.portion(rank, to);
    if (to == rank || bytes == 0) continue;
    std::string why;
    if (!publish(c.dir, file(rank, to), send + offset, bytes, why)) {
      remote_failure(c, rank, ncclSystemError, std::string(api) + " on rank " + std::to_string(rank) + ": " + why);
      return;
    }
  }
  std::vector<std::vector<unsigned char>> received(static_cast<std::size_t>(c.nranks));
  std::vector<const unsigned char*> in(static_cast<std::size_t>(c.nranks), nullptr);
  for (int from = 0; from < c.nranks; ++from) {
    const auto [offset, bytes] = part.portion(from, rank);
    const auto f = static_cast<std::size_t>(from);
    if (bytes == 0) continue;
    if (from == rank) {
      in[f] = send + offset;
      continue;
    }
    const remote_wait w = consume(c, c.dir, file(from, rank), received[f]);
    if (w == remote_wait::stopping) return;
    if (w != remote_wait::ok) {
      remote_failure(c, rank, ncclRemoteError, describe(w, api, rank, from));
      return;
    }
    if (received[f].size() != bytes) {
      remote_failure(c, rank, ncclRemoteError,
                     std::string(api) + " on rank " + std::to_string(rank) + ": rank " + std::to_string(from) +
                         " sent " + std::to_string(received[f].size()) + " bytes where " + std::to_string(bytes) +
                         " were expected: the ranks called it with different counts");
      return;
    }
    in[f] = received[f].data();
  }
  part.finish(in, rank);
}

/// Queues one rank's part of a collective; `compute` runs once, on the last rank to arrive,
/// with every rank's buffers. The rank's operation reads `send_bytes` of its send buffer and
/// writes `recv_bytes` of its receive buffer in stream order (what the race detector checks).
ncclResult_t collective(const char* api, ncclComm_t comm, cudaStream_t stream, collective_call mine,
                        std::size_t send_bytes, std::size_t recv_bytes,
                        std::function<void(const std::vector<collective_call>&)> compute, remote_part remote) {
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
  if (comm->group->remote && s->capture != nullptr) {
    (void)invalid(comm, std::string(api) +
                            ": capturing an NCCL operation of a communicator whose ranks span processes is not "
                            "supported by the simulator (its cross-process transport runs eagerly)");
    return ncclInvalidUsage;
  }
  if (const ncclResult_t r = nccl_connect(g, comm, api, api); r != ncclSuccess) return r;
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
  if (c->remote) {
    enqueue(g, s,
            [c, api, seq, rank, device, faulty, fault_error, mine, remote = std::move(remote)] {
              if (faulty) {
                std::unique_lock lock(global().m);
                stall(global(), lock, *c, rank, device, fault_error);
                return;
              }
              run_remote(*c, api, seq, rank, mine, remote);
            },
            {}, api, {{mine.send, send_bytes, false, "send buffer"}, {mine.recv, recv_bytes, true, "receive buffer"}});
    return ncclSuccess;
  }
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
  /// A remote clique's: the message's file (nccl_remote.cpp), numbered per (sender, receiver) in
  /// the order the calls were issued, as NCCL matches sends and receives.
  std::string file{};
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
  if (comm->group->remote && s->capture != nullptr) {
    (void)invalid(comm, std::string(api) +
                            ": capturing an NCCL operation of a communicator whose ranks span processes is not "
                            "supported by the simulator (its cross-process transport runs eagerly)");
    return ncclInvalidUsage;
  }
  if (const ncclResult_t r = nccl_connect(g, comm, "p2p", api); r != ncclSuccess) return r;
  // Captured, each launch sends or receives once more on the same channel, in order.
  p2p_side side{comm->group, comm->rank, comm->device, count * type_size(datatype)};
  if (comm->group->remote) {
    const int from = receive ? peer : comm->rank;
    const int to = receive ? comm->rank : peer;
    const std::uint64_t n = receive ? comm->received[peer]++ : comm->sent[peer]++;
    side.file = "p" + std::to_string(from) + "to" + std::to_string(to) + "-" + std::to_string(n);
  }
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
                    count * type_size(datatype),
                    [=](const std::vector<collective_call>& calls) {
                      std::vector<const void*> in;
                      for (const auto& c : calls) in.push_back(c.send);
                      std::vector<unsigned char> result(count * type_size(datatype));
                      reduce_into(result.data(), in, count, datatype, op);
                      for (const auto& c : calls) std::memcpy(c.recv, result.data(), result.size());
                    },
                    {[bytes = count * type_size(datatype)](int, int) {
                       return std::pair<std::size_t, std::size_t>{0, bytes};
                     },
                     [=](const std::vector<const unsigned char*>& in, int) {
                       // Element by element, every rank's value read before the result is stored:
                       // in place (recvbuff == sendbuff) is safe.
                       reduce_into(recvbuff, std::vector<const void*>(in.begin(), in.end()), count, datatype, op);
                     }});
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
                    },
                    {[root, bytes = count * type_size(datatype)](int from, int) {
                       return std::pair<std::size_t, std::size_t>{0, from == root ? bytes : 0};
                     },
                     [=](const std::vector<const unsigned char*>& in, int) {
                       const std::size_t bytes = count * type_size(datatype);
                       if (bytes != 0 && in[static_cast<std::size_t>(root)] != recvbuff) {
                         std::memmove(recvbuff, in[static_cast<std::size_t>(root)], bytes);
                       }
                     }});
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
      },
      {[bytes = sendcount * type_size(datatype)](int, int) {
         return std::pair<std::size_t, std::size_t>{0, bytes};
       },
       [=](const std::vector<const unsigned char*>& in, int rank) {
         const std::size_t bytes = sendcount * type_size(datatype);
         if (bytes == 0) return;
         auto* out = static_cast<unsigned char*>(recvbuff);
         // This rank's own part first: in place, sendbuff is recvbuff + rank * bytes.
         std::memmove(out + static_cast<std::size_t>(rank) * bytes, in[static_cast<std::size_t>(rank)], bytes);
         for (std::size_t r = 0; r < in.size(); ++r) {
           if (static_cast<int>(r) != rank) std::memcpy(out + r * bytes, in[r], bytes);
         }
       }});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (type_size(datatype) == 0 || op < ncclSum || op >= ncclNumOps)
    return invalid(comm, "ncclReduceScatter: bad type or op");
  return collective(
      "ncclReduceScatter", comm, stream, {sendbuff, recvbuff},
      static_cast<std::size_t>(comm != nullptr ? comm->group->nranks : 0) * recvcount * type_size(datatype),
      recvcount * type_size(datatype),
      [=](const std::vector<collective_call>& calls) {
        const std::size_t n = calls.size();
        std::vector<const void*> in;
        for (const auto& c : calls) in.push_back(c.send);
        std::vector<unsigned char> result(n * recvcount * type_size(datatype));
        reduce_into(result.data(), in, n * recvcount, datatype, op);
        for (std::size_t r = 0; r < n; ++r) {
          std::memcpy(calls[r].recv, result.data() + r * recvcount * type_size(datatype),
                      recvcount * type_size(datatype));
        }
      },
      {[bytes = recvcount * type_size(datatype)](int, int to) {
         return std::pair<std::size_t, std::size_t>{static_cast<std::size_t>(to) * bytes, bytes};
       },
       [=](const std::vector<const unsigned char*>& in, int) {
         // In place, recvbuff is sendbuff + rank * bytes: element by element, as for all-reduce.
         reduce_into(recvbuff, std::vector<const void*>(in.begin(), in.end()), recvcount, datatype, op);
       }});
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point("ncclSend", sendbuff, false, count, datatype, peer, comm, stream,
                        [peer, sendbuff](const p2p_side& side) {
                          if (side.c->remote) {
                            std::string why;
                            if (!publish(side.c->dir, side.file, sendbuff, side.bytes, why)) {
                              remote_failure(*side.c, side.rank, ncclSystemError,
                                             "ncclSend on rank " + std::to_string(side.rank) + ": " + why);
                            }
                            return;
                          }
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
        if (side.c->remote) {
          std::vector<unsigned char> msg;
          const remote_wait w = consume(*side.c, side.c->dir, side.file, msg);
          if (w == remote_wait::ok) {
            std::memcpy(recvbuff, msg.data(), std::min(side.bytes, msg.size()));
          } else if (w != remote_wait::stopping) {
            remote_failure(*side.c, to, ncclRemoteError, describe(w, "ncclRecv", to, peer));
          }
          return;
        }
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
