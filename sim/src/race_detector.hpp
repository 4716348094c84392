#pragma once
// The stream-order race detector's types and calls: clocks, agents, accesses and their records.
// Locking: called with the state's mutex held; race_detector.cpp says how happens-before is built.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace devicekit::cuda_sim::detail {

struct state;
struct stream_obj;

/// A vector clock, indexed by agent (a stream or a host thread that called the API).
using vclock = std::vector<std::uint64_t>;

/// One queued operation as the race detector sees it: its agent (the stream), its epoch (the
/// stream's own component) and its full clock (what happened before it).
struct op_info {
  int agent = -1;
  std::uint64_t epoch = 0;
  std::shared_ptr<const vclock> clock;
  const char* api = "";
  stream_obj* stream = nullptr;
};

/// A memory access an API call makes: on its stream when the stream reaches it, or, with
/// `by_host_at_call`, by the calling host thread during the call (a source read "during the API
/// call"). Only device memory and pinned host memory are tracked.
struct planned_access {
  const void* p = nullptr;
  std::size_t n = 0;
  bool write = false;
  const char* what = "";
  bool by_host_at_call = false;
};

/// One recorded access of an allocation: who (agent, epoch, clock), what and where.
struct access_record {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  bool write = false;
  int agent = -1;
  std::uint64_t epoch = 0;
  std::shared_ptr<const vclock> clock;
  const char* api = "";
  const char* what = "";
  stream_obj* stream = nullptr;  ///< nullptr: a host thread
};

/// A host thread that called the API, as an agent of the detector.
struct host_agent {
  int id = -1;
  vclock clock;
};

/// The operation a stream worker is running on this thread (nullptr elsewhere): a declared
/// access from a host function belongs to it.
inline thread_local const op_info* tl_current_op = nullptr;

/// `into` = the component-wise maximum of `into` and `from`.
void join_into(vclock& into, const vclock& from);
/// The calling thread as an agent, up to date with what any host thread has waited for.
host_agent& host_of(state& g);
/// The calling thread waited for the operations `c` covers.
void host_joins(state& g, const vclock& c);
/// The host waited for everything queued on `s` so far.
void host_joins_stream(state& g, const stream_obj* s);
/// An access by the calling host thread, now.
void host_access(state& g, const planned_access& p, const char* api);
/// An access of queued operation `op`.
void op_access(state& g, const op_info& op, const planned_access& p);

}  // namespace devicekit::cuda_sim::detail
