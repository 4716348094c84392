// A device this process does not have is one config_error at every public door that takes a
// device (core/detail/device_exists.hpp): placement, streams, device-wide calls, the manager's calls and
// the global ones. On this machine (no driver, or a GPU machine: no process sees cuda:4096) and in
// a build without CUDA alike. The same doors on simulated GPUs: tests/sim/test_sim_place.cpp.
#include <catch2/catch.hpp>

#include <devicekit/compute.hpp>
#include <devicekit/core/device_ops.hpp>
#include <devicekit/devicekit.hpp>

#include "test_support.hpp"

#include <cstddef>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

const dk::device missing = dk::device::cuda(4096);

/// What `f` threw: the message of a config_error, or a note saying it threw something else.
template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const dk::config_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a config_error: ") + e.what();
  }
  return "no exception";
}

/// The one error for cuda:4096, named after `operation`.
void check_missing(const std::string& what, const std::string& operation) {
  INFO(what);
  CHECK_THAT(what, Catch::StartsWith(operation + ": cuda:4096 does not exist: "));
#if DEVICEKIT_HAS_CUDA
  if (dk::detail::cuda_device_count() > 0) {
    CHECK_THAT(what, Catch::Contains("this process sees") && Catch::Contains("CUDA_VISIBLE_DEVICES chooses which"));
  } else {  // the runtime's reason for listing none, and what to do
    CHECK_THAT(what, Catch::Contains("this process sees 0 CUDA devices, as ") && Catch::Contains("device::cpu()"));
  }
#else
  CHECK_THAT(what, Catch::Contains("devicekit was built without CUDA"));
#endif
}

struct plain_resource {
  void* allocate(std::size_t bytes, std::size_t alignment) {
    return ::operator new (bytes, std::align_val_t{alignment});
  }
  void deallocate(void* p, std::size_t, std::size_t alignment) { ::operator delete (p, std::align_val_t{alignment}); }
};

}  // namespace

TEST_CASE("a device the process does not have is the same config_error at every door", "[place][missing_device]") {
  const std::vector<float> v(16, 1.f);
  plain_resource resource;
  check_missing(config_error_of([&] { (void)dk::place(v, missing); }), "place");
  check_missing(config_error_of([&] { (void)dk::place(v, missing, resource); }), "place");
  check_missing(config_error_of([&] { (void)dk::place(v, missing, dk::stream_ref{}, resource); }), "place");
  check_missing(config_error_of([&] { (void)dk::place(v, missing, dk::stream_ref{}); }), "place");
  check_missing(config_error_of([&] { (void)dk::place(v, missing, dk::memory_kind::pinned_host); }), "place");
  check_missing(config_error_of([&] { (void)dk::place(v, missing, dk::memory_kind::host); }), "place");
  check_missing(config_error_of([&] { (void)dk::replicate(v, {dk::device::cpu(), missing}); }), "replicate");
  check_missing(config_error_of([&] { (void)dk::shard(v, {missing, dk::device::cpu()}); }), "shard");
  const std::vector<std::vector<float>> batches(3, v);
  check_missing(config_error_of([&] { (void)dk::prefetch(batches, missing, 2); }), "prefetch");
  check_missing(config_error_of([&] { (void)dk::prefetch(batches, missing, 2, dk::stream_ref{}); }), "prefetch");
  check_missing(config_error_of([&] { (void)dk::zeros_like(v, missing); }), "zeros_like");
  check_missing(config_error_of([&] { (void)dk::zeros_like(v, missing, dk::stream_ref{}); }), "zeros_like");
  check_missing(config_error_of([&] { const dk::stream s(missing); }), "stream");
  check_missing(config_error_of([&] { dk::synchronize(missing); }), "synchronize");
  check_missing(config_error_of([&] { (void)dk::is_idle(missing); }), "is_idle");
  check_missing(config_error_of([&] { (void)dk::default_placement_resource(missing); }), "place");
  check_missing(config_error_of([&] { (void)dk::default_memory(missing); }), "default_memory");
  check_missing(config_error_of([&] { (void)dk::default_memory(missing, dk::memory_kind::pinned_host); }),
                "default_memory");
#if DEVICEKIT_HAS_CUDA
  // A stream_ref made for such a device (no runtime call checks it): the same error, not a
  // device_mismatch with the tree's device. Views of host memory stand in for leaves on cuda:0.
  const dk::stream_ref theirs(missing, nullptr);
  std::vector<float> memory(4, 0.f);
  auto on_gpu0 = dk::device_array<float>::view(memory.data(), memory.size(), dk::device::cuda(0));
  check_missing(config_error_of([&] { (void)dk::to_host(on_gpu0, theirs); }), "to_host");
  check_missing(config_error_of([&] { dk::copy(std::vector<float>(4, 1.f), on_gpu0, theirs); }), "copy");
  check_missing(config_error_of([&] { (void)dk::record_ready(on_gpu0, theirs); }), "record_ready");
  check_missing(config_error_of([&] { dk::wait_ready(theirs, reinterpret_cast<cudaEvent_t>(&memory)); }), "wait_ready");
  CHECK(memory == std::vector<float>(4, 0.f));  // nothing was written
#endif
  // Peer access names the pair.
  check_missing(config_error_of([&] { (void)dk::can_access_peer(missing, missing); }),
                "can_access_peer(cuda:4096, cuda:4096)");
}

