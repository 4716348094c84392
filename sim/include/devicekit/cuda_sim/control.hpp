#pragma once
/// \file
/// devicekit::cuda_sim: simulated GPUs for programs linked against `devicekit::cuda_sim` instead
/// of `CUDA::cudart`. This header is the test-facing side: what a test asks of the simulator
/// beyond the CUDA runtime API it implements (sim/README.md lists the API subset and each rule).
///
/// Configuration comes from the environment, read at the first call:
///   DEVICEKIT_SIM_GPUS=N                 simulated devices (default 1; 0 = no device)
///   DEVICEKIT_SIM_GPU<i>="k=v,k=v"       device i: name, memory (bytes, or with KiB/MiB/GiB),
///                                        cc (9.0), sms, pci_bus, uuid (GPU-xxxxxxxx-...); for i
///                                        at or above DEVICEKIT_SIM_GPUS it is ignored, unchecked
///   DEVICEKIT_SIM_PEER=all|none|0>1,1>0  which device can access which (default all)
///   DEVICEKIT_SIM_SEED=N                 seed of the per-operation scheduling delays
///   DEVICEKIT_SIM_MAX_DELAY_US=N         largest delay before a queued operation runs (default 200)
///   DEVICEKIT_SIM_FAIL="api:n:code,..."  the n-th call (from 1) of `api` fails with error `code`;
///                                        `api` as for fail_call, another name is a bad value
///   DEVICEKIT_SIM_NCCL_FAULT="device:ops:error|hang,..."
///                                        NCCL on `device` completes `ops` operations, then the next
///                                        never completes: with a number (an ncclResult_t; the word
///                                        `error` means ncclSystemError) ncclCommGetAsyncError
///                                        reports it, with `hang` nothing is reported (see
///                                        nccl_async_error_after and nccl_hang_after)
///   DEVICEKIT_SIM_RACECHECK=0|1          the stream-order race detector (default 1, on): every
///                                        access to device or pinned host memory is checked, when
///                                        it is queued, against the earlier ones it is not ordered
///                                        with (vector clocks over streams and host threads); a
///                                        race is a violation (device_access, races_detected)
///   DEVICEKIT_SIM_NCCL_TIMEOUT_S=S       how long NCCL across processes waits for a peer (default 60)
/// A bad value (sim/README.md lists the ranges) ends the process at the first call with exit
/// status 2 and a message that names the variable, its value and what it accepts.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

