// NCCL over the simulated GPUs: communicators made by ncclCommInitAll (one thread, several
// devices) or ncclCommInitRank (one rank per thread, sharing a unique id), the collectives
// devicekit uses and point-to-point send/recv. Each operation is queued on its rank's stream;
// when a rank's stream reaches a collective it waits there for the other ranks (a rendezvous
// per collective, by sequence number), and the last to arrive computes the result for all. A
// send hands a copy of its buffer to the receiver's channel when its stream reaches it; a recv
// waits for the matching send. Groups (ncclGroupStart/End) need nothing more: nothing blocks the
// calling thread.
//
// Faults (control.hpp: nccl_async_error_after, nccl_hang_after; DEVICEKIT_SIM_NCCL_FAULT): the
// chosen operation never moves its data. When its stream reaches it, it records the error for
// ncclCommGetAsyncError (none for a hang) and holds the stream, as a stuck NCCL kernel does,
// until the clique is aborted (ncclCommAbort makes real NCCL's kernels exit too); its peers wait
// for it in the rendezvous, also until the abort.
#include "state.hpp"

#include <cuda_fp8.h>  // host conversions of the fp8 formats (host-compilable)
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <string>

namespace devicekit::cuda_sim::detail {
namespace {

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

}  // namespace
}  // namespace devicekit::cuda_sim::detail

struct ncclComm {
  std::shared_ptr<devicekit::cuda_sim::detail::clique> group;
  int rank = 0;
  int device = 0;
  std::uint64_t next_collective = 0;
  bool aborted = false;
  std::string last_error;
};

namespace devicekit::cuda_sim::detail {
namespace {

std::condition_variable nccl_cv;  // announces arrivals and messages (with the state's mutex)
std::map<std::string, std::pair<std::shared_ptr<clique>, int>> pending_ids;  // unique id -> clique, ranks joined
std::uint64_t next_id = 1;
thread_local int group_depth = 0;
thread_local std::string last_error_text;

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

// ncclFloat8e4m3 and ncclFloat8e5m2 appeared in NCCL 2.24.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
#  define DEVICEKIT_SIM_NCCL_FP8 1
#else
#  define DEVICEKIT_SIM_NCCL_FP8 0
#endif

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
#if DEVICEKIT_SIM_NCCL_FP8
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
#endif
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u;
  int exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  float v = 0;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return sign != 0 ? -v : v;
}

std::uint16_t float_to_half(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant != 0 ? 0x200u : 0u));
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    std::uint32_t h = mant >> shift;
    if ((mant >> (shift - 1)) & 1u) ++h;  // round half up (enough for a simulator)
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  if (mant & 0x1000u) ++h;
  return static_cast<std::uint16_t>(h);
}

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &x, 4);
  return f;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t x = 0;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

#if DEVICEKIT_SIM_NCCL_FP8
/// An fp8 value (E4M3 or E5M2, `kind`) as float, through CUDA's exact fp8 -> half conversion.
float fp8_to_float(std::uint8_t v, __nv_fp8_interpretation_t kind) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), kind);
  return half_to_float(h.x);
}

/// A float rounded to fp8 (nearest even), saturating to the largest finite value as NCCL's fp8
/// reductions do (they convert with __NV_SATFINITE).
std::uint8_t float_to_fp8(float f, __nv_fp8_interpretation_t kind) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, kind));
}
#endif

template <class T>
T combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
    case ncclAvg: return static_cast<T>(a + b);
    case ncclProd: return static_cast<T>(a * b);
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return a;
  }
}

