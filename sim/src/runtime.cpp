// The CUDA runtime API subset devicekit calls, over host memory, with rules stricter than a GPU's.
// Each rule cites the part of the CUDA Runtime API documentation ("API synchronization
// behavior", "Stream synchronization behavior", the function's own notes) that it follows.
// Kernels do not run: nothing here launches them.
#include "state.hpp"

#include <devicekit/cuda_sim/control.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace devicekit::cuda_sim::detail {

state& global() {
  static state* s = new state;  // never destroyed: workers and atexit handlers use it to the end
  return *s;
}

namespace {

thread_local int tl_device = 0;
thread_local bool tl_bound = false;  // the current device's primary context is current on this thread
thread_local cudaError_t tl_last_error = cudaSuccess;

constexpr unsigned char poison_new = 0xA5;    // never-written device memory reads as this
constexpr unsigned char poison_freed = 0xDE;  // freed device memory reads as this
constexpr std::size_t quarantine_limit = std::size_t{512} << 20;
constexpr std::uint64_t context_bytes = std::uint64_t{512} << 20;  // what a primary context costs

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) tl_last_error = e;
  return e;
}

void violation(state& g, const char* api, const std::string& rule) {
  const std::string text = std::string(api) + ": " + rule;
  g.violations.push_back(text);
  std::fprintf(stderr, "devicekit cuda_sim VIOLATION in %s\n", text.c_str());
}

std::uint64_t parse_bytes(const std::string& v) {
  std::size_t pos = 0;
  const double x = std::stod(v, &pos);
  const std::string unit = v.substr(pos);
  double mul = 1;
  if (unit == "KiB") mul = 1024.0;
  if (unit == "MiB") mul = 1024.0 * 1024;
  if (unit == "GiB") mul = 1024.0 * 1024 * 1024;
  return static_cast<std::uint64_t>(x * mul);
}

void set_uuid(device_spec& d, int index) {
  for (int i = 0; i < 16; ++i) d.uuid_bytes[i] = static_cast<unsigned char>(0x5d + 17 * index + 29 * i);
  char text[64];
  const unsigned char* u = d.uuid_bytes;
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  d.uuid = text;
}

