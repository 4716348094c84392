// detect.cpu_fallback: how long constructing a manager takes in a fresh process on a machine with
// no usable GPU (the first construction pays the CUDA runtime's failed initialisation; later ones
// hit the cache). Each sample is a new process, so the figure is the cold cost a program pays.
// Baseline: a bare cudaGetDeviceCount in a fresh process (the least any detection can do).
//
// detect.attributes.vs_properties (GPU only): query_device_properties (with the CUDA 13 runtime one
// cudaGetDeviceProperties call and the peer queries) vs one cudaGetDeviceProperties call. The note
// gives the attribute-by-attribute reading (the path for older runtimes), query_clock_rates, and
// the slowest attribute reads, each timed alone.
// detect.manager.cold (GPU only): constructing a manager in a fresh process whose CUDA runtime is
// already initialised (cudaFree(0), not timed), vs the first cudaGetDeviceProperties in such a
// process: what detection itself costs a program, once. Goal <= 2 ms.
#include "bench_common.hpp"

#include <devicekit/devicekit.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

namespace dk = devicekit;

namespace {

// Child modes print one number: seconds spent, measured inside the fresh process.
int child(const std::string& mode) {
  const auto t0 = bench::clock::now();
  if (mode == "--child-manager") {
    dk::device_manager<> dm{dk::settings{}};
    if (dm.device_count() < 1) return 1;
#if DEVICEKIT_HAS_CUDA
  } else if (mode == "--child-manager-initialised" || mode == "--child-properties-initialised") {
    (void)cudaFree(nullptr);  // the runtime and the primary context, not timed
    const auto t1 = bench::clock::now();
    if (mode == "--child-manager-initialised") {
      dk::device_manager<> dm{dk::settings{}};
      if (dm.device_count() < 1) return 1;
    } else {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return 1;
    }
    std::printf("%.9f\n", bench::seconds_since(t1));
    return 0;
#endif
  } else {
#if DEVICEKIT_HAS_CUDA
    int n = 0;
    (void)cudaGetDeviceCount(&n);
#endif
  }
  std::printf("%.9f\n", bench::seconds_since(t0));
  return 0;
}

double run_child(const char* self, const char* mode) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl(self, self, mode, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  char buf[64] = {};
  const ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return std::atof(buf);
}

#if DEVICEKIT_HAS_CUDA
// Each attribute devicekit reads (detect/properties.ipp), timed alone on device 0 (median of
// `reps`): the three slowest, in microseconds, for the note.
std::string slowest_attributes(int reps) {
  struct read {
    const char* name;
    cudaDeviceAttr attr;
  };
  static constexpr read reads[] = {
      {"ComputeCapabilityMajor", cudaDevAttrComputeCapabilityMajor},
      {"ComputeCapabilityMinor", cudaDevAttrComputeCapabilityMinor},
      {"MultiProcessorCount", cudaDevAttrMultiProcessorCount},
      {"ClockRate", cudaDevAttrClockRate},
      {"MemoryClockRate", cudaDevAttrMemoryClockRate},
      {"GlobalMemoryBusWidth", cudaDevAttrGlobalMemoryBusWidth},
      {"L2CacheSize", cudaDevAttrL2CacheSize},
      {"AsyncEngineCount", cudaDevAttrAsyncEngineCount},
      {"EccEnabled", cudaDevAttrEccEnabled},
      {"MaxThreadsPerBlock", cudaDevAttrMaxThreadsPerBlock},
      {"WarpSize", cudaDevAttrWarpSize},
      {"Integrated", cudaDevAttrIntegrated},
      {"ManagedMemory", cudaDevAttrManagedMemory},
      {"ConcurrentManagedAccess", cudaDevAttrConcurrentManagedAccess},
      {"PciDomainId", cudaDevAttrPciDomainId},
      {"PciBusId", cudaDevAttrPciBusId},
      {"PciDeviceId", cudaDevAttrPciDeviceId},
  };
  std::vector<std::pair<double, std::string>> times;
  for (const read& r : reads) {
    const double t = bench::median_seconds(reps, [&] {
      int v = 0;
      (void)cudaDeviceGetAttribute(&v, r.attr, 0);
    });
    times.emplace_back(t * 1e6, r.name);
  }
  std::sort(times.begin(), times.end(), std::greater<>());
  std::string note = "slowest attribute reads:";
  for (std::size_t i = 0; i < 3 && i < times.size(); ++i) {
    char us[32];
    std::snprintf(us, sizeof us, " %.2f us", times[i].first);
    note.append(" ").append(times[i].second).append(us);
    if (i < 2) note.append(",");
  }
  return note;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]).rfind("--child-", 0) == 0) return child(argv[1]);
  const auto opt = bench::parse(argc, argv);
  bench::report report;
  const int samples = opt.quick ? 15 : 60;

  dk::device_manager<> probe{dk::settings{}};
  if (!probe.has_gpu()) {
    std::vector<double> ours;
    std::vector<double> base;
    for (int i = 0; i < samples; ++i) {
      ours.push_back(run_child(argv[0], "--child-manager"));
      base.push_back(run_child(argv[0], "--child-baseline"));
    }
    const double ms = bench::median(ours) * 1e3;
    const double base_ms = bench::median(base) * 1e3;
    const double warm_ms = bench::median_seconds(samples * 10, [] { dk::device_manager<> dm{dk::settings{}}; }) * 1e3;
    report.add({"detect.cpu_fallback", "cpu", "cold manager construction (median of fresh processes)", ms, "ms",
                "bare cudaGetDeviceCount in a fresh process", base_ms, base_ms / ms,
                "goal < 2 ms; warm (cached) construction " + std::to_string(warm_ms) + " ms"});
  }
#if DEVICEKIT_HAS_CUDA
  if (probe.has_gpu()) {
    const int reps = opt.quick ? 50 : 500;
    const int count = probe.gpu_count();
    const double attrs = bench::median_seconds(reps, [&] { (void)dk::query_device_properties(0, count); });
    const double props = bench::median_seconds(reps, [] {
      cudaDeviceProp p{};
      (void)cudaGetDeviceProperties(&p, 0);
    });
    const double by_attributes =
        bench::median_seconds(reps, [&] { (void)dk::detail::query_device_properties_by_attributes(0, count); });
    const double clocks = bench::median_seconds(reps, [] { (void)dk::query_clock_rates(dk::device::cuda(0)); });
    char paths[160];
    std::snprintf(paths, sizeof paths, "attribute by attribute %.2f us; query_clock_rates %.2f us; ",
                  by_attributes * 1e6, clocks * 1e6);
    report.add({"detect.attributes.vs_properties", "cuda", "time to read one device's properties", attrs * 1e6, "us",
                "cudaGetDeviceProperties", props * 1e6, props / attrs,
                paths + slowest_attributes(opt.quick ? 20 : 100)});
    std::vector<double> ours;
    std::vector<double> base;
    for (int i = 0; i < (opt.quick ? 5 : 15); ++i) {
      ours.push_back(run_child(argv[0], "--child-manager-initialised"));
      base.push_back(run_child(argv[0], "--child-properties-initialised"));
    }
    const double ms = bench::median(ours) * 1e3;
    const double base_ms = bench::median(base) * 1e3;
    report.add({"detect.manager.cold", "cuda", "manager construction in a fresh process, runtime initialised (median)",
                ms, "ms", "the first cudaGetDeviceProperties in such a process", base_ms, base_ms / ms,
                "goal <= 2 ms for the manager"});
  }
#endif
  report.write(opt.json_path);
  return 0;
}
