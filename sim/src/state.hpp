#pragma once
// The simulator's state: devices, contexts, streams, events, allocations and pools.
// Locking: one global mutex (state::m) guards all of it and the objects it owns; one condition
// variable (state::cv) announces every completed operation (simple, and enough for test
// programs). The API families (device.cpp, stream.cpp, ...) work on it under that mutex.
#include "race_detector.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace devicekit::cuda_sim::detail {

struct device_spec {
  std::string name = "NVIDIA H100 80GB HBM3";
  std::uint64_t total_memory = 85'017'755'648ull;  // what an H100 80GB HBM3 reports (81,079 MiB)
  int cc_major = 9;
  int cc_minor = 0;
  int sms = 132;
  int pci_bus = 0;
  std::string uuid;
  unsigned char uuid_bytes[16] = {};
};

/// An operation queued on a stream: it first waits for `deps` (stream, count) pairs, then runs.
struct queued_op {
  std::vector<std::pair<stream_obj*, std::uint64_t>> deps;
  std::function<void()> run;
  std::shared_ptr<const op_info> info;  ///< the race detector's view (nullptr when it is off)
};

struct capture_seq;

struct stream_obj {
  int device = 0;
  unsigned flags = cudaStreamDefault;
  enum class kind { created, legacy, per_thread } type = kind::created;
  bool destroyed = false;
  std::deque<queued_op> queue;
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  std::thread worker;
  std::mt19937_64 rng;
  int agent = -1;                         ///< the race detector's agent id
  vclock clock;                           ///< the clock of the last operation queued on it
  capture_seq* capture = nullptr;         ///< the capture sequence it belongs to (capture.cpp), or nullptr
  std::vector<std::size_t> capture_deps;  ///< nodes its next captured operation depends on
  [[nodiscard]] bool blocking() const noexcept { return (flags & cudaStreamNonBlocking) == 0; }
};

struct event_obj {
  int device = 0;
  unsigned flags = 0;
  bool destroyed = false;
  stream_obj* stream = nullptr;            ///< of the last record; nullptr: never recorded (complete)
  std::uint64_t target = 0;                ///< complete when stream->completed >= target
  vclock clock;                            ///< the race detector's clock of the last record
  std::uint64_t capture_id = 0;            ///< last recorded in this capture sequence (a captured event), or 0
  std::vector<std::size_t> capture_nodes;  ///< what a captured record stands for: the nodes it follows
};

enum class mem_kind { device, pinned_host, registered_host };

/// The queued copies that still read or write one pinned host range (cudaMallocHost or
/// cudaHostRegister). Shared by the allocation and by each copy queued on it, so that a copy
/// that outlives the allocation's record (a violation) still finds it.
struct host_uses {
  std::size_t pending = 0;         ///< copies queued or running, not yet complete
  void* free_when_done = nullptr;  ///< cudaFreeHost came first: std::free this after the last one
};

struct allocation {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  mem_kind kind = mem_kind::device;
  int device = -1;
  bool from_pool = false;
  bool free_pending = false;                  ///< cudaFreeAsync queued, not yet run
  std::shared_ptr<host_uses> uses = nullptr;  ///< pinned host memory: its queued copies (made at the first)
  std::vector<access_record> accesses{};      ///< the race detector's records (dropped with the allocation)
  std::uint64_t graph_capture = 0;            ///< graph memory: the capture sequence whose alloc node made it
};

/// One node of a captured graph: the operation's run function (run again at every launch), the
/// nodes it depends on (earlier indices), and what the race detector is told at each launch.
struct graph_node {
  std::function<void()> run;
  std::vector<std::size_t> deps;
  const char* api = "";
  std::vector<planned_access> accesses;
  event_obj* wait_event = nullptr;  ///< an external event wait (cudaEventWaitExternal): its record at launch
};

/// Graph memory (allocation nodes): allocated at capture, owned by the graph and every exec made
/// from it, released when the last of them is destroyed and no launch is in flight.
struct graph_memory {
  std::vector<std::uintptr_t> bases;
  int owners = 1;  ///< the graph, then each exec
  std::size_t launches_in_flight = 0;
  std::size_t unfreed = 0;  ///< alloc nodes without a free node in the graph
};

struct graph_obj {
  std::deque<graph_node> nodes;  ///< a deque: a node's address is its cudaGraphNode_t and stays valid
  std::shared_ptr<graph_memory> memory = std::make_shared<graph_memory>();
  bool destroyed = false;
  std::size_t execs = 0;  ///< execs made from it and not destroyed
};

struct exec_obj {
  std::shared_ptr<const std::deque<graph_node>> nodes;  ///< a copy: independent of the graph after instantiate
  std::shared_ptr<graph_memory> memory;
  graph_obj* graph = nullptr;
  bool auto_free = false;  ///< cudaGraphInstantiateFlagAutoFreeOnLaunch
  bool destroyed = false;
  std::size_t launches = 0;
  stream_obj* last_stream = nullptr;  ///< where the last launch ended: the next is ordered after it
  std::uint64_t last_target = 0;
  vclock last_clock;
};