void parse_uuid(device_spec& d, const std::string& text) {
  std::string hex;
  for (char c : text.substr(text.rfind('-') == std::string::npos ? 0 : 4)) {
    if (std::isxdigit(static_cast<unsigned char>(c))) hex += c;
  }
  if (hex.size() != 32) throw std::invalid_argument("uuid needs 32 hex digits");
  for (int i = 0; i < 16; ++i)
    d.uuid_bytes[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  d.uuid = text;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

[[noreturn]] void bad_config(const std::string& what) {
  std::fprintf(stderr, "devicekit cuda_sim: bad configuration: %s\n", what.c_str());
  std::exit(2);
}

void teardown();

void configure(state& g) {
  if (g.configured) return;
  g.configured = true;
  int n = 1;
  if (const char* v = env("DEVICEKIT_SIM_GPUS")) {
    try {
      n = std::stoi(v);
    } catch (...) {
      bad_config(std::string("DEVICEKIT_SIM_GPUS='") + v + "' is not a number");
    }
    if (n < 0 || n > 64) bad_config(std::string("DEVICEKIT_SIM_GPUS='") + v + "' must be 0..64");
  }
  g.devices.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    device_spec& d = g.devices[static_cast<std::size_t>(i)];
    d.pci_bus = 0x10 + i;
    set_uuid(d, i);
    const std::string var = "DEVICEKIT_SIM_GPU" + std::to_string(i);
    const char* spec = env(var.c_str());
    if (spec == nullptr) continue;
    std::stringstream items(spec);
    std::string item;
    while (std::getline(items, item, ',')) {
      const auto eq = item.find('=');
      const std::string key = item.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
      try {
        if (key == "name") {
          d.name = value;
        } else if (key == "memory") {
          d.total_memory = parse_bytes(value);
        } else if (key == "cc") {
          d.cc_major = std::stoi(value.substr(0, value.find('.')));
          d.cc_minor = std::stoi(value.substr(value.find('.') + 1));
        } else if (key == "sms") {
          d.sms = std::stoi(value);
        } else if (key == "pci_bus") {
          d.pci_bus = std::stoi(value, nullptr, 0);
        } else if (key == "uuid") {
          parse_uuid(d, value);
        } else {
          bad_config(var + ": unknown key '" + key + "' (name, memory, cc, sms, pci_bus, uuid)");
        }
      } catch (const std::exception&) {
        bad_config(var + ": bad value in '" + item + "'");
      }
    }
  }
  g.peer_possible.assign(static_cast<std::size_t>(n), std::vector<bool>(static_cast<std::size_t>(n), true));
  if (const char* v = env("DEVICEKIT_SIM_PEER")) {
    const std::string p = v;
    if (p != "all") {
      for (auto& row : g.peer_possible) std::fill(row.begin(), row.end(), false);
      if (p != "none") {
        std::stringstream pairs(p);
        std::string pair;
        while (std::getline(pairs, pair, ',')) {
          const auto gt = pair.find('>');
          int a = -1;
          int b = -1;
          try {
            a = std::stoi(pair.substr(0, gt));
            b = std::stoi(pair.substr(gt + 1));
          } catch (...) {}
          if (gt == std::string::npos || a < 0 || b < 0 || a >= n || b >= n) {
            bad_config("DEVICEKIT_SIM_PEER: '" + pair + "' is not i>j with devices below " + std::to_string(n));
          }
          g.peer_possible[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] = true;
        }
      }
    }
  }
  g.peer_enabled.assign(static_cast<std::size_t>(n), {});
  g.contexts.assign(static_cast<std::size_t>(n), 0);
  g.bytes_in_use.assign(static_cast<std::size_t>(n), 0);
  g.legacy.assign(static_cast<std::size_t>(n), nullptr);
  g.default_pool.assign(static_cast<std::size_t>(n), nullptr);
  if (const char* v = env("DEVICEKIT_SIM_SEED")) g.seed = std::strtoull(v, nullptr, 10);
  if (const char* v = env("DEVICEKIT_SIM_MAX_DELAY_US"))
    g.max_delay_us = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
  if (const char* v = env("DEVICEKIT_SIM_RACECHECK")) {
    const std::string r = v;
    if (r != "0" && r != "1") bad_config("DEVICEKIT_SIM_RACECHECK='" + r + "' must be 0 or 1");
    g.racecheck = r == "1";
  }
  if (const char* v = env("DEVICEKIT_SIM_FAIL")) {
    std::stringstream items(v);
    std::string item;
    while (std::getline(items, item, ',')) {
      const auto a = item.find(':');
      const auto b = item.rfind(':');
      if (a == std::string::npos || a == b) bad_config("DEVICEKIT_SIM_FAIL: '" + item + "' is not api:n:code");
      g.failures[item.substr(0, a)][std::stoi(item.substr(a + 1, b - a - 1))] =
          static_cast<cudaError_t>(std::stoi(item.substr(b + 1)));
    }
  }
  if (const char* v = env("DEVICEKIT_SIM_NCCL_FAULT")) {
    std::stringstream items(v);
    std::string item;
    while (std::getline(items, item, ',')) {
      const auto a = item.find(':');
      const auto b = item.rfind(':');
      int device = -1;
      nccl_fault f;
      try {
        if (a == std::string::npos || a == b) throw std::invalid_argument("fields");
        device = std::stoi(item.substr(0, a));
        f.remaining = std::stoi(item.substr(a + 1, b - a - 1));
        const std::string what = item.substr(b + 1);
        f.error = what == "hang" ? 0 : what == "error" ? 2 /* ncclSystemError */ : std::stoi(what);
      } catch (const std::exception&) {
        device = -1;
      }
      if (device < 0 || device >= n || f.remaining < 0 || f.error < 0) {
        bad_config("DEVICEKIT_SIM_NCCL_FAULT: '" + item + "' is not device:ops:error|hang with a device below " +
                   std::to_string(n) + ", ops >= 0, and error an ncclResult_t number or 'error'");
      }
      g.nccl_faults[device] = f;
    }
  }
  // The runtime tears itself down at exit, after the destructors of objects made after its
  // initialisation: calls made later fail with cudaErrorCudartUnloading, as CUDA's do.
  std::atexit(teardown);
}

bool valid_device(const state& g, int d) { return d >= 0 && static_cast<std::size_t>(d) < g.devices.size(); }

/// CUDA creates the primary context at cudaSetDevice (since CUDA 12.0) and at the first call
/// that needs one on the current device (CUDA programming guide, "Initialization").
void ensure_context(state& g, int d) {
  if (valid_device(g, d) && g.contexts[static_cast<std::size_t>(d)] == 0) g.contexts[static_cast<std::size_t>(d)] = 1;
}

/// A call that needs a context on the current device: its primary context is created if need be
/// and becomes current on this thread (what cuCtxGetCurrent then reports).
void bind_current(state& g) {
  ensure_context(g, tl_device);
  if (valid_device(g, tl_device)) tl_bound = true;
}

void worker_loop(stream_obj* s);

stream_obj* make_stream(state& g, int device, unsigned flags, stream_obj::kind k) {
  auto* s = new stream_obj;
  s->device = device;
  s->flags = flags;
  s->type = k;
  s->rng.seed(g.seed * 1'000'003 + g.streams.size());
  s->agent = g.agents++;
  g.streams.insert(s);
  s->worker = std::thread(worker_loop, s);
  return s;
}

stream_obj* legacy_of(state& g, int device) {
  auto& l = g.legacy[static_cast<std::size_t>(device)];
  if (l == nullptr) l = make_stream(g, device, cudaStreamDefault, stream_obj::kind::legacy);
  return l;
}

/// A stream handle as the API receives it: 0 and cudaStreamLegacy name the legacy default stream
/// of the current device, cudaStreamPerThread this thread's default stream on it.
stream_obj* resolve(state& g, cudaStream_t h, const char* api, cudaError_t& err) {
  err = cudaSuccess;
  if (!valid_device(g, tl_device)) {
    err = cudaErrorNoDevice;
    return nullptr;
  }
  if (h == nullptr || h == cudaStreamLegacy) {
    bind_current(g);
    return legacy_of(g, tl_device);
  }
  if (h == cudaStreamPerThread) {
    bind_current(g);
    auto& s = g.per_thread[{std::this_thread::get_id(), tl_device}];
    if (s == nullptr) s = make_stream(g, tl_device, cudaStreamDefault, stream_obj::kind::per_thread);
    return s;
  }
  auto* s = reinterpret_cast<stream_obj*>(h);
  if (g.streams.count(s) == 0) {
    violation(g, api, "a stream handle that no cudaStreamCreate returned");
    err = cudaErrorInvalidResourceHandle;
    return nullptr;
  }
  if (s->destroyed) {
    violation(g, api, "a stream used after cudaStreamDestroy");
    err = cudaErrorInvalidResourceHandle;
    return nullptr;
  }
  return s;
}

// --- race detector -------------------------------------------------------------------------------
// Happens-before as the CUDA runtime defines it, with vector clocks. Agents are the streams and
// the host threads that call the API. An operation queued on a stream is ordered after what came
// before it on that stream, after what its calling thread did before the call, and after its
// dependencies: the implicit ones of the legacy default stream ("Stream synchronization
// behavior") and the event of cudaStreamWaitEvent ("The stream stream will wait only for the
// completion of the most recent host call to cudaEventRecord() on event"). A host thread is
// ordered after what it waited for: cudaStreamSynchronize, cudaEventSynchronize, a query that
// returned cudaSuccess, cudaDeviceSynchronize, and the calls that synchronise (cudaMemcpy,
// cudaFree...). Every access to device or pinned host memory is checked against the earlier ones
// of its allocation when it is queued (or when the host makes it), so the verdict depends on the
// program's order of calls, never on the schedule: two accesses, one a write, ordered neither way
// are a data race, undefined behaviour.

thread_local host_agent* tl_host = nullptr;
thread_local const op_info* tl_current_op = nullptr;  // set by a stream worker while it runs an op

allocation* find_allocation(state& g, const void* p);

void join_into(vclock& into, const vclock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

std::uint64_t component(const vclock& c, int agent) {
  return static_cast<std::size_t>(agent) < c.size() ? c[static_cast<std::size_t>(agent)] : 0;
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

/// Copies by direction, for the text of a race: what the copy does to the end named.
const char* copy_end(const allocation* d, const allocation* r, bool source) {
  const bool dst_device = d != nullptr && d->kind == mem_kind::device;
  const bool src_device = r != nullptr && r->kind == mem_kind::device;
  if (src_device && dst_device)
    return d->device == r->device
               ? (source ? "source of a device-to-device copy" : "destination of a device-to-device copy")
               : (source ? "source of a peer copy" : "destination of a peer copy");
  if (src_device) return source ? "source of a device-to-host copy" : "destination of a device-to-host copy";
  if (dst_device) return source ? "source of a host-to-device copy" : "destination of a host-to-device copy";
  return source ? "source of a host-to-host copy" : "destination of a host-to-host copy";
}

/// Queues `run` on `s`. The legacy default stream waits for all work queued before it on the
/// blocking streams of its device, and a blocking stream waits for the work queued before on the
/// legacy stream ("Stream synchronization behavior"; non-blocking streams take part in neither).
/// `accesses` (the memory the operation reads and writes) and the ordering (`waited`: the clock
/// of an event the stream waits for) go to the race detector.
std::uint64_t enqueue(state& g, stream_obj* s, std::function<void()> run,
                      std::vector<std::pair<stream_obj*, std::uint64_t>> deps = {}, const char* api = "",
                      const std::vector<planned_access>& accesses = {}, const vclock* waited = nullptr) {
  const std::size_t explicit_deps = deps.size();
  if (s->type == stream_obj::kind::legacy) {
    for (stream_obj* t : g.streams) {
      if (t != s && !t->destroyed && t->device == s->device && t->blocking() && t->submitted > 0) {
        deps.emplace_back(t, t->submitted);
      }
    }
  } else if (s->blocking()) {
    stream_obj* l = g.legacy[static_cast<std::size_t>(s->device)];
    if (l != nullptr && l->submitted > 0) deps.emplace_back(l, l->submitted);
  }
  std::shared_ptr<op_info> info;
  if (g.racecheck) {
    host_agent& h = host_of(g);
    for (const planned_access& p : accesses) {
      if (p.by_host_at_call) host_access(g, p, api);
    }
    join_into(s->clock, h.clock);
    for (std::size_t i = explicit_deps; i < deps.size(); ++i) join_into(s->clock, deps[i].first->clock);
    if (waited != nullptr) join_into(s->clock, *waited);
    if (s->clock.size() <= static_cast<std::size_t>(s->agent))
      s->clock.resize(static_cast<std::size_t>(s->agent) + 1, 0);
    ++s->clock[static_cast<std::size_t>(s->agent)];
    info = std::make_shared<op_info>();
    info->agent = s->agent;
    info->epoch = s->clock[static_cast<std::size_t>(s->agent)];
    info->clock = std::make_shared<const vclock>(s->clock);
    info->api = api;
    info->stream = s;
    // What the thread does after this call is not ordered before the operation.
    ++h.clock[static_cast<std::size_t>(h.id)];
    for (const planned_access& p : accesses) {
      if (!p.by_host_at_call) op_access(g, *info, p);
    }
  }
  s->queue.push_back({std::move(deps), std::move(run), std::move(info)});
  ++s->submitted;
  g.cv.notify_all();
  return s->submitted;
}

void wait_until(state& g, std::unique_lock<std::mutex>& lk, stream_obj* s, std::uint64_t target) {
  g.cv.wait(lk, [&] { return s->completed >= target; });
}

/// Queued work runs on a worker thread per stream, in stream order, after a random delay: never
/// inline, so a program that reads results before synchronising sees stale data, as on a GPU.
void worker_loop(stream_obj* s) {
  state& g = global();
  std::unique_lock lk(g.m);
  for (;;) {
    g.cv.wait(lk, [&] { return !s->queue.empty() || g.stopping || s->destroyed; });
    if (s->queue.empty()) return;
    queued_op op = std::move(s->queue.front());
    s->queue.pop_front();
    g.cv.wait(lk, [&] {
      return std::all_of(op.deps.begin(), op.deps.end(), [](const auto& d) { return d.first->completed >= d.second; });
    });
    const unsigned delay = g.max_delay_us == 0 ? 0 : static_cast<unsigned>(s->rng() % (g.max_delay_us + 1));
    lk.unlock();
    if (delay != 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    tl_current_op = op.info.get();
    if (op.run) op.run();
    tl_current_op = nullptr;
    lk.lock();
    ++s->completed;
    g.cv.notify_all();
  }
}

void teardown() {
  state& g = global();
  std::unique_lock lk(g.m);
  g.torn_down = true;
  g.stopping = true;
  g.cv.notify_all();
  std::vector<std::thread> workers;
  for (stream_obj* s : g.streams) workers.push_back(std::move(s->worker));
  lk.unlock();
  for (auto& w : workers) {
    if (w.joinable()) w.join();
  }
}

void check_violations_at_exit() {
  state& g = global();
  std::lock_guard lk(g.m);
  if (g.violations.size() > g.expected_violations) {
    std::fprintf(stderr, "devicekit cuda_sim: %zu violation(s), %zu expected: exiting with status 86\n",
                 g.violations.size(), g.expected_violations);
    std::fflush(stderr);
    std::_Exit(86);
  }
}

// Registered before main, so it runs after every handler registered later (the teardown,
// devicekit's own exit hook): the last word on the exit status.
const bool violations_hook = (std::atexit(check_violations_at_exit), true);

cudaError_t injected(state& g, const char* api) {
  const int n = ++g.calls[api];
  auto it = g.failures.find(api);
  if (it == g.failures.end()) return cudaSuccess;
  auto call = it->second.find(n);
  return call == it->second.end() ? cudaSuccess : call->second;
}

// --- memory -------------------------------------------------------------------------------------

allocation* find_allocation(state& g, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = g.allocations.upper_bound(a);
  if (it == g.allocations.begin()) return nullptr;
  --it;
  return a < it->second.base + std::max<std::size_t>(it->second.size, 1) ? &it->second : nullptr;
}

bool in_quarantine(const state& g, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& [q, n] : g.quarantine) {
    const auto b = reinterpret_cast<std::uintptr_t>(q);
    if (a >= b && a < b + n) return true;
  }
  return false;
}

cudaError_t device_alloc(state& g, void** out, std::size_t size, int device, bool from_pool, const char* api) {
  if (out == nullptr) return cudaErrorInvalidValue;
  ensure_context(g, device);
  const device_spec& d = g.devices[static_cast<std::size_t>(device)];
  const std::size_t n = std::max<std::size_t>(size, 1);
  if (g.bytes_in_use[static_cast<std::size_t>(device)] + n + context_bytes > d.total_memory) {
    *out = nullptr;
    return cudaErrorMemoryAllocation;
  }
  const std::size_t rounded = (n + 255) & ~std::size_t{255};
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  std::memset(p, poison_new, rounded);
  g.allocations[reinterpret_cast<std::uintptr_t>(p)] = {
      reinterpret_cast<std::uintptr_t>(p), n, mem_kind::device, device, from_pool, false};
  g.bytes_in_use[static_cast<std::size_t>(device)] += n;
  *out = p;
  (void)api;
  return cudaSuccess;
}

/// Frees a device allocation for good: poisoned and kept a while, so that a late read sees
/// garbage instead of crashing, and a late write corrupts nothing else.
void release_device(state& g, allocation& a) {
  g.bytes_in_use[static_cast<std::size_t>(a.device)] -= a.size;
  void* p = reinterpret_cast<void*>(a.base);
  const std::size_t rounded = (a.size + 255) & ~std::size_t{255};
  std::memset(p, poison_freed, rounded);
  g.allocations.erase(a.base);
  g.quarantine.emplace_back(p, rounded);
  g.quarantine_bytes += rounded;
  while (g.quarantine_bytes > quarantine_limit && g.quarantine.size() > 1) {
    std::free(g.quarantine.front().first);
    g.quarantine_bytes -= g.quarantine.front().second;
    g.quarantine.pop_front();
  }
}

/// Checks that [p, p+n) is all inside one live device allocation or outside all of them.
cudaError_t check_range(state& g, const void* p, std::size_t n, const char* api, allocation*& owner) {
  owner = find_allocation(g, p);
  if (owner == nullptr) {
    if (in_quarantine(g, p)) {
      violation(g, api, "device memory used after it was freed");
      return cudaErrorInvalidValue;
    }
    return cudaSuccess;  // host memory
  }
  if (owner->free_pending) {
    violation(g, api, "device memory used after cudaFreeAsync was queued on it");
    return cudaErrorInvalidValue;
  }
  if (reinterpret_cast<std::uintptr_t>(p) + n > owner->base + owner->size) {
    violation(g, api, "a copy or set runs past the end of its allocation");
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

bool pinned(const allocation* a) { return a != nullptr && a->kind != mem_kind::device; }

/// Whether a copy queued (or running) on some stream still reads or writes pinned range `a`.
bool queued_copy_uses(const allocation& a) { return a.uses && a.uses->pending > 0; }

/// The rule of cudaFreeHost and cudaHostUnregister. cudaMemcpyAsync with pinned host memory is
/// asynchronous: "the call may return before the copy is complete" (cudaMemcpyAsync; "API
/// synchronization behavior"), and the copy reads or writes the host range when its stream
/// reaches it, so the range must stay allocated and page-locked until the copy is complete.
/// Neither cudaFreeHost ("Frees the memory space pointed to by hostPtr") nor
/// cudaHostUnregister ("Unmaps the memory range ... and makes it pageable again") says it waits
/// for queued copies first, so releasing the range earlier is undefined: the copy engine may
/// read or write freed or unpinned pages.
constexpr const char* host_range_rule = "a host buffer freed while a queued copy still uses it";

void wait_device_idle(state& g, std::unique_lock<std::mutex>& lk, int device) {
  for (stream_obj* s : g.streams) {
    if (s->device == device || device < 0) {
      const std::uint64_t target = s->submitted;
      host_joins_stream(g, s);
      wait_until(g, lk, s, target);
    }
  }
}

/// Counts one accepted copy by direction (copy_counters in control.hpp).
void count_copy(state& g, const allocation* d, const allocation* r) {
  const bool dst_device = d != nullptr && d->kind == mem_kind::device;
  const bool src_device = r != nullptr && r->kind == mem_kind::device;
  if (src_device && dst_device) {
    ++(d->device == r->device ? g.copies.device_to_device : g.copies.peer);
  } else if (src_device) {
    ++g.copies.device_to_host;
  } else if (dst_device) {
    ++g.copies.host_to_device;
  } else {
    ++g.copies.host_to_host;
  }
}

/// A queued copy is done with the pinned ranges it used: the last copy of a range whose
/// cudaFreeHost came first frees it (see host_uses).
void release_host_uses(const std::vector<std::shared_ptr<host_uses>>& uses) {
  if (uses.empty()) return;
  std::lock_guard ulk(global().m);
  for (const auto& u : uses) {
    if (--u->pending == 0 && u->free_when_done != nullptr) {
      std::free(u->free_when_done);
      u->free_when_done = nullptr;
    }
  }
}

/// One copy, queued on `s`. Pageable host sources are copied to staging at the call; a pageable
/// host destination makes the call wait for the copy ("API synchronization behavior",
/// cudaMemcpyAsync).
cudaError_t copy(state& g, std::unique_lock<std::mutex>& lk, void* dst, const void* src, std::size_t n, stream_obj* s,
                 const char* api) {
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  allocation* d = nullptr;
  allocation* r = nullptr;
  if (cudaError_t e = check_range(g, dst, n, api, d); e != cudaSuccess) return e;
  if (cudaError_t e = check_range(g, src, n, api, r); e != cudaSuccess) return e;
  const bool dst_device = d != nullptr && d->kind == mem_kind::device;
  const bool src_device = r != nullptr && r->kind == mem_kind::device;
  count_copy(g, d, r);
  // The race detector's view: the source is read and the destination written in stream order
  // (untracked pageable ends are left out by the detector).
  const std::vector<planned_access> accesses{{src, n, false, copy_end(d, r, true)},
                                             {dst, n, true, copy_end(d, r, false)}};
  if (!src_device && !pinned(r) && dst_device) {
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + n);
    enqueue(
        g, s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); }, {}, api, accesses);
    return cudaSuccess;
  }
  // Pinned host memory is read or written when the stream reaches the copy: the copy is counted
  // on its range until then, so that freeing or unregistering the range first is caught.
  std::vector<std::shared_ptr<host_uses>> uses;
  for (allocation* a : {d, r}) {
    if (!pinned(a)) continue;
    if (!a->uses) a->uses = std::make_shared<host_uses>();
    if (std::find(uses.begin(), uses.end(), a->uses) == uses.end()) uses.push_back(a->uses);
  }
  for (const auto& u : uses) ++u->pending;
  const std::uint64_t done = enqueue(
      g, s,
      [dst, src, n, uses = std::move(uses)] {
        std::memmove(dst, src, n);
        release_host_uses(uses);
      },
      {}, api, accesses);
  if (src_device && !dst_device && !pinned(d)) {
    host_joins_stream(g, s);  // the call returns once the copy is complete
    wait_until(g, lk, s, done);
  }
  return cudaSuccess;
}

/// The RAII of an entry point: configuration, teardown, fault injection, the lock.
struct entry {
  state& g = global();
  std::unique_lock<std::mutex> lk{g.m};
  cudaError_t early = cudaSuccess;
  explicit entry(const char* api) {
    configure(g);
    if (g.torn_down) {
      early = cudaErrorCudartUnloading;
    } else {
      early = injected(g, api);
    }
  }
};

}  // namespace

std::unique_lock<std::mutex> enter(state& g, bool& torn_down) {
  std::unique_lock lk(g.m);
  configure(g);
  torn_down = g.torn_down;
  return lk;
}
stream_obj* stream_of(state& g, cudaStream_t h, const char* api, cudaError_t& err) { return resolve(g, h, api, err); }
void queue_work(state& g, stream_obj* s, std::function<void()> run, const char* api,
                std::vector<planned_access> accesses) {
  (void)enqueue(g, s, std::move(run), {}, api, accesses);
}
void report_violation(state& g, const char* api, const std::string& rule) { violation(g, api, rule); }
int current_device() { return tl_device; }
int injected_error(state& g, const char* api) { return static_cast<int>(injected(g, api)); }

}  // namespace devicekit::cuda_sim::detail