namespace devicekit::cuda_sim {

/// Simulated devices (what cudaGetDeviceCount reports).
int device_count();

/// Primary contexts created on `device` so far: 0 or 1. CUDA creates one at cudaSetDevice and at
/// the first call that needs one on the current device (CUDA programming guide, "Initialization").
int contexts_created(int device);

/// Bytes of device memory allocated on `device` and not yet freed (pools included).
std::size_t device_bytes_in_use(int device);

/// Violations so far: uses of the API that CUDA leaves undefined (a destroyed stream used, a
/// pointer freed twice...). Each is printed when it happens; a process that ends with more than
/// it expected (expect_violations) exits with status 86 whatever main returned.
std::vector<std::string> violations();

/// The test provokes `n` more violations on purpose.
void expect_violations(std::size_t n);

/// The `nth` next call (1 = the very next) of runtime function `api` fails with `error` and does
/// nothing else. NCCL's collectives can fail too: pass the ncclResult_t cast to cudaError_t.
/// `api` is a name the simulator counts calls under (sim/README.md, "Fault injection"; a function
/// that forwards to another, such as cudaEventCreate, counts as that one). Throws
/// std::invalid_argument, arming nothing, for any other name (naming the near ones), for `nth`
/// below 1 and for cudaSuccess: each would arm a failure that never fires.
void fail_call(const std::string& api, int nth, cudaError_t error);

/// ncclSystemError, the default error of nccl_async_error_after. This header does not include
/// <nccl.h> (the simulator may be built without it); the numbers are ncclResult_t's.
inline constexpr int nccl_system_error = 2;

/// An asynchronous NCCL failure (a network or peer error detected while the operation runs):
/// communicators on simulated `device` complete `ops` more collective or point-to-point
/// operations (counted when they are issued) normally; the next one never moves its data, and
/// once its stream reaches it ncclCommGetAsyncError on that communicator reports `error` (an
/// ncclResult_t; 0 makes it a hang as below). Its peers wait for it in that operation. Work
/// queued behind it stays blocked until ncclCommAbort on a communicator of the clique, which,
/// as with real NCCL, makes the stuck operations exit. Used once; a later call replaces a fault
/// not yet used on the same device. Needs the simulator's NCCL (nccl.h at build time).
void nccl_async_error_after(int device, int ops, int error = nccl_system_error);

/// The same as nccl_async_error_after, but nothing is ever reported: the operation after `ops`
/// simply never completes (a dead peer), until ncclCommAbort.
void nccl_hang_after(int device, int ops);

/// Host waits that spin: calls of cudaStreamSynchronize and cudaDeviceSynchronize, and of
/// cudaEventSynchronize on an event created without cudaEventBlockingSync. Under the default
/// scheduling, cudaDeviceScheduleAuto, CUDA spins the calling thread in these waits when the
/// device has fewer active contexts than the host has cores (cudaSetDeviceFlags), which is the
/// usual case; a wait on an event made with cudaEventBlockingSync blocks the thread instead
/// (cudaEventCreateWithFlags). A test can assert that a path waits without burning a core.
std::size_t spinning_host_waits();

/// Declares an access of `bytes` at `p` to the race detector (device memory or pinned host memory;
/// other memory is ignored). Called from a host function (cudaLaunchHostFunc) it is an access of
/// that stream operation, ordered as the stream orders it: a test's stand-in for a kernel that
/// reads or writes the range. Called from any other thread it is an access by that host thread
/// now (the host reading pinned memory that a copy writes, say), ordered after what the thread
/// has synchronised with. devicekit's headers reach it through the C symbol below.
void device_access(const void* p, std::size_t bytes, bool write);

/// Races the detector has reported so far (each is a violation too).
std::size_t races_detected();

/// Calls of runtime (or NCCL) function `api` so far, by its name ("cudaEventRecord"), whatever
/// they returned; calls refused at the entry (after teardown, injected failures) count too. A
/// test can show that a path makes no CUDA call at all, or exactly the ones it must (subtract two
/// readings). Not counted: this header's own functions, and the error functions
/// (cudaGetLastError, cudaPeekAtLastError, cudaGetErrorName/String), which only read the
/// thread's last error or a table.
std::size_t api_calls(const std::string& api);

/// Every runtime and NCCL call so far, all functions together (see api_calls).
std::size_t api_calls_total();

/// cudaGraphLaunch calls accepted so far.
std::size_t graph_launches();

/// Graphs (cudaGraphCreate, cudaStreamBeginCapture) and executable graphs (cudaGraphInstantiate)
/// not yet destroyed; the graph of an active capture counts. A test can show that a path
/// destroys every graph it makes.
std::size_t graphs_alive();

/// Copies accepted so far, by where their two ends are (device memory of which device, or host
/// memory, pinned or not), counted once per copy whether it came alone (cudaMemcpy,
/// cudaMemcpyAsync, cudaMemcpyPeerAsync) or in a cudaMemcpyBatchAsync; batch calls and the
/// copies they carried are counted apart too. A test can show that a path stayed on the devices
/// (no device_to_host) or took the batched API.
struct copy_counters {
  std::size_t host_to_device = 0;
  std::size_t device_to_host = 0;
  std::size_t device_to_device = 0;  ///< both ends in memory of one device
  std::size_t peer = 0;              ///< ends on two different devices
  std::size_t host_to_host = 0;
  std::size_t batch_calls = 0;     ///< accepted cudaMemcpyBatchAsync calls
  std::size_t batched_copies = 0;  ///< the copies those calls carried (also counted by direction)
};
/// The counts since the process started (subtract two readings to see one operation's copies).
copy_counters copies();

}  // namespace devicekit::cuda_sim

/// device_access for code that cannot include this header or may run without the simulator:
/// declared weak there, called when it resolves. `write` is 0 or 1.
extern "C" void devicekit_cuda_sim_host_access(const void* p, std::size_t bytes, int write);
