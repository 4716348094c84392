// devicekit against the program an expert writes by hand with the raw CUDA runtime and NCCL: for
// each operation, the runtime calls both make in steady state (after a warm-up, since pools and
// staging cache), counted by family on the simulator, and devicekit may make no more in any
// family. The hand-written programs follow the CUDA C++ Best Practices Guide ("Data Transfer
// Between Host and Device": batch small transfers into one, through pinned memory) and NCCL's
// "Single Process, Single Thread, Multiple Devices" example. Hidden ([.hand_written]) from the
// sim.devicekit.gpusN runs; sim.hand_written.gpusN runs them with 1, 2 and 4 devices.
#include <catch2/catch.hpp>

#include "api_names.hpp"
#include "sim_devicekit_support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

/// The families, as numbers (family_of).
enum : unsigned { family_allocation, family_copies, family_synchronisation, family_collectives, family_other };

/// Runtime calls so far, by family. The families are the CUDA runtime API's own groupings
/// (CUDA Runtime API reference: "Memory Management", "Stream Management", "Event Management");
/// polling (cudaStreamQuery, cudaEventQuery) is "other", as the task of a host wait is the
/// synchronisation family's.
struct call_counts {
  std::size_t allocation = 0;
  std::size_t copies = 0;
  std::size_t synchronisation = 0;
  std::size_t collectives = 0;
  std::size_t other = 0;

  void add(unsigned family, std::size_t n) {
    (family == family_allocation        ? allocation
     : family == family_copies          ? copies
     : family == family_synchronisation ? synchronisation
     : family == family_collectives     ? collectives
                                        : other) += n;
  }
  call_counts operator-(const call_counts& b) const {
    return {allocation - b.allocation, copies - b.copies, synchronisation - b.synchronisation,
            collectives - b.collectives, other - b.other};
  }
  [[nodiscard]] std::string str() const {
    return "allocation " + std::to_string(allocation) + ", copies " + std::to_string(copies) + ", synchronisation " +
           std::to_string(synchronisation) + ", collectives " + std::to_string(collectives) + ", other " +
           std::to_string(other);
  }
};

/// The family of runtime call `api`.
unsigned family_of(std::string_view api) {
  static constexpr std::string_view allocation[] = {
      "cudaMalloc",         "cudaMallocAsync",  "cudaMallocFromPoolAsync", "cudaMallocHost",     "cudaFree",
      "cudaFreeAsync",      "cudaFreeHost",     "cudaHostRegister",        "cudaHostUnregister", "cudaMemPoolCreate",
      "cudaMemPoolDestroy", "cudaMemPoolTrimTo"};
  static constexpr std::string_view copy[] = {"cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpyBatchAsync",
                                              "cudaMemcpyPeerAsync"};
  static constexpr std::string_view synchronisation[] = {"cudaStreamSynchronize", "cudaEventSynchronize",
                                                         "cudaDeviceSynchronize", "cudaStreamWaitEvent",
                                                         "cudaEventRecord"};
  static constexpr std::string_view collective[] = {"ncclAllReduce",     "ncclAllGather", "ncclBroadcast",
                                                    "ncclReduceScatter", "ncclSend",      "ncclRecv"};
  auto in = [&](const auto& names) { return std::find(std::begin(names), std::end(names), api) != std::end(names); };
  if (in(allocation)) return family_allocation;
  if (in(copy)) return family_copies;
  if (in(synchronisation)) return family_synchronisation;
  if (in(collective)) return family_collectives;
  return family_other;
}

/// The names the simulator counts calls under (sim/src/api_names.hpp).
using devicekit::cuda_sim::detail::counted_apis;

/// Runtime calls so far, by family.
call_counts read_counts() {
  call_counts c;
  for (const std::string_view a : counted_apis) c.add(family_of(a), sim::api_calls(std::string(a)));
  return c;
}

/// The calls of one side: by family, and by name with counts ("cudaEventRecord 2, ...").
struct measured {
  call_counts counts;
  std::map<std::string, std::size_t> by_name;  ///< the calls made, by name (none: not listed)
  std::string names;
};