// --- the control API --------------------------------------------------------------------------------
namespace devicekit::cuda_sim {
using namespace detail;

int device_count() {
  entry e("device_count");
  return static_cast<int>(e.g.devices.size());
}
int contexts_created(int device) {
  entry e("contexts_created");
  return valid_device(e.g, device) ? e.g.contexts[static_cast<std::size_t>(device)] : 0;
}
std::size_t device_bytes_in_use(int device) {
  entry e("device_bytes_in_use");
  return valid_device(e.g, device) ? e.g.bytes_in_use[static_cast<std::size_t>(device)] : 0;
}
std::vector<std::string> violations() {
  entry e("violations");
  return e.g.violations;
}
void expect_violations(std::size_t n) {
  entry e("expect_violations");
  e.g.expected_violations += n;
}
void fail_call(const std::string& api, int nth, cudaError_t error) {
  entry e("fail_call");
  e.g.failures[api][e.g.calls[api] + nth] = error;
}
void nccl_async_error_after(int device, int ops, int error) {
  entry e("nccl_async_error_after");
  if (!valid_device(e.g, device) || ops < 0) return;
  e.g.nccl_faults[device] = {ops, error};
}
void nccl_hang_after(int device, int ops) {
  entry e("nccl_hang_after");
  if (!valid_device(e.g, device) || ops < 0) return;
  e.g.nccl_faults[device] = {ops, 0};
}
copy_counters copies() {
  entry e("copies");
  const copy_counts& c = e.g.copies;
  return {c.host_to_device, c.device_to_host, c.device_to_device, c.peer,
          c.host_to_host,   c.batch_calls,    c.batched_copies};
}
std::size_t spinning_host_waits() {
  entry e("spinning_host_waits");
  return e.g.spinning_host_waits;
}
void device_access(const void* p, std::size_t bytes, bool write) {
  entry e("device_access");
  const planned_access access{p, bytes, write, write ? "declared write" : "declared read"};
  if (tl_current_op != nullptr) {
    op_access(e.g, *tl_current_op, access);  // from a host function: an access of its operation
  } else {
    host_access(e.g, access, "device_access");
  }
}
std::size_t races_detected() {
  entry e("races_detected");
  return e.g.races;
}

}  // namespace devicekit::cuda_sim

