// The scheduler: a worker thread per stream runs its operations in order, after a random delay.
// Locking: the API side queues and waits with the state's mutex held; a worker takes it between
// operations and releases it while one runs. Never inline in the call; the legacy default stream
// orders itself with the blocking streams of its device.
#include "scheduler.hpp"

#include "capture.hpp"
#include "entry.hpp"
#include "race_detector.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <thread>

namespace devicekit::cuda_sim::detail {
namespace {

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

stream_obj* legacy_of(state& g, int device) {
  auto& l = g.legacy[static_cast<std::size_t>(device)];
  if (l == nullptr) l = make_stream(g, device, cudaStreamDefault, stream_obj::kind::legacy);
  return l;
}

}  // namespace

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

/// Queues `run` on `s`. The legacy default stream waits for all work queued before it on the
/// blocking streams of its device, and a blocking stream waits for the work queued before on the
/// legacy stream ("Stream synchronization behavior"; non-blocking streams take part in neither).
/// `accesses` (the memory the operation reads and writes) and the ordering (`waited`: the clock
/// of an event the stream waits for) go to the race detector.
std::uint64_t enqueue(state& g, stream_obj* s, std::function<void()> run,
                      std::vector<std::pair<stream_obj*, std::uint64_t>> deps, const char* api,
                      const std::vector<planned_access>& accesses, const vclock* waited) {
  // "When a stream is in capture mode, all operations pushed into the stream will not be
  // executed, but will instead be captured into a graph" (cudaStreamBeginCapture): the
  // operation becomes a node, run (and race-checked) at each launch of the graph instead.
  if (s->capture != nullptr) {
    record_node(g, s, std::move(run), api, accesses);
    return 0;
  }
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

void wait_device_idle(state& g, std::unique_lock<std::mutex>& lk, int device) {
  for (stream_obj* s : g.streams) {
    if (s->device == device || device < 0) {
      const std::uint64_t target = s->submitted;
      host_joins_stream(g, s);
      wait_until(g, lk, s, target);
    }
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

}  // namespace devicekit::cuda_sim::detail
