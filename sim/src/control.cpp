// The test-facing control API (<devicekit/cuda_sim/control.hpp>): counters, violations, faults.
// Locking: each call takes the state's mutex, as a runtime entry point does.
#include "api_names.hpp"
#include "entry.hpp"
#include "race_detector.hpp"

#include <devicekit/cuda_sim/control.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace devicekit::cuda_sim {
using namespace detail;

namespace {
/// Whether `api` names a function of this control API (counted by the entry like any call):
/// runtime, driver, NCCL and NVML functions all start with their library's prefix.
bool is_control_call(const std::string& api) {
  return !(api.starts_with("cu") || api.starts_with("nccl") || api.starts_with("nvml"));
}
}  // namespace

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
  // Each of these would arm a failure that never fires (cudaSuccess is no failure), and the
  // test that armed it would pass for the wrong reason.
  const std::string prefix = "devicekit::cuda_sim::fail_call(\"" + api + "\", " + std::to_string(nth) + ", " +
                             std::to_string(static_cast<int>(error)) + "): ";
  if (!is_counted_api(api)) throw std::invalid_argument(prefix + unknown_api_problem(api));
  if (nth < 1) throw std::invalid_argument(prefix + "nth counts from 1, the very next call");
  if (error == cudaSuccess) throw std::invalid_argument(prefix + "cudaSuccess is no failure");
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
std::size_t api_calls(const std::string& api) {
  entry e("api_calls");
  const auto it = e.g.calls.find(api);
  return it == e.g.calls.end() ? 0 : static_cast<std::size_t>(it->second);
}
std::size_t api_calls_total() {
  entry e("api_calls_total");
  std::size_t n = 0;
  for (const auto& [api, count] : e.g.calls) {
    if (!is_control_call(api)) n += static_cast<std::size_t>(count);
  }
  return n;
}
std::size_t graph_launches() {
  entry e("graph_launches");
  return e.g.graph_launches;
}
std::size_t graphs_alive() {
  entry e("graphs_alive");
  return e.g.graphs_alive;
}

}  // namespace devicekit::cuda_sim

extern "C" void devicekit_cuda_sim_host_access(const void* p, std::size_t bytes, int write) {
  devicekit::cuda_sim::device_access(p, bytes, write != 0);
}