/// out[i] = op over the ranks of in[r][i], for `count` elements of type `t`.
void reduce_into(void* out, const std::vector<const void*>& in, std::size_t count, ncclDataType_t t, ncclRedOp_t op) {
  const auto n = in.size();
  auto run = [&](auto tag, auto load, auto store) {
    using V = decltype(tag);
    for (std::size_t i = 0; i < count; ++i) {
      V acc = load(in[0], i);
      for (std::size_t r = 1; r < n; ++r) acc = combine<V>(acc, load(in[r], i), op);
      if (op == ncclAvg) acc = static_cast<V>(acc / static_cast<V>(n));
      store(out, i, acc);
    }
  };
  auto plain = [&](auto tag) {
    using V = decltype(tag);
    run(
        tag, [](const void* p, std::size_t i) { return static_cast<const V*>(p)[i]; },
        [](void* p, std::size_t i, V v) { static_cast<V*>(p)[i] = v; });
  };
  switch (t) {
    case ncclInt8: plain(std::int8_t{}); break;
    case ncclUint8: plain(std::uint8_t{}); break;
    case ncclInt32: plain(std::int32_t{}); break;
    case ncclUint32: plain(std::uint32_t{}); break;
    case ncclInt64: plain(std::int64_t{}); break;
    case ncclUint64: plain(std::uint64_t{}); break;
    case ncclFloat32: plain(float{}); break;
    case ncclFloat64: plain(double{}); break;
    case ncclFloat16:
      run(
          float{}, [](const void* p, std::size_t i) { return half_to_float(static_cast<const std::uint16_t*>(p)[i]); },
          [](void* p, std::size_t i, float v) { static_cast<std::uint16_t*>(p)[i] = float_to_half(v); });
      break;
    case ncclBfloat16:
      run(
          float{}, [](const void* p, std::size_t i) { return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]); },
          [](void* p, std::size_t i, float v) { static_cast<std::uint16_t*>(p)[i] = float_to_bf16(v); });
      break;
#if DEVICEKIT_SIM_NCCL_FP8
    // Computed in float over all ranks and rounded once (real NCCL accumulates in half on the
    // way round the ring; sums exact in half, as the tests use, agree bit for bit).
    case ncclFloat8e4m3:
      run(
          float{},
          [](const void* p, std::size_t i) { return fp8_to_float(static_cast<const std::uint8_t*>(p)[i], __NV_E4M3); },
          [](void* p, std::size_t i, float v) { static_cast<std::uint8_t*>(p)[i] = float_to_fp8(v, __NV_E4M3); });
      break;
    case ncclFloat8e5m2:
      run(
          float{},
          [](const void* p, std::size_t i) { return fp8_to_float(static_cast<const std::uint8_t*>(p)[i], __NV_E5M2); },
          [](void* p, std::size_t i, float v) { static_cast<std::uint8_t*>(p)[i] = float_to_fp8(v, __NV_E5M2); });
      break;
#endif
    default: break;
  }
}