extern "C" void devicekit_cuda_sim_host_access(const void* p, std::size_t bytes, int write) {
  devicekit::cuda_sim::device_access(p, bytes, write != 0);
}

// --- the runtime API ------------------------------------------------------------------------------
using namespace devicekit::cuda_sim::detail;

#define SIM_ENTER(api) \
  entry e_(api);       \
  state& g = e_.g;     \
  (void)g;             \
  if (e_.early != cudaSuccess) return fail(e_.early)

extern "C" {

cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return tl_last_error; }

cudaError_t CUDARTAPI cudaDriverGetVersion(int* v) {
  if (v == nullptr) return fail(cudaErrorInvalidValue);
  *v = 13000;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return fail(cudaErrorInvalidValue);
  *v = 13000;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  SIM_ENTER("cudaGetDeviceCount");
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = static_cast<int>(g.devices.size());
  return g.devices.empty() ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  SIM_ENTER("cudaSetDevice");
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  tl_device = device;
  bind_current(g);  // since CUDA 12.0 cudaSetDevice initialises the primary context at once
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  SIM_ENTER("cudaGetDevice");
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  if (g.devices.empty()) return fail(cudaErrorNoDevice);
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  SIM_ENTER("cudaDeviceGetAttribute");
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  const device_spec& d = g.devices[static_cast<std::size_t>(device)];
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = d.cc_major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = d.cc_minor; break;
    case cudaDevAttrMultiProcessorCount: *value = d.sms; break;
    case cudaDevAttrClockRate: *value = 1'980'000; break;
    case cudaDevAttrMemoryClockRate: *value = 2'619'000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; break;
    case cudaDevAttrL2CacheSize: *value = 50 << 20; break;
    case cudaDevAttrAsyncEngineCount: *value = 3; break;
    case cudaDevAttrEccEnabled: *value = 1; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrIntegrated: *value = 0; break;
    case cudaDevAttrManagedMemory: *value = 1; break;
    case cudaDevAttrConcurrentManagedAccess: *value = 1; break;
    case cudaDevAttrPciDomainId: *value = 0; break;
    case cudaDevAttrPciBusId: *value = d.pci_bus; break;
    case cudaDevAttrPciDeviceId: *value = 0; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  SIM_ENTER("cudaGetDeviceProperties");
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  const device_spec& d = g.devices[static_cast<std::size_t>(device)];
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "%s", d.name.c_str());
  std::memcpy(prop->uuid.bytes, d.uuid_bytes, 16);
  prop->totalGlobalMem = d.total_memory;
  prop->major = d.cc_major;
  prop->minor = d.cc_minor;
  prop->multiProcessorCount = d.sms;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 << 20;
  prop->asyncEngineCount = 3;
  prop->ECCEnabled = 1;
  prop->maxThreadsPerBlock = 1024;
  prop->warpSize = 32;
  prop->managedMemory = 1;
  prop->concurrentManagedAccess = 1;
  prop->pciBusID = d.pci_bus;
  prop->unifiedAddressing = 1;
  prop->memoryPoolsSupported = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  SIM_ENTER("cudaDeviceGetPCIBusId");
  if (pciBusId == nullptr || len <= 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  // "[domain]:[bus]:[device].[function]" with a 4-digit domain, as the H100 run returned it.
  std::snprintf(pciBusId, static_cast<std::size_t>(len), "0000:%02X:00.0",
                g.devices[static_cast<std::size_t>(device)].pci_bus);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  SIM_ENTER("cudaDeviceCanAccessPeer");
  if (canAccessPeer == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device) || !valid_device(g, peerDevice)) return fail(cudaErrorInvalidDevice);
  *canAccessPeer =
      device != peerDevice && g.peer_possible[static_cast<std::size_t>(device)][static_cast<std::size_t>(peerDevice)];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  SIM_ENTER("cudaDeviceEnablePeerAccess");
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, peerDevice) || peerDevice == tl_device) return fail(cudaErrorInvalidDevice);
  bind_current(g);
  if (!g.peer_possible[static_cast<std::size_t>(tl_device)][static_cast<std::size_t>(peerDevice)]) {
    return fail(cudaErrorPeerAccessUnsupported);
  }
  if (!g.peer_enabled[static_cast<std::size_t>(tl_device)].insert(peerDevice).second) {
    return fail(cudaErrorPeerAccessAlreadyEnabled);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  SIM_ENTER("cudaMemGetInfo");
  if (free_bytes == nullptr || total == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  bind_current(g);
  const device_spec& d = g.devices[static_cast<std::size_t>(tl_device)];
  *total = d.total_memory;
  *free_bytes = d.total_memory - context_bytes - g.bytes_in_use[static_cast<std::size_t>(tl_device)];
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  SIM_ENTER("cudaDeviceSynchronize");
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  bind_current(g);
  ++g.spinning_host_waits;  // spins under cudaDeviceScheduleAuto (see spinning_host_waits())
  wait_device_idle(g, e_.lk, tl_device);
  return cudaSuccess;
}

// --- streams ------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  SIM_ENTER("cudaStreamCreateWithFlags");
  if (pStream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  bind_current(g);
  *pStream = reinterpret_cast<cudaStream_t>(make_stream(g, tl_device, flags, stream_obj::kind::created));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int /*priority*/) {
  return cudaStreamCreateWithFlags(pStream, flags);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  SIM_ENTER("cudaStreamDestroy");
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaStreamDestroy", err);
  if (s == nullptr) return fail(err);
  // "In case the device is still doing work in the stream when cudaStreamDestroy() is called,
  // the function will return immediately and the resources associated with stream will be
  // released automatically once the device has completed all work in stream."
  s->destroyed = true;
  g.cv.notify_all();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  SIM_ENTER("cudaStreamSynchronize");
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaStreamSynchronize", err);
  if (s == nullptr) return fail(err);
  ++g.spinning_host_waits;  // spins under cudaDeviceScheduleAuto (see spinning_host_waits())
  host_joins_stream(g, s);
  wait_until(g, e_.lk, s, s->submitted);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  SIM_ENTER("cudaStreamQuery");
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaStreamQuery", err);
  if (s == nullptr) return fail(err);
  // cudaErrorNotReady is a status, not an error: it does not become the last error.
  if (s->completed < s->submitted) return cudaErrorNotReady;
  host_joins_stream(g, s);  // "cudaSuccess if all operations in stream have completed"
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t stream, int* device) {
  SIM_ENTER("cudaStreamGetDevice");
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaStreamGetDevice", err);
  if (s == nullptr) return fail(err);
  *device = s->device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  SIM_ENTER("cudaLaunchHostFunc");
  if (fn == nullptr) return fail(cudaErrorInvalidValue);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaLaunchHostFunc", err);
  if (s == nullptr) return fail(err);
  enqueue(
      g, s, [fn, userData] { fn(userData); }, {}, "cudaLaunchHostFunc");
  return cudaSuccess;
}

// --- events -------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  SIM_ENTER("cudaEventCreateWithFlags");
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  // The flags cudaEventCreateWithFlags documents; cudaEventInterprocess "must be specified
  // along with cudaEventDisableTiming".
  constexpr unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~known) != 0 || ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0)) {
    return fail(cudaErrorInvalidValue);
  }
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  bind_current(g);
  auto* ev = new event_obj;
  ev->device = tl_device;  // an event belongs to the device current at its creation
  ev->flags = flags;
  g.events.insert(ev);
  *event = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