/// The calls `f` makes.
template <class F>
measured calls_of(F&& f) {
  std::vector<std::size_t> each;
  for (std::string_view a : counted_apis) each.push_back(sim::api_calls(std::string(a)));
  const call_counts before = read_counts();
  f();
  measured out{read_counts() - before, {}, {}};
  for (std::size_t i = 0; i < each.size(); ++i) {
    const std::string name(counted_apis[i]);
    const std::size_t n = sim::api_calls(name) - each[i];
    if (n == 0) continue;
    out.by_name[name] = n;
    out.names += (out.names.empty() ? "" : ", ") + name + " " + std::to_string(n);
  }
  return out;
}

/// A call devicekit makes beyond the hand-written program for a reason the hand-written program
/// does not have (a check it skips, or a guarantee it does not give), at most `extra` more times.
struct allowed_excess {
  const char* api;
  std::size_t extra;
  const char* why;
};

/// devicekit makes no more calls than the hand-written program, name by name, but for the
/// `allowed` ones (each at most its `extra` more); so in each family no more than the
/// hand-written program's count plus the allowances of that family's names.
void check_no_more_calls(const measured& ours_calls, const measured& hand_calls,
                         std::initializer_list<allowed_excess> allowed = {}) {
  const call_counts& ours = ours_calls.counts;
  const call_counts& hand = hand_calls.counts;
  // The counts of each case in the test's output, for the record (ctest --verbose shows them).
  std::printf("%s\n  devicekit:    %s (%s)\n  hand-written: %s (%s)\n",
              Catch::getResultCapture().getCurrentTestName().c_str(), ours.str().c_str(), ours_calls.names.c_str(),
              hand.str().c_str(), hand_calls.names.c_str());
  INFO("devicekit:    " << ours.str() << " (" << ours_calls.names << ")");
  INFO("hand-written: " << hand.str() << " (" << hand_calls.names << ")");
  call_counts allowance;
  for (const allowed_excess& a : allowed) allowance.add(family_of(a.api), a.extra);
  for (const auto& [name, n] : ours_calls.by_name) {
    const auto h = hand_calls.by_name.find(name);
    const std::size_t theirs = h == hand_calls.by_name.end() ? 0 : h->second;
    const auto* a =
        std::find_if(allowed.begin(), allowed.end(), [&](const allowed_excess& e) { return name == e.api; });
    const std::size_t extra = a == allowed.end() ? 0 : a->extra;
    INFO(name << ": devicekit " << n << ", hand-written " << theirs << ", allowed "
              << (a == allowed.end() ? std::string("no more") : std::to_string(extra) + " more: " + a->why));
    CHECK(n <= theirs + extra);
  }
  CHECK(ours.allocation <= hand.allocation + allowance.allocation);
  CHECK(ours.synchronisation <= hand.synchronisation + allowance.synchronisation);
  CHECK(ours.copies <= hand.copies + allowance.copies);
  CHECK(ours.collectives <= hand.collectives + allowance.collectives);
  CHECK(ours.other <= hand.other + allowance.other);
}

/// What a placement on a caller's stream does that the hand-written program does not (it keeps
/// its staging and device buffers, and waits before it reuses them).
constexpr std::initializer_list<allowed_excess> place_on_stream_excess = {
    {"cudaEventRecord", 2,
     "the staging buffer goes back to its pool in stream order (an event after the copy), and the placed "
     "block records that its copy has run, so that the tree may be dropped before it has (placed_block_release)"},
    {"cudaEventQuery", 4,
     "the block's event is asked when the tree goes; the staging pool asks the events of its earlier "
     "stream-ordered frees before it reuses their memory"},
    {"cuStreamIsCapturing", 2,
     "the capture state: on a capturing stream place allocates graph memory, and the staging pool's "
     "stream-ordered free takes a graph's path"},
    {"cudaGetDevice", 1, "the copy makes the stream's device current and restores the caller's"}};

/// What a call without a stream does that the hand-written program, which queues its copy on the
/// legacy default stream, does not.
constexpr std::initializer_list<allowed_excess> without_stream_excess = {
    {"cudaEventRecord", 1,
     "devicekit queues on a non-blocking stream of its own, ordered after the legacy default stream by an "
     "event recorded there (transfer/detail/streams.hpp says why)"},
    {"cudaStreamWaitEvent", 1, "its stream waits for that event"},
    {"cudaGetDevice", 2, "the ordering and the copy each make the device current and restore the caller's"}};

constexpr std::size_t floats_per_leaf = 16;