/// A stream capture sequence (cudaStreamBeginCapture to cudaStreamEndCapture).
struct capture_seq {
  std::uint64_t id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  stream_obj* origin = nullptr;
  std::thread::id thread;
  bool invalidated = false;
  graph_obj* graph = nullptr;
  std::set<stream_obj*> streams;  ///< the origin and the streams forked into it
};

struct pool_obj {
  int device = 0;
  std::uint64_t release_threshold = 0;
  std::set<int> access;  ///< devices given read-write access (cudaMemPoolSetAccess)
  bool is_default = false;
  bool destroyed = false;
};

/// An injected NCCL fault on one device (nccl_async_error_after, nccl_hang_after,
/// DEVICEKIT_SIM_NCCL_FAULT): after `remaining` more operations, the next one never completes.
struct nccl_fault {
  int remaining = 0;
  int error = 0;  ///< the ncclResult_t that ncclCommGetAsyncError reports then; 0: a silent hang
};

/// Copies the runtime has accepted, by direction (control.hpp, copy_counters): one count per
/// copy, whether it came alone (cudaMemcpy*, cudaMemcpyPeer*) or in a batch.
struct copy_counts {
  std::size_t host_to_device = 0;
  std::size_t device_to_host = 0;
  std::size_t device_to_device = 0;  ///< both ends on one device
  std::size_t peer = 0;              ///< device memory of two different devices
  std::size_t host_to_host = 0;
  std::size_t batch_calls = 0;     ///< accepted cudaMemcpyBatchAsync calls
  std::size_t batched_copies = 0;  ///< the copies those calls carried
};

struct state {
  std::mutex m;
  std::condition_variable cv;
  bool configured = false;
  bool torn_down = false;
  bool stopping = false;
  std::vector<device_spec> devices;
  std::vector<std::vector<bool>> peer_possible;
  std::vector<std::set<int>> peer_enabled;  ///< [device] = peers it can access
  std::vector<int> contexts;
  std::vector<std::size_t> bytes_in_use;
  std::vector<stream_obj*> legacy;                                    ///< per device, made on first use
  std::map<std::pair<std::thread::id, int>, stream_obj*> per_thread;  ///< cudaStreamPerThread
  std::vector<pool_obj*> default_pool;                                ///< per device
  std::set<stream_obj*> streams;  ///< every stream ever made (destroyed ones stay: handles never alias)
  std::set<event_obj*> events;
  std::set<pool_obj*> pools;
  std::map<std::uintptr_t, allocation> allocations;      ///< by base address
  std::deque<std::pair<void*, std::size_t>> quarantine;  ///< freed device memory, kept poisoned
  std::size_t quarantine_bytes = 0;
  std::uint64_t seed = 1;
  unsigned max_delay_us = 200;
  /// DEVICEKIT_SIM_NCCL_TIMEOUT_S: how long NCCL across processes waits for a peer (nccl_remote.cpp)
  std::chrono::milliseconds nccl_timeout{60'000};
  std::map<std::string, std::map<int, cudaError_t>> failures;  ///< api -> call number -> error
  std::map<std::string, int> calls;
  std::vector<std::string> violations;
  std::size_t expected_violations = 0;
  std::size_t spinning_host_waits = 0;  ///< see spinning_host_waits() in control.hpp
  copy_counts copies;
  std::map<int, nccl_fault> nccl_faults;  ///< by device; one at a time, used once
  bool racecheck = true;                  ///< DEVICEKIT_SIM_RACECHECK (default on)
  std::size_t races = 0;                  ///< races reported so far
  int agents = 0;                         ///< agent ids handed out (streams and host threads)
  std::vector<std::unique_ptr<host_agent>> hosts;
  vclock host_seen;  ///< what any host thread has synchronised with (race_detector.cpp, host_of)
  std::uint64_t next_capture_id = 1;
  std::map<std::uint64_t, std::unique_ptr<capture_seq>> captures;  ///< active capture sequences by id
  std::set<graph_obj*> graphs;  ///< every graph ever made (destroyed ones stay: handles never alias)
  std::set<exec_obj*> execs;
  std::size_t graph_launches = 0;        ///< accepted cudaGraphLaunch calls
  std::size_t graphs_alive = 0;          ///< graphs and execs not destroyed
  std::vector<std::size_t> graph_bytes;  ///< per device: graph memory allocated now (cudaDeviceGetGraphMemAttribute)
  std::vector<std::size_t> graph_bytes_high;
};

/// The one state, made at the first call and never destroyed (stream workers and exit handlers
/// use it to the end).
state& global();

}  // namespace devicekit::cuda_sim::detail