namespace {
event_obj* resolve_event(state& g, cudaEvent_t h, const char* api) {
  auto* ev = reinterpret_cast<event_obj*>(h);
  if (g.events.count(ev) == 0) {
    violation(g, api, "an event handle that no cudaEventCreate returned");
    return nullptr;
  }
  if (ev->destroyed) {
    violation(g, api, "an event used after cudaEventDestroy");
    return nullptr;
  }
  return ev;
}
}  // namespace

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  SIM_ENTER("cudaEventRecord");
  event_obj* ev = resolve_event(g, event, "cudaEventRecord");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaEventRecord", err);
  if (s == nullptr) return fail(err);
  // "event and stream must be on the same device" (cudaEventRecord): the driver refuses others.
  if (s->device != ev->device) return fail(cudaErrorInvalidResourceHandle);
  ev->stream = s;
  ev->target = enqueue(g, s, nullptr, {}, "cudaEventRecord");
  ev->clock = s->clock;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  SIM_ENTER("cudaEventQuery");
  event_obj* ev = resolve_event(g, event, "cudaEventQuery");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (ev->stream == nullptr) return cudaSuccess;  // never recorded: complete
  if (ev->stream->completed < ev->target) return cudaErrorNotReady;
  host_joins(g, ev->clock);  // the work the record captured is done
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  SIM_ENTER("cudaEventSynchronize");
  event_obj* ev = resolve_event(g, event, "cudaEventSynchronize");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  // "cudaEventBlockingSync: Specifies that event should use blocking synchronization. A host
  // thread that uses cudaEventSynchronize() to wait on an event created with this flag will
  // block until the event actually completes" (cudaEventCreateWithFlags); without it the wait
  // follows the device's scheduling flags: a spin under the default cudaDeviceScheduleAuto.
  if ((ev->flags & cudaEventBlockingSync) == 0) ++g.spinning_host_waits;
  if (ev->stream != nullptr) {
    host_joins(g, ev->clock);
    wait_until(g, e_.lk, ev->stream, ev->target);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  SIM_ENTER("cudaEventDestroy");
  event_obj* ev = resolve_event(g, event, "cudaEventDestroy");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  ev->destroyed = true;  // kept, so that its handle never names another event
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  SIM_ENTER("cudaStreamWaitEvent");
  if (flags != 0 && flags != cudaEventWaitExternal) return fail(cudaErrorInvalidValue);
  event_obj* ev = resolve_event(g, event, "cudaStreamWaitEvent");
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaStreamWaitEvent", err);
  if (s == nullptr) return fail(err);
  // "The stream stream will wait only for the completion of the most recent host call to
  // cudaEventRecord() on event"; the event may belong to another device.
  std::vector<std::pair<stream_obj*, std::uint64_t>> deps;
  if (ev->stream != nullptr) deps.emplace_back(ev->stream, ev->target);
  enqueue(g, s, nullptr, std::move(deps), "cudaStreamWaitEvent", {}, ev->stream != nullptr ? &ev->clock : nullptr);
  return cudaSuccess;
}

// --- memory -------------------------------------------------------------------------------------

cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  SIM_ENTER("cudaMalloc");
  if (!valid_device(g, tl_device)) return fail(cudaErrorNoDevice);
  return fail(device_alloc(g, devPtr, size, tl_device, false, "cudaMalloc"));
}