/// Host buffers of the hand-written program: its pinned staging, made once (cudaMallocHost is
/// slow, and page-locking on every transfer would cost more than the copy; Best Practices Guide,
/// "Pinned Memory").
struct pinned_buffer {
  std::byte* p = nullptr;
  explicit pinned_buffer(std::size_t bytes) {
    REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&p), bytes) == cudaSuccess);
  }
  ~pinned_buffer() { (void)cudaFreeHost(p); }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
};

/// Device memory of the hand-written program, made once: an expert places the batch of every step
/// into the same buffer.
struct device_buffer {
  std::byte* p = nullptr;
  explicit device_buffer(std::size_t bytes) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), bytes) == cudaSuccess); }
  ~device_buffer() { (void)cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

/// The hand-written placement: pack the leaves into the pinned staging buffer, one
/// cudaMemcpyAsync of the whole, one cudaStreamSynchronize.
template <class Tree>
void hand_written_place(const Tree& tree, std::byte* staging, std::byte* dev, cudaStream_t s) {
  std::size_t at = 0;
  for (const auto& leaf : tree) {
    std::memcpy(staging + at, leaf.data(), leaf.size() * sizeof(float));
    at += leaf.size() * sizeof(float);
  }
  REQUIRE(cudaMemcpyAsync(dev, staging, at, cudaMemcpyHostToDevice, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
}

/// The hand-written placement of leaves already in pinned memory. One leaf is copied straight from
/// where it is (a pinned source needs no staging). Several small leaves are still packed and
/// copied once: each cudaMemcpyAsync costs microseconds of launch overhead, far more than packing
/// 64 bytes on the host (Best Practices Guide, "Data Transfer Between Host and Device": "batching
/// many small transfers into one larger transfer performs significantly better"); the call count
/// is one copy either way.
void hand_written_place_pinned(const std::vector<std::span<const float>>& tree, std::byte* staging, std::byte* dev,
                               cudaStream_t s) {
  if (tree.size() == 1) {
    REQUIRE(cudaMemcpyAsync(dev, tree[0].data(), tree[0].size_bytes(), cudaMemcpyHostToDevice, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    return;
  }
  hand_written_place(tree, staging, dev, s);
}

/// An event the hand-written program creates once and waits on, so that its host waits sleep as
/// devicekit's documented waits do (docs/placement.md: "The library's host waits sleep"):
/// cudaStreamSynchronize and cudaMemcpy spin under the default cudaDeviceScheduleAuto unless the
/// whole device is set to cudaDeviceScheduleBlockingSync, while cudaEventSynchronize on an event
/// created with cudaEventBlockingSync blocks the thread (CUDA runtime API, cudaStreamSynchronize,
/// cudaEventCreateWithFlags and cudaSetDeviceFlags). Such a wait is one cudaEventRecord and one
/// cudaEventSynchronize where a spinning one is one cudaStreamSynchronize.
struct blocking_event {
  cudaEvent_t ev = nullptr;
  blocking_event() {
    REQUIRE(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync) == cudaSuccess);
  }
  ~blocking_event() { (void)cudaEventDestroy(ev); }
  blocking_event(const blocking_event&) = delete;
  blocking_event& operator=(const blocking_event&) = delete;
  /// Waits on the host, sleeping, for the work queued on `s` so far.
  void wait(cudaStream_t s) const {
    REQUIRE(cudaEventRecord(ev, s) == cudaSuccess);
    REQUIRE(cudaEventSynchronize(ev) == cudaSuccess);
  }
};

std::vector<float> flat(const std::vector<std::vector<float>>& tree) {
  std::vector<float> out;
  for (const auto& l : tree) out.insert(out.end(), l.begin(), l.end());
  return out;
}

}  // namespace

TEST_CASE("placing a pageable tree makes no more runtime calls than the hand-written program",
          "[sim][.hand_written][place]") {
  const std::size_t leaves = GENERATE(std::size_t{1}, std::size_t{100}, std::size_t{10000});
  CAPTURE(leaves);
  const dk::device gpu = dk::device::cuda(0);
  const auto tree = big_tree(leaves, floats_per_leaf);
  const std::size_t bytes = leaves * floats_per_leaf * sizeof(float);

  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
  const dk::stream s(gpu);
  auto ours = [&] {
    auto placed = dk::place(tree, gpu, s, pool);
    s.synchronize();
    REQUIRE(placed.size() == leaves);
  };       // the placed tree is dropped, as a training step drops its batch
  ours();  // warm-up: the pool's block, the staging ring, events

  const pinned_buffer staging(bytes);
  const device_buffer dev(bytes);
  auto hand = [&] { hand_written_place(tree, staging.p, dev.p, s.native_handle()); };
  hand();

  check_no_more_calls(calls_of(ours), calls_of(hand), place_on_stream_excess);
  // Both moved the data.
  auto placed = dk::place(tree, gpu, s, pool);
  s.synchronize();
  CHECK(dk::to_host(placed) == tree);
  std::vector<float> back(leaves * floats_per_leaf);
  REQUIRE(cudaMemcpy(back.data(), dev.p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == flat(tree));
}

TEST_CASE("placing a tree in pinned memory makes no more runtime calls than the hand-written program",
          "[sim][.hand_written][place]") {
  const std::size_t leaves = GENERATE(std::size_t{1}, std::size_t{100}, std::size_t{10000});
  CAPTURE(leaves);
  const dk::device gpu = dk::device::cuda(0);
  const auto values = big_tree(leaves, floats_per_leaf);
  const std::size_t bytes = leaves * floats_per_leaf * sizeof(float);
  const pinned_buffer source(bytes);  // the leaves, back to back in page-locked memory
  std::vector<std::span<const float>> tree;
  for (std::size_t i = 0; i < leaves; ++i) {
    auto* at = reinterpret_cast<float*>(source.p) + i * floats_per_leaf;
    std::memcpy(at, values[i].data(), floats_per_leaf * sizeof(float));
    tree.emplace_back(at, floats_per_leaf);
  }

  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
  const dk::stream s(gpu);
  auto ours = [&] {
    auto placed = dk::place(tree, gpu, s, pool);
    s.synchronize();
    REQUIRE(placed.size() == leaves);
  };
  ours();

  const pinned_buffer staging(bytes);
  const device_buffer dev(bytes);
  auto hand = [&] { hand_written_place_pinned(tree, staging.p, dev.p, s.native_handle()); };
  hand();

  check_no_more_calls(calls_of(ours), calls_of(hand), place_on_stream_excess);
  auto placed = dk::place(tree, gpu, s, pool);
  s.synchronize();
  CHECK(dk::to_host(placed) == values);
  std::vector<float> back(leaves * floats_per_leaf);
  REQUIRE(cudaMemcpy(back.data(), dev.p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == flat(values));
}

TEST_CASE("bringing a tree back makes no more runtime calls than the hand-written program",
          "[sim][.hand_written][to_host]") {
  const std::size_t leaves = GENERATE(std::size_t{1}, std::size_t{100}, std::size_t{10000});
  CAPTURE(leaves);
  const dk::device gpu = dk::device::cuda(0);
  const auto tree = big_tree(leaves, floats_per_leaf);
  const std::size_t bytes = leaves * floats_per_leaf * sizeof(float);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
  const dk::stream s(gpu);
  const auto placed = dk::place(tree, gpu, s, pool);
  s.synchronize();

  std::vector<std::vector<float>> ours_back;
  auto ours = [&] { ours_back = dk::to_host(placed, s); };
  ours();

  // The hand-written program's tree on the device, packed in one buffer, and its way back: one
  // copy into the pinned staging buffer, one wait, then unpack into host vectors that own their
  // memory, as to_host's do. The wait sleeps, as to_host's does (blocking_event).
  const pinned_buffer staging(bytes);
  const device_buffer dev(bytes);
  hand_written_place(tree, staging.p, dev.p, s.native_handle());
  const blocking_event done;
  std::vector<std::vector<float>> hand_back;
  auto hand = [&] {
    REQUIRE(cudaMemcpyAsync(staging.p, dev.p, bytes, cudaMemcpyDeviceToHost, s.native_handle()) == cudaSuccess);
    done.wait(s.native_handle());
    hand_back.assign(leaves, std::vector<float>(floats_per_leaf));
    for (std::size_t i = 0; i < leaves; ++i) {
      std::memcpy(hand_back[i].data(), staging.p + i * floats_per_leaf * sizeof(float),
                  floats_per_leaf * sizeof(float));
    }
  };
  hand();

  check_no_more_calls(calls_of(ours), calls_of(hand),
                      {{"cuStreamIsCapturing", 1,
                        "a capturing stream is refused before anything is queued (the host would wait for work "
                        "only recorded, and the runtime would invalidate the capture)"},
                       {"cudaGetDevice", 1, "the copy makes the stream's device current and restores the caller's"}});
  CHECK(ours_back == tree);
  CHECK(hand_back == tree);
}

TEST_CASE("placing a tree without a stream makes no more runtime calls than the hand-written program",
          "[sim][.hand_written][place]") {
  const std::size_t leaves = GENERATE(std::size_t{1}, std::size_t{100}, std::size_t{10000});
  CAPTURE(leaves);
  const dk::device gpu = dk::device::cuda(0);
  const auto tree = big_tree(leaves, floats_per_leaf);
  const std::size_t bytes = leaves * floats_per_leaf * sizeof(float);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
  auto ours = [&] {
    auto placed = dk::place(tree, gpu, pool);
    REQUIRE(placed.size() == leaves);
  };
  ours();

  // The documented behaviour of a call without a stream (docs/placement.md, "Calls without a
  // stream"): ordered after the legacy default stream as cudaMemcpy is, finished on return, and
  // the wait sleeps. The hand-written program does the same on the legacy default stream itself:
  // pack, one copy there, a sleeping wait (blocking_event).
  const pinned_buffer staging(bytes);
  const device_buffer dev(bytes);
  const blocking_event done;
  auto hand = [&] {
    std::size_t at = 0;
    for (const auto& leaf : tree) {
      std::memcpy(staging.p + at, leaf.data(), leaf.size() * sizeof(float));
      at += leaf.size() * sizeof(float);
    }
    REQUIRE(cudaMemcpyAsync(dev.p, staging.p, at, cudaMemcpyHostToDevice, cudaStreamLegacy) == cudaSuccess);
    done.wait(cudaStreamLegacy);
  };
  hand();

  check_no_more_calls(calls_of(ours), calls_of(hand), without_stream_excess);
  CHECK(dk::to_host(dk::place(tree, gpu, pool)) == tree);
  std::vector<float> back(leaves * floats_per_leaf);
  REQUIRE(cudaMemcpy(back.data(), dev.p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == flat(tree));
}

TEST_CASE("bringing a tree back without a stream makes no more runtime calls than the hand-written program",
          "[sim][.hand_written][to_host]") {
  const std::size_t leaves = GENERATE(std::size_t{1}, std::size_t{100}, std::size_t{10000});
  CAPTURE(leaves);
  const dk::device gpu = dk::device::cuda(0);
  const auto tree = big_tree(leaves, floats_per_leaf);
  const std::size_t bytes = leaves * floats_per_leaf * sizeof(float);
  dk::memory_pool<dk::cuda_device_resource> pool{dk::cuda_device_resource(0)};
  const auto placed = dk::place(tree, gpu, pool);

  std::vector<std::vector<float>> ours_back;
  auto ours = [&] { ours_back = dk::to_host(placed); };
  ours();

  // As for placing without a stream: the hand-written program copies on the legacy default
  // stream and waits sleeping, then unpacks into host vectors.
  const pinned_buffer staging(bytes);
  const device_buffer dev(bytes);
  hand_written_place(tree, staging.p, dev.p, cudaStreamLegacy);
  const blocking_event done;
  std::vector<std::vector<float>> hand_back;
  auto hand = [&] {
    REQUIRE(cudaMemcpyAsync(staging.p, dev.p, bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy) == cudaSuccess);
    done.wait(cudaStreamLegacy);
    hand_back.assign(leaves, std::vector<float>(floats_per_leaf));
    for (std::size_t i = 0; i < leaves; ++i) {
      std::memcpy(hand_back[i].data(), staging.p + i * floats_per_leaf * sizeof(float),
                  floats_per_leaf * sizeof(float));
    }
  };
  hand();

  check_no_more_calls(calls_of(ours), calls_of(hand), without_stream_excess);
  CHECK(ours_back == tree);
  CHECK(hand_back == tree);
}

#if DEVICEKIT_HAS_NCCL
TEST_CASE("all-reduce across the devices makes no more runtime calls than the hand-written program",
          "[sim][.hand_written][nccl]") {
  const std::size_t leaves = GENERATE(std::size_t{1}, std::size_t{100}, std::size_t{10000});
  CAPTURE(leaves);
  const auto devs = all_gpus();
  const int n = static_cast<int>(devs.size());
  // Small whole numbers, so that sums of up to 4^2 times them are exact in any order.
  std::vector<std::vector<float>> tree(leaves, std::vector<float>(floats_per_leaf));
  for (std::size_t i = 0; i < leaves; ++i) {
    for (std::size_t j = 0; j < floats_per_leaf; ++j) tree[i][j] = static_cast<float>((i * floats_per_leaf + j) % 13);
  }
  const std::size_t count = leaves * floats_per_leaf;

  auto comm = dk::nccl_communicator::init_all(devs);
  std::vector<dk::placed_t<std::vector<std::vector<float>>>> trees;
  for (const auto d : devs) trees.push_back(dk::place(tree, d));
  auto ours = [&] { dk::all_reduce(comm, dk::one_per_device(std::span(trees)), dk::reduce_op::sum); };
  ours();

  // NCCL's example "Single Process, Single Thread, Multiple Devices": one communicator per device
  // (ncclCommInitAll), each device's tree packed in one buffer, one ncclAllReduce per device in a
  // group, then each device's stream waited for.
  std::vector<ncclComm_t> comms(devs.size());
  std::vector<int> ordinals;
  for (const auto d : devs) ordinals.push_back(d.ordinal());
  REQUIRE(ncclCommInitAll(comms.data(), n, ordinals.data()) == ncclSuccess);
  std::vector<std::unique_ptr<device_buffer>> bufs;
  std::vector<cudaStream_t> streams(devs.size());
  for (int i = 0; i < n; ++i) {
    const dk::scoped_device on(i);
    bufs.push_back(std::make_unique<device_buffer>(count * sizeof(float)));
    REQUIRE(cudaMemcpy(bufs.back()->p, flat(tree).data(), count * sizeof(float), cudaMemcpyHostToDevice) ==
            cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking) == cudaSuccess);
  }
  auto hand = [&] {
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (int i = 0; i < n; ++i) {
      REQUIRE(ncclAllReduce(bufs[i]->p, bufs[i]->p, count, ncclFloat, ncclSum, comms[i], streams[i]) == ncclSuccess);
    }
    REQUIRE(ncclGroupEnd() == ncclSuccess);
    for (int i = 0; i < n; ++i) {
      REQUIRE(cudaSetDevice(i) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(streams[i]) == cudaSuccess);
    }
  };
  hand();

  const measured ours_calls = calls_of(ours);
  const measured hand_calls = calls_of(hand);
  // Two sums on each side (the warm-up and the counted one): every element is n^2 times the original.
  const float factor = static_cast<float>(n) * static_cast<float>(n);
  auto scaled = tree;
  for (auto& l : scaled) {
    for (auto& v : l) v *= factor;
  }
  CHECK(dk::to_host(trees.back()) == scaled);
  std::vector<float> back(count);
  REQUIRE(cudaMemcpy(back.data(), bufs.back()->p, count * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == flat(scaled));
  for (int i = 0; i < n; ++i) {
    REQUIRE(cudaSetDevice(i) == cudaSuccess);
    REQUIRE(cudaStreamDestroy(streams[i]) == cudaSuccess);
    REQUIRE(ncclCommDestroy(comms[i]) == ncclSuccess);
  }
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  // What devicekit does beyond the hand-written program, per device (the waits are
  // cudaStreamSynchronize on both sides: a watchdog thread, which makes no runtime calls, looks
  // for NCCL's asynchronous errors and the timeout meanwhile).
  const auto per_device = devs.size();
  const std::initializer_list<allowed_excess> excess = {
      {"ncclAllGather", per_device,
       "before any data moves the ranks compare their trees' structures (structure_mismatch_error on every rank "
       "instead of reducing mismatched bytes); the hand-written program trusts that they agree"},
      {"cudaMemcpyAsync", per_device + 1, "each rank's structure hash to its device, and the gathered hashes back"},
      {"cudaStreamSynchronize", per_device + 1, "the gathered hashes are waited for before the host reads them"},
      {"cudaMemcpyBatchAsync", 2 * per_device,
       "the tree's leaves are packed into the staging buffer and unpacked after (each leaf is its own "
       "allocation slot; the hand-written program keeps its data packed in one buffer)"},
      {"cuStreamIsCapturing", 3 * per_device,
       "the operation asks whether each rank's stream is capturing (a captured collective does not wait), and "
       "the packing and unpacking copies ask it again"},
      {"cudaSetDevice", 2 * per_device, "the packing and unpacking make each rank's device current and restore it"},
      {"cudaGetDevice", 2 * per_device, "the same"},
      {"cuCtxGetCurrent", 2 * per_device, "the same: a context is restored only where one was current"}};
  check_no_more_calls(ours_calls, hand_calls, excess);
}
#endif
