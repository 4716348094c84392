// The stream-order race detector: happens-before as the CUDA runtime defines it, vector clocks.
// Locking: every function runs with the state's mutex held.
// Agents are the streams and the host threads that call the API. An operation queued on a stream is
// ordered after what came before it on that stream, after what its calling thread did before the
// call, and after its dependencies: the implicit ones of the legacy default stream ("Stream
// synchronization behavior") and the event of cudaStreamWaitEvent ("The stream stream will wait
// only for the completion of the most recent host call to cudaEventRecord() on event"). A host
// thread is ordered after what it waited for: cudaStreamSynchronize, cudaEventSynchronize, a query
// that returned cudaSuccess, cudaDeviceSynchronize, and the calls that synchronise (cudaMemcpy,
// cudaFree...). Every access to device or pinned host memory is checked against the earlier ones of
// its allocation when it is queued (or when the host makes it), so the verdict depends on the
// program's order of calls, never on the schedule: two accesses, one a write, ordered neither way
// are a data race, undefined behaviour.
#include "race_detector.hpp"

#include "entry.hpp"
#include "memory_model.hpp"
#include "state.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

namespace devicekit::cuda_sim::detail {
namespace {

thread_local host_agent* tl_host = nullptr;

std::uint64_t component(const vclock& c, int agent) {
  return static_cast<std::size_t>(agent) < c.size() ? c[static_cast<std::size_t>(agent)] : 0;
}

}  // namespace

void join_into(vclock& into, const vclock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

/// The calling thread as an agent, up to date. Host threads order each other through C++
/// (thread start and join, mutexes, condition variables), which the simulator cannot see: a
/// caching pool may take a block on one thread after another thread waited for its last use.
/// So what any host thread has synchronised with (host_seen) counts as known to every host
/// thread from its next call on; races between host threads themselves are a C++ matter (a
/// thread sanitizer's), not the stream order's.
host_agent& host_of(state& g) {
  if (tl_host == nullptr) {
    auto h = std::make_unique<host_agent>();
    h->id = g.agents++;
    h->clock.resize(static_cast<std::size_t>(g.agents), 0);
    h->clock[static_cast<std::size_t>(h->id)] = 1;
    tl_host = h.get();
    g.hosts.push_back(std::move(h));
  }
  join_into(tl_host->clock, g.host_seen);
  return *tl_host;
}

/// The calling thread waited for the operations `c` covers.
void host_joins(state& g, const vclock& c) {
  if (!g.racecheck) return;
  join_into(host_of(g).clock, c);
  join_into(g.host_seen, c);
}

/// The host waited for everything queued on `s` so far.
void host_joins_stream(state& g, const stream_obj* s) { host_joins(g, s->clock); }

namespace {

std::string describe_agent(const stream_obj* s) {
  if (s == nullptr) return "the host thread";
  char text[160];
  const char* kind = s->type == stream_obj::kind::legacy       ? "legacy default stream"
                     : s->type == stream_obj::kind::per_thread ? "per-thread default stream"
                     : s->blocking()                           ? "blocking stream"
                                                               : "non-blocking stream";
  std::snprintf(text, sizeof text, "%s %p of device %d", kind, static_cast<const void*>(s), s->device);
  return text;
}

std::string describe_access(const access_record& r) {
  return std::string(r.write ? "write" : "read") + " by " + r.api + " (" + r.what + ") on " + describe_agent(r.stream);
}

/// x happened before y: x's epoch is covered by y's clock.
bool ordered_before(const access_record& x, const access_record& y) { return x.epoch <= component(*y.clock, x.agent); }

/// Checks `r` against the earlier accesses of its allocation, then keeps it. A write drops the
/// records it covers that happened before it, and a read the reads it covers that happened
/// before it: any later access that races with a dropped record races with `r` too.
void check_access(state& g, access_record r) {
  allocation* a = find_allocation(g, reinterpret_cast<const void*>(r.begin));
  if (a == nullptr || r.end <= r.begin) return;  // pageable host memory: not tracked
  r.end = std::min<std::uintptr_t>(r.end, a->base + std::max<std::size_t>(a->size, 1));
  bool reported = false;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < a->accesses.size(); ++i) {
    const access_record& e = a->accesses[i];
    const bool overlaps = e.begin < r.end && r.begin < e.end;
    // Two accesses by host threads are ordered, or not, by C++ (thread start and join,
    // mutexes: a pool that hands a staging buffer one thread has unpacked to another that packs
    // it), which the simulator cannot see: taken as ordered, as for host waits (see host_of).
    // Whether they race is a thread sanitizer's business.
    const bool both_host = e.stream == nullptr && r.stream == nullptr;
    const bool before = both_host || ordered_before(e, r);
    if (overlaps && !reported && (e.write || r.write) && !before && !ordered_before(r, e)) {
      reported = true;
      ++g.races;
      char range[96];
      std::snprintf(range, sizeof range, "[%p, %p)", reinterpret_cast<const void*>(std::max(e.begin, r.begin)),
                    reinterpret_cast<const void*>(std::min(e.end, r.end)));
      const std::string where = a->kind == mem_kind::device ? "memory of device " + std::to_string(a->device)
                                                            : std::string("pinned host memory");
      violation(g, r.api,
                "stream-order race on " + where + " " + range + ": " + describe_access(e) + " is not ordered with " +
                    describe_access(r) +
                    "; record an event after the first and make the second's stream wait for it "
                    "(cudaEventRecord, cudaStreamWaitEvent), or synchronize");
    }
    const bool covered = e.begin >= r.begin && e.end <= r.end;
    if (covered && before && (r.write || !e.write)) continue;  // dropped
    if (kept != i) a->accesses[kept] = std::move(a->accesses[i]);
    ++kept;
  }
  a->accesses.resize(kept);
  a->accesses.push_back(std::move(r));
}

access_record record_of(const planned_access& p) {
  access_record r;
  r.begin = reinterpret_cast<std::uintptr_t>(p.p);
  r.end = r.begin + p.n;
  r.write = p.write;
  r.what = p.what;
  return r;
}

}  // namespace

/// An access by the calling host thread, now.
void host_access(state& g, const planned_access& p, const char* api) {
  if (!g.racecheck || p.p == nullptr || p.n == 0) return;
  host_agent& h = host_of(g);
  access_record r = record_of(p);
  r.agent = h.id;
  r.epoch = component(h.clock, h.id);
  r.clock = std::make_shared<const vclock>(h.clock);
  r.api = api;
  check_access(g, std::move(r));
  // What this thread has touched counts as known to the other host threads from their next call
  // on, as what it waited for does (host_of): an operation another thread queues later, such as a
  // copy into a staging buffer this thread has read and handed back to a pool under a mutex,
  // comes after it. An operation queued before the access still races with it.
  const auto self = static_cast<std::size_t>(h.id);
  if (g.host_seen.size() <= self) g.host_seen.resize(self + 1, 0);
  g.host_seen[self] = std::max(g.host_seen[self], component(h.clock, h.id));
}

/// An access of queued operation `op`.
void op_access(state& g, const op_info& op, const planned_access& p) {
  if (!g.racecheck || p.p == nullptr || p.n == 0) return;
  access_record r = record_of(p);
  r.agent = op.agent;
  r.epoch = op.epoch;
  r.clock = op.clock;
  r.api = op.api;
  r.stream = op.stream;
  check_access(g, std::move(r));
}

}  // namespace devicekit::cuda_sim::detail