cudaError_t CUDARTAPI cudaFree(void* devPtr) {
  SIM_ENTER("cudaFree");
  if (valid_device(g, tl_device)) bind_current(g);
  if (devPtr == nullptr) return cudaSuccess;
  allocation* a = find_allocation(g, devPtr);
  if (a == nullptr || a->base != reinterpret_cast<std::uintptr_t>(devPtr) || a->kind != mem_kind::device ||
      a->free_pending) {
    violation(g, "cudaFree",
              in_quarantine(g, devPtr) ? "a pointer freed twice" : "a pointer cudaMalloc did not return");
    return fail(cudaErrorInvalidValue);
  }
  // cudaFree synchronises: work still using the memory finishes first.
  const int device = a->device;
  wait_device_idle(g, e_.lk, device);
  a = find_allocation(g, devPtr);
  if (a != nullptr) {
    // Freeing is a write of the whole range: a use that the wait did not order before it races.
    host_access(g, {devPtr, a->size, true, "the allocation freed"}, "cudaFree");
    release_device(g, *a);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocHost(void** ptr, size_t size) {
  SIM_ENTER("cudaMallocHost");
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  if (valid_device(g, tl_device)) bind_current(g);
  const std::size_t n = std::max<std::size_t>(size, 1);
  void* p = std::aligned_alloc(4096, (n + 4095) & ~std::size_t{4095});
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  g.allocations[reinterpret_cast<std::uintptr_t>(p)] = {
      reinterpret_cast<std::uintptr_t>(p), n, mem_kind::pinned_host, -1, false, false};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void* ptr) {
  SIM_ENTER("cudaFreeHost");
  if (ptr == nullptr) return cudaSuccess;
  allocation* a = find_allocation(g, ptr);
  if (a == nullptr || a->base != reinterpret_cast<std::uintptr_t>(ptr) || a->kind != mem_kind::pinned_host) {
    violation(g, "cudaFreeHost", "a pointer cudaMallocHost did not return (or one freed twice)");
    return fail(cudaErrorInvalidValue);
  }
  if (queued_copy_uses(*a)) {
    // Undefined (host_range_rule): reported, and the memory is kept until those copies are done
    // (the simulator must not corrupt its own heap); waiting here instead could block for ever.
    violation(g, "cudaFreeHost", host_range_rule);
    a->uses->free_when_done = ptr;
    g.allocations.erase(a->base);
    return cudaSuccess;
  }
  wait_device_idle(g, e_.lk, -1);  // other work finishes first: the call is synchronous here
  a = find_allocation(g, ptr);
  if (a != nullptr) {
    host_access(g, {ptr, a->size, true, "the allocation freed"}, "cudaFreeHost");
    g.allocations.erase(a->base);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostRegister(void* ptr, size_t size, unsigned int /*flags*/) {
  SIM_ENTER("cudaHostRegister");
  if (ptr == nullptr || size == 0) return fail(cudaErrorInvalidValue);
  if (find_allocation(g, ptr) != nullptr) return fail(cudaErrorHostMemoryAlreadyRegistered);
  g.allocations[reinterpret_cast<std::uintptr_t>(ptr)] = {
      reinterpret_cast<std::uintptr_t>(ptr), size, mem_kind::registered_host, -1, false, false};
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostUnregister(void* ptr) {
  SIM_ENTER("cudaHostUnregister");
  allocation* a = find_allocation(g, ptr);
  if (a == nullptr || a->kind != mem_kind::registered_host || a->base != reinterpret_cast<std::uintptr_t>(ptr)) {
    return fail(cudaErrorHostMemoryNotRegistered);
  }
  if (queued_copy_uses(*a)) {
    violation(g, "cudaHostUnregister",
              std::string(host_range_rule) + " (unregistering unpins the pages the queued copy reads or writes)");
  }
  g.allocations.erase(a->base);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  SIM_ENTER("cudaPointerGetAttributes");
  if (attributes == nullptr) return fail(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  const allocation* a = find_allocation(g, ptr);
  if (a == nullptr) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    return cudaSuccess;
  }
  attributes->type = a->kind == mem_kind::device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  attributes->device = a->kind == mem_kind::device ? a->device : 0;
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = a->kind == mem_kind::device ? nullptr : const_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind /*kind*/,
                                      cudaStream_t stream) {
  SIM_ENTER("cudaMemcpyAsync");
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaMemcpyAsync", err);
  if (s == nullptr) return fail(err);
  return fail(copy(g, e_.lk, dst, src, count, s, "cudaMemcpyAsync"));
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind /*kind*/) {
  SIM_ENTER("cudaMemcpy");
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, nullptr, "cudaMemcpy", err);
  if (s == nullptr) return fail(err);
  if (cudaError_t c = copy(g, e_.lk, dst, src, count, s, "cudaMemcpy"); c != cudaSuccess) return fail(c);
  host_joins_stream(g, s);
  wait_until(g, e_.lk, s, s->submitted);  // synchronous with respect to the host
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                          cudaStream_t stream) {
  SIM_ENTER("cudaMemcpyPeerAsync");
  if (!valid_device(g, dstDevice) || !valid_device(g, srcDevice)) return fail(cudaErrorInvalidDevice);
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaMemcpyPeerAsync", err);
  if (s == nullptr) return fail(err);
  const allocation* d = find_allocation(g, dst);
  const allocation* r = find_allocation(g, src);
  if ((d != nullptr && d->kind == mem_kind::device && d->device != dstDevice) ||
      (r != nullptr && r->kind == mem_kind::device && r->device != srcDevice)) {
    violation(g, "cudaMemcpyPeerAsync", "a pointer that does not belong to the device named with it");
    return fail(cudaErrorInvalidValue);
  }
  return fail(copy(g, e_.lk, dst, src, count, s, "cudaMemcpyPeerAsync"));
}

#if CUDART_VERSION >= 12080
/// cudaMemcpyBatchAsync (CUDA 12.8; CUDA 13 dropped its failIdx argument), by the rules of its
/// documentation: the legacy NULL stream is refused; `attrsIdxs` starts at 0, increases, stays
/// below `count`, and `numAttrs` is at most `count`; every copy's attributes need a valid
/// srcAccessOrder, else cudaErrorInvalidValue. Each copy is checked as cudaMemcpyAsync checks
/// one (bad pointers are violations), all before anything is queued, so a refused batch moves no
/// byte. The batch runs in stream order as one operation; copies that depend on each other in
/// one batch are undefined ("no ordering guarantees for copies within a batch"): a violation.
/// Sources read "during the API call" (cudaMemcpySrcAccessOrderDuringApiCall) and pageable ones
/// are read at the call; a pageable destination makes the call wait, as with cudaMemcpyAsync.
cudaError_t CUDARTAPI cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes,
                                           size_t count, struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                           size_t numAttrs,
#  if CUDART_VERSION < 13000
                                           size_t* failIdx,
#  endif
                                           cudaStream_t stream) {
#  if CUDART_VERSION < 13000
  if (failIdx != nullptr) *failIdx = SIZE_MAX;  // "SIZE_MAX if the error doesn't pertain to any specific copy"
  auto failed_at = [&](std::size_t i) {
    if (failIdx != nullptr) *failIdx = i;
  };
#  else
  auto failed_at = [](std::size_t) {};
#  endif
  constexpr const char* api = "cudaMemcpyBatchAsync";
  SIM_ENTER("cudaMemcpyBatchAsync");
  if (stream == nullptr || stream == cudaStreamLegacy)
    return fail(cudaErrorInvalidValue);  // "Must not be legacy NULL stream"
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      attrsIdxs == nullptr || numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0) {
    return fail(cudaErrorInvalidValue);
  }
  for (std::size_t k = 0; k < numAttrs; ++k) {
    if ((k > 0 && attrsIdxs[k] <= attrsIdxs[k - 1]) || attrsIdxs[k] >= count) return fail(cudaErrorInvalidValue);
    const auto order = attrs[k].srcAccessOrder;
    if (order != cudaMemcpySrcAccessOrderStream && order != cudaMemcpySrcAccessOrderDuringApiCall &&
        order != cudaMemcpySrcAccessOrderAny) {
      return fail(cudaErrorInvalidValue);
    }
    if ((attrs[k].flags & ~static_cast<unsigned>(cudaMemcpyFlagPreferOverlapWithCompute)) != 0) {
      return fail(cudaErrorInvalidValue);
    }
  }
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, api, err);
  if (s == nullptr) return fail(err);

  struct one_copy {
    void* dst;
    const void* src;
    std::size_t n;
    std::shared_ptr<std::vector<unsigned char>> staged;  ///< the source as read at the call
  };
  std::vector<one_copy> batch;
  std::vector<const allocation*> dst_alloc;
  std::vector<const allocation*> src_alloc;
  bool wait_for_it = false;
  std::vector<planned_access> accesses;  // for the race detector
  std::size_t attr = 0;
  for (std::size_t i = 0; i < count; ++i) {
    while (attr + 1 < numAttrs && attrsIdxs[attr + 1] <= i) ++attr;
    if (sizes[i] == 0) continue;
    if (dsts[i] == nullptr || srcs[i] == nullptr) {
      failed_at(i);
      return fail(cudaErrorInvalidValue);
    }
    allocation* d = nullptr;
    allocation* r = nullptr;
    if (cudaError_t e = check_range(g, dsts[i], sizes[i], api, d); e != cudaSuccess) {
      failed_at(i);
      return fail(e);
    }
    if (cudaError_t e = check_range(g, srcs[i], sizes[i], api, r); e != cudaSuccess) {
      failed_at(i);
      return fail(e);
    }
    const bool src_device = r != nullptr && r->kind == mem_kind::device;
    const bool dst_device = d != nullptr && d->kind == mem_kind::device;
    one_copy c{dsts[i], srcs[i], sizes[i], nullptr};
    if (attrs[attr].srcAccessOrder == cudaMemcpySrcAccessOrderDuringApiCall || (!src_device && !pinned(r))) {
      c.staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(srcs[i]),
                                                              static_cast<const unsigned char*>(srcs[i]) + sizes[i]);
    }
    if (!dst_device && !pinned(d)) wait_for_it = true;
    // A source staged at the call is read by the calling thread then, the rest in stream order.
    accesses.push_back({srcs[i], sizes[i], false, copy_end(d, r, true), c.staged != nullptr});
    accesses.push_back({dsts[i], sizes[i], true, copy_end(d, r, false)});
    batch.push_back(std::move(c));
    dst_alloc.push_back(d);
    src_alloc.push_back(r);
  }
  // Copies of one batch run in no particular order: a destination that overlaps another copy's
  // source or destination makes the result undefined. One sweep over the ranges sorted by start.
  struct range {
    std::uintptr_t begin;
    std::uintptr_t end;
    bool is_dst;
  };
  std::vector<range> ranges;
  for (const auto& c : batch) {
    ranges.push_back({reinterpret_cast<std::uintptr_t>(c.dst), reinterpret_cast<std::uintptr_t>(c.dst) + c.n, true});
    ranges.push_back({reinterpret_cast<std::uintptr_t>(c.src), reinterpret_cast<std::uintptr_t>(c.src) + c.n, false});
  }
  std::sort(ranges.begin(), ranges.end(), [](const range& a, const range& b) { return a.begin < b.begin; });
  std::uintptr_t any_end = 0;
  std::uintptr_t dst_end = 0;
  for (const auto& r : ranges) {
    if ((r.is_dst ? any_end : dst_end) > r.begin) {
      violation(g, api,
                "copies of one batch that overlap (a destination written by one and read or written by another)");
      return fail(cudaErrorInvalidValue);
    }
    any_end = std::max(any_end, r.end);
    if (r.is_dst) dst_end = std::max(dst_end, r.end);
  }
  std::vector<std::shared_ptr<host_uses>> uses;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    count_copy(g, dst_alloc[i], src_alloc[i]);
    for (const allocation* a : {dst_alloc[i], src_alloc[i]}) {
      if (!pinned(a)) continue;
      auto* m = const_cast<allocation*>(a);
      if (!m->uses) m->uses = std::make_shared<host_uses>();
      if (std::find(uses.begin(), uses.end(), m->uses) == uses.end()) uses.push_back(m->uses);
    }
  }
  ++g.copies.batch_calls;
  g.copies.batched_copies += batch.size();
  if (batch.empty()) return cudaSuccess;
  for (const auto& u : uses) ++u->pending;
  const std::uint64_t done = enqueue(
      g, s,
      [batch = std::move(batch), uses = std::move(uses)] {
        for (const auto& c : batch) std::memmove(c.dst, c.staged ? c.staged->data() : c.src, c.n);
        release_host_uses(uses);
      },
      {}, api, accesses);
  if (wait_for_it) {
    host_joins_stream(g, s);
    wait_until(g, e_.lk, s, done);
  }
  return cudaSuccess;
}
#endif