ncclResult_t invalid(ncclComm_t comm, const std::string& why) {
  last_error_text = why;
  if (comm != nullptr) comm->last_error = why;
  return ncclInvalidArgument;
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
  if (const int e = injected_error(g, api); e != 0) {
    (void)invalid(comm, std::string(api) + ": injected failure");
    return static_cast<ncclResult_t>(e);
  }
  if (comm == nullptr) return invalid(comm, std::string(api) + ": comm is NULL");
  if (comm->aborted) return invalid(comm, std::string(api) + ": the communicator was aborted");
  cudaError_t err = cudaSuccess;
  stream_obj* s = stream_of(g, stream, api, err);
  if (s == nullptr) return invalid(comm, std::string(api) + ": invalid stream");
  if (s->device != comm->device) {
    return invalid(comm, std::string(api) + ": the stream is on another device than the communicator");
  }
  const std::uint64_t seq = comm->next_collective++;
  std::shared_ptr<clique> c = comm->group;
  const int rank = comm->rank;
  const int device = comm->device;
  int fault_error = 0;
  const bool faulty = take_fault(g, device, fault_error);
  queue_work(g, s,
             [c, seq, rank, device, faulty, fault_error, mine, compute = std::move(compute)] {
               state& gs = global();
               std::unique_lock lock(gs.m);
               if (faulty) {
                 stall(gs, lock, *c, rank, device, fault_error);
                 return;
               }
               rendezvous& rv = c->collectives[seq];
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
                   c->async_text[static_cast<std::size_t>(rank)] =
                       "a peer aborted the communicator during a collective";
                   --rv.arrived;
                   return;
                 }
               }
               if (--rv.arrived == 0) c->collectives.erase(seq);  // the last one out
             },
             api, {{mine.send, send_bytes, false, "send buffer"}, {mine.recv, recv_bytes, true, "receive buffer"}});
  return ncclSuccess;
}

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

}  // namespace
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
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
  std::memset(uniqueId->internal, 0, NCCL_UNIQUE_ID_BYTES);
  std::snprintf(uniqueId->internal, NCCL_UNIQUE_ID_BYTES, "devicekit-sim-nccl-%llu",
                static_cast<unsigned long long>(next_id++));
  return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev <= 0) return invalid(nullptr, "ncclCommInitAll: comms is NULL or ndev < 1");
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
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
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (comm == nullptr || nranks <= 0 || rank < 0 || rank >= nranks) {
    return invalid(nullptr, "ncclCommInitRank: invalid nranks or rank");
  }
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
  const std::string id(commId.internal, strnlen(commId.internal, NCCL_UNIQUE_ID_BYTES));
  auto& entry = pending_ids[id];
  if (!entry.first) {
    entry.first = std::make_shared<clique>();
    entry.first->nranks = nranks;
  }
  std::shared_ptr<clique> c = entry.first;
  if (c->nranks != nranks) return invalid(nullptr, "ncclCommInitRank: ranks disagree on nranks");
  *comm = make_comm(c, rank, current_device());
  ++entry.second;
  nccl_cv.notify_all();
  // Outside a group, initialisation waits for every rank (ncclCommInitRank is collective).
  if (group_depth == 0) {
    nccl_cv.wait(lk, [&] { return pending_ids[id].second >= nranks; });
  }
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
  --comm->group->members;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
  comm->aborted = true;
  comm->group->aborted = true;  // ranks waiting in a collective give up
  nccl_cv.notify_all();
  --comm->group->members;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (comm == nullptr || asyncError == nullptr) return ncclInvalidArgument;
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
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
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
  if (comm == nullptr || peer < 0 || peer >= comm->group->nranks || type_size(datatype) == 0) {
    return invalid(comm, "ncclSend: bad peer or type");
  }
  cudaError_t err = cudaSuccess;
  stream_obj* s = stream_of(g, stream, "ncclSend", err);
  if (s == nullptr) return invalid(comm, "ncclSend: invalid stream");
  const std::size_t bytes = count * type_size(datatype);
  std::shared_ptr<clique> c = comm->group;
  const int from = comm->rank;
  const int device = comm->device;
  int fault_error = 0;
  const bool faulty = take_fault(g, device, fault_error);
  queue_work(g, s,
             [c, from, peer, sendbuff, bytes, device, faulty, fault_error] {
               if (faulty) {
                 std::unique_lock lock(global().m);
                 stall(global(), lock, *c, from, device, fault_error);
                 return;
               }
               std::vector<unsigned char> msg(static_cast<const unsigned char*>(sendbuff),
                                              static_cast<const unsigned char*>(sendbuff) + bytes);
               std::lock_guard lock(global().m);
               c->channels[{from, peer}].push_back(std::move(msg));
               nccl_cv.notify_all();
             },
             "ncclSend", {{sendbuff, bytes, false, "send buffer"}});
  return ncclSuccess;
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  state& g = global();
  bool torn_down = false;
  auto lk = enter(g, torn_down);
  if (comm == nullptr || peer < 0 || peer >= comm->group->nranks || type_size(datatype) == 0) {
    return invalid(comm, "ncclRecv: bad peer or type");
  }
  cudaError_t err = cudaSuccess;
  stream_obj* s = stream_of(g, stream, "ncclRecv", err);
  if (s == nullptr) return invalid(comm, "ncclRecv: invalid stream");
  const std::size_t bytes = count * type_size(datatype);
  std::shared_ptr<clique> c = comm->group;
  const int to = comm->rank;
  const int device = comm->device;
  int fault_error = 0;
  const bool faulty = take_fault(g, device, fault_error);
  queue_work(
      g, s,
      [c, to, peer, recvbuff, bytes, device, faulty, fault_error] {
        std::unique_lock lock(global().m);
        if (faulty) {
          stall(global(), lock, *c, to, device, fault_error);
          return;
        }
        auto& q = c->channels[{peer, to}];
        while (!nccl_cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return !q.empty() || c->aborted; })) {
          if (global().stopping) break;  // the runtime's teardown, as in collective()
        }
        if (q.empty()) {
          c->async_error[static_cast<std::size_t>(to)] = ncclRemoteError;
          c->async_text[static_cast<std::size_t>(to)] = "a peer aborted the communicator before its send came";
          return;
        }
        std::vector<unsigned char> msg = std::move(q.front());
        q.pop_front();
        lock.unlock();
        std::memcpy(recvbuff, msg.data(), std::min(bytes, msg.size()));
      },
      "ncclRecv", {{recvbuff, bytes, true, "receive buffer"}});
  return ncclSuccess;
}

}  // extern "C"