// Why the runtime lists no GPU decides what the error says: CUDA_VISIBLE_DEVICES is named only
// where it can be the cause (without a driver the runtime never reads it).
TEST_CASE("with no CUDA device the error gives the runtime's reason, and hints only what can help",
          "[core][missing_device]") {
  const std::string no_driver = dk::detail::explain_zero_cuda_devices("cudaErrorInsufficientDriver", std::nullopt);
  CHECK_THAT(no_driver, Catch::StartsWith("cudaGetDeviceCount returned cudaErrorInsufficientDriver: there is no NVIDIA "
                                          "driver, or it is older than this CUDA runtime") &&
                            Catch::Contains("install or update the driver") &&
                            !Catch::Contains("CUDA_VISIBLE_DEVICES"));
  CHECK(dk::detail::explain_zero_cuda_devices("cudaErrorInsufficientDriver", std::string("0")) == no_driver);

  const std::string hidden = dk::detail::explain_zero_cuda_devices("cudaErrorNoDevice", std::string(""));
  CHECK_THAT(hidden, Catch::StartsWith("cudaGetDeviceCount returned cudaErrorNoDevice with CUDA_VISIBLE_DEVICES=''") &&
                         Catch::Contains("make CUDA_VISIBLE_DEVICES name GPUs the machine has"));
  const std::string none = dk::detail::explain_zero_cuda_devices("cudaErrorNoDevice", std::nullopt);
  CHECK_THAT(none, Catch::Contains("the machine has no CUDA-capable GPU") && !Catch::Contains("CUDA_VISIBLE_DEVICES"));

#if DEVICEKIT_HAS_CUDA
  // This process: a machine without a driver (or a GPU machine, which sees cuda:0).
  const auto caps = dk::cuda_detector{}.detect(dk::settings{});
  if (caps.fallback_reason.find("cudaErrorInsufficientDriver") != std::string::npos) {
    const std::string what = config_error_of([] { (void)dk::place(std::vector<float>(4), dk::device::cuda(0)); });
    CHECK_THAT(what, Catch::StartsWith("place: cuda:0 does not exist: this process sees 0 CUDA devices, as "
                                       "cudaGetDeviceCount returned cudaErrorInsufficientDriver") &&
                         !Catch::Contains("CUDA_VISIBLE_DEVICES"));
  }
#endif
}

TEST_CASE("a manager gives the same error for a device the process does not have", "[manager][missing_device]") {
  dk::device_manager<dk::cpu_detector> dm{dk::settings::without_environment()};
  const std::vector<float> v(16, 1.f);
  const auto with_devices = [](const std::string& what) {
    CHECK_THAT(what, Catch::Contains("; it is not one of this manager's devices either (cpu:0)"));
  };
  for (const auto& [what, operation] : std::vector<std::pair<std::string, std::string>>{
           {config_error_of([&] { (void)dm.place(v, missing); }), "place"},
           {config_error_of([&] { (void)dm.place(v, missing, dk::memory_kind::pinned_host); }), "place"},
           {config_error_of([&] { (void)dm.memory(missing); }), "memory"},
           {config_error_of([&] { (void)dm.memory(missing, dk::memory_kind::pinned_host); }), "memory"},
           {config_error_of([&] { (void)dm.memory_stats(missing); }), "memory_stats"},
           {config_error_of([&] { (void)dm.memory_stats(missing, dk::memory_kind::device); }), "memory_stats"},
           {config_error_of([&] { (void)dm.live_buffers(missing); }), "live_buffers"},
           {config_error_of([&] { (void)dm.budget(missing); }), "budget"},
           {config_error_of([&] { (void)dm.properties(missing); }), "properties"},
           {config_error_of([&] { (void)dk::memory_kinds(dm, missing); }), "memory_kinds"},
       }) {
    check_missing(what, operation);
    with_devices(what);
  }
  // Placement without a device under a scope of such a device.
  {
    const dk::default_device_scope scope(missing);
    const std::string what = config_error_of([&] { (void)dm.place(v); });
    check_missing(what, "place");
    with_devices(what);
    CHECK_THAT(what, Catch::EndsWith("; the default_device_scope asks for it"));
    check_missing(config_error_of([&] { (void)dm.prefetch(std::vector<std::vector<float>>(2, v)); }), "prefetch");
  }
  // The global manager's free functions: the same error (its devices are this machine's).
  check_missing(config_error_of([] { (void)dk::memory_stats(missing); }), "memory_stats");
  check_missing(config_error_of([] { (void)dk::live_buffers(missing); }), "live_buffers");
  // A device the manager has is not refused for existing: the host.
  CHECK_NOTHROW(dm.memory_stats(dk::device::cpu()));
}