cudaError_t CUDARTAPI cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  SIM_ENTER("cudaMemsetAsync");
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaMemsetAsync", err);
  if (s == nullptr) return fail(err);
  allocation* a = nullptr;
  if (cudaError_t c = check_range(g, devPtr, count, "cudaMemsetAsync", a); c != cudaSuccess) return fail(c);
  if (a == nullptr || a->kind != mem_kind::device) return fail(cudaErrorInvalidValue);
  enqueue(g, s, [devPtr, value, count] { std::memset(devPtr, value, count); }, {}, "cudaMemsetAsync",
          {{devPtr, count, true, "memset"}});
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count) {
  // Asynchronous with respect to the host for device memory ("API synchronization behavior",
  // memset), on the legacy default stream.
  return cudaMemsetAsync(devPtr, value, count, nullptr);
}

// --- stream-ordered allocation and pools ----------------------------------------------------------

namespace {
pool_obj* default_pool_of(state& g, int device) {
  auto& p = g.default_pool[static_cast<std::size_t>(device)];
  if (p == nullptr) {
    p = new pool_obj;
    p->device = device;
    p->is_default = true;
    g.pools.insert(p);
  }
  return p;
}

pool_obj* resolve_pool(state& g, cudaMemPool_t h, const char* api) {
  auto* p = reinterpret_cast<pool_obj*>(h);
  if (g.pools.count(p) == 0 || p->destroyed) {
    violation(g, api, "a memory pool that does not exist (never created, or destroyed)");
    return nullptr;
  }
  return p;
}
}  // namespace

cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  SIM_ENTER("cudaDeviceGetDefaultMemPool");
  if (memPool == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(g, device)) return fail(cudaErrorInvalidDevice);
  *memPool = reinterpret_cast<cudaMemPool_t>(default_pool_of(g, device));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* poolProps) {
  SIM_ENTER("cudaMemPoolCreate");
  if (memPool == nullptr || poolProps == nullptr || poolProps->location.type != cudaMemLocationTypeDevice) {
    return fail(cudaErrorInvalidValue);
  }
  if (!valid_device(g, poolProps->location.id)) return fail(cudaErrorInvalidDevice);
  ensure_context(g, poolProps->location.id);
  auto* p = new pool_obj;
  p->device = poolProps->location.id;
  g.pools.insert(p);
  *memPool = reinterpret_cast<cudaMemPool_t>(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool) {
  SIM_ENTER("cudaMemPoolDestroy");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolDestroy");
  if (p == nullptr || p->is_default) return fail(cudaErrorInvalidValue);
  p->destroyed = true;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  SIM_ENTER("cudaMemPoolSetAttribute");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolSetAttribute");
  if (p == nullptr || value == nullptr) return fail(cudaErrorInvalidValue);
  if (attr == cudaMemPoolAttrReleaseThreshold) p->release_threshold = *static_cast<std::uint64_t*>(value);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  SIM_ENTER("cudaMemPoolGetAttribute");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolGetAttribute");
  if (p == nullptr || value == nullptr) return fail(cudaErrorInvalidValue);
  if (attr == cudaMemPoolAttrReleaseThreshold) {
    *static_cast<std::uint64_t*>(value) = p->release_threshold;
  } else if (attr == cudaMemPoolReuseFollowEventDependencies || attr == cudaMemPoolReuseAllowOpportunistic ||
             attr == cudaMemPoolReuseAllowInternalDependencies) {
    *static_cast<int*>(value) = 1;
  } else {
    *static_cast<std::uint64_t*>(value) = 0;
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t /*minBytesToKeep*/) {
  SIM_ENTER("cudaMemPoolTrimTo");
  if (resolve_pool(g, memPool, "cudaMemPoolTrimTo") == nullptr) return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc* descList,
                                           size_t count) {
  SIM_ENTER("cudaMemPoolSetAccess");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolSetAccess");
  if (p == nullptr || (descList == nullptr && count != 0)) return fail(cudaErrorInvalidValue);
  for (std::size_t i = 0; i < count; ++i) {
    const int d = descList[i].location.id;
    if (!valid_device(g, d)) return fail(cudaErrorInvalidDevice);
    if (d != p->device && !g.peer_possible[static_cast<std::size_t>(d)][static_cast<std::size_t>(p->device)]) {
      return fail(cudaErrorInvalidDevice);
    }
    if (descList[i].flags == cudaMemAccessFlagsProtNone) {
      p->access.erase(d);
    } else {
      p->access.insert(d);
    }
  }
  return cudaSuccess;
}

// A pool's memory is accessible from its own device, and from the devices it was given access to
// with cudaMemPoolSetAccess; cudaDeviceEnablePeerAccess does not change that (CUDA programming
// guide, "Stream Ordered Memory Allocator", device accessibility for multi-GPU support).
cudaError_t CUDARTAPI cudaMemPoolGetAccess(enum cudaMemAccessFlags* flags, cudaMemPool_t memPool,
                                           struct cudaMemLocation* location) {
  SIM_ENTER("cudaMemPoolGetAccess");
  pool_obj* p = resolve_pool(g, memPool, "cudaMemPoolGetAccess");
  if (p == nullptr || flags == nullptr || location == nullptr) return fail(cudaErrorInvalidValue);
  if (location->type != cudaMemLocationTypeDevice || !valid_device(g, location->id)) return fail(cudaErrorInvalidValue);
  *flags = location->id == p->device || p->access.count(location->id) != 0 ? cudaMemAccessFlagsProtReadWrite
                                                                           : cudaMemAccessFlagsProtNone;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  SIM_ENTER("cudaMallocFromPoolAsync");
  pool_obj* p = resolve_pool(g, memPool, "cudaMallocFromPoolAsync");
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  cudaError_t err = cudaSuccess;
  if (resolve(g, stream, "cudaMallocFromPoolAsync", err) == nullptr) return fail(err);
  return fail(device_alloc(g, ptr, size, p->device, true, "cudaMallocFromPoolAsync"));
}

cudaError_t CUDARTAPI cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  SIM_ENTER("cudaMallocAsync");
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaMallocAsync", err);
  if (s == nullptr) return fail(err);
  (void)default_pool_of(g, s->device);
  return fail(device_alloc(g, devPtr, size, s->device, true, "cudaMallocAsync"));
}

cudaError_t CUDARTAPI cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  SIM_ENTER("cudaFreeAsync");
  cudaError_t err = cudaSuccess;
  stream_obj* s = resolve(g, stream, "cudaFreeAsync", err);
  if (s == nullptr) return fail(err);
  if (devPtr == nullptr) return cudaSuccess;
  allocation* a = find_allocation(g, devPtr);
  if (a == nullptr || a->base != reinterpret_cast<std::uintptr_t>(devPtr) || a->kind != mem_kind::device ||
      a->free_pending) {
    violation(g, "cudaFreeAsync",
              in_quarantine(g, devPtr) || (a != nullptr && a->free_pending) ? "a pointer freed twice"
                                                                            : "a pointer no allocation call returned");
    return fail(cudaErrorInvalidValue);
  }
  a->free_pending = true;
  const std::uintptr_t base = a->base;
  // The memory is released when the stream reaches the free, not before (stream-ordered); the
  // free is a write of the whole range for the race detector, so a use not ordered before it races.
  enqueue(g, s,
          [base] {
            state& gs = global();
            std::lock_guard lk(gs.m);
            auto it = gs.allocations.find(base);
            if (it != gs.allocations.end()) release_device(gs, it->second);
          },
          {}, "cudaFreeAsync", {{devPtr, a->size, true, "the allocation freed"}});
  return cudaSuccess;
}

// --- driver entry points -----------------------------------------------------------------------------
// devicekit reads a device's name, UUID and total memory through the driver API, fetched with
// cudaGetDriverEntryPointByVersion (so it never links libcuda). The simulator hands out its own.
namespace {
int sim_cuDeviceGet(int* device, int ordinal) {
  entry e("cuDeviceGet");
  if (e.early != cudaSuccess || device == nullptr || !valid_device(e.g, ordinal))
    return 101;  // CUDA_ERROR_INVALID_DEVICE
  *device = ordinal;
  return 0;
}
int sim_cuDeviceGetName(char* name, int len, int device) {
  entry e("cuDeviceGetName");
  if (e.early != cudaSuccess || name == nullptr || len <= 0 || !valid_device(e.g, device)) return 101;
  std::snprintf(name, static_cast<std::size_t>(len), "%s", e.g.devices[static_cast<std::size_t>(device)].name.c_str());
  return 0;
}
int sim_cuDeviceGetUuid(unsigned char* uuid, int device) {
  entry e("cuDeviceGetUuid");
  if (e.early != cudaSuccess || uuid == nullptr || !valid_device(e.g, device)) return 101;
  std::memcpy(uuid, e.g.devices[static_cast<std::size_t>(device)].uuid_bytes, 16);
  return 0;
}
int sim_cuCtxGetCurrent(void** ctx) {
  entry e("cuCtxGetCurrent");
  if (e.early != cudaSuccess || ctx == nullptr) return 1;  // CUDA_ERROR_INVALID_VALUE
  // No context, or a token naming the current device's primary context.
  *ctx = tl_bound ? reinterpret_cast<void*>(static_cast<std::uintptr_t>(tl_device) + 1) : nullptr;
  return 0;
}
int sim_cuDeviceTotalMem(std::size_t* bytes, int device) {
  entry e("cuDeviceTotalMem");
  if (e.early != cudaSuccess || bytes == nullptr || !valid_device(e.g, device)) return 101;
  *bytes = e.g.devices[static_cast<std::size_t>(device)].total_memory;
  return 0;
}
}  // namespace

cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int /*cudaVersion*/,
                                                       unsigned long long /*flags*/,
                                                       enum cudaDriverEntryPointQueryResult* driverStatus) {
  SIM_ENTER("cudaGetDriverEntryPointByVersion");
  if (symbol == nullptr || funcPtr == nullptr) return fail(cudaErrorInvalidValue);
  const std::string name = symbol;
  void* fn = nullptr;
  if (name == "cuDeviceGet") fn = reinterpret_cast<void*>(&sim_cuDeviceGet);
  if (name == "cuDeviceGetName") fn = reinterpret_cast<void*>(&sim_cuDeviceGetName);
  if (name == "cuDeviceGetUuid") fn = reinterpret_cast<void*>(&sim_cuDeviceGetUuid);
  if (name == "cuDeviceTotalMem") fn = reinterpret_cast<void*>(&sim_cuDeviceTotalMem);
  if (name == "cuCtxGetCurrent") fn = reinterpret_cast<void*>(&sim_cuCtxGetCurrent);
  *funcPtr = fn;
  if (driverStatus != nullptr)
    *driverStatus = fn != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

// --- errors ---------------------------------------------------------------------------------------

#define SIM_ERROR_NAMES(X)                                                                               \
  X(cudaSuccess, "no error")                                                                             \
  X(cudaErrorInvalidValue, "invalid argument")                                                           \
  X(cudaErrorMemoryAllocation, "out of memory")                                                          \
  X(cudaErrorInitializationError, "initialization error")                                                \
  X(cudaErrorCudartUnloading, "driver shutting down")                                                    \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                                    \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                           \
  X(cudaErrorNotReady, "device not ready")                                                               \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                             \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")         \
  X(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices")            \
  X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                                 \
  X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                                   \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
  X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region")       \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                                 \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                                \
  X(cudaErrorNotSupported, "operation not supported")                                                    \
  X(cudaErrorUnknown, "unknown error")

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define SIM_NAME_CASE(code, text) \
  case code: return #code;
    SIM_ERROR_NAMES(SIM_NAME_CASE)
#undef SIM_NAME_CASE
    default: return "cudaErrorUnknown";
  }
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  switch (error) {
#define SIM_STRING_CASE(code, text) \
  case code: return text;
    SIM_ERROR_NAMES(SIM_STRING_CASE)
#undef SIM_STRING_CASE
    default: return "unrecognized error code";
  }
}

}  // extern "C"
