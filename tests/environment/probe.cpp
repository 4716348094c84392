// devicekit_env_probe VARIABLE: reads one environment variable the way the library reads it, through
// the reader docs/environment.md names for it, and prints what it read:
//   value: <what was read>     exit 0
//   config_error: <message>    exit 1
//   error: <message>           exit 2 (any other exception: never documented for a variable)
// check_environment_table.py runs it once per value (a process each: some readers keep their
// first answer for the life of the process), and compares with the table.
#include <devicekit/core/device_list.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/detect/nvml.hpp>
#include <devicekit/detect/start_environment.hpp>
#include <devicekit/distribute/assignment.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/memory/trace.hpp>
#include <devicekit/transfer/detail/copy_workers.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <string>

namespace dk = devicekit;

namespace {

const char* const local_ranks[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MV2_COMM_WORLD_LOCAL_RANK",
                                   "LOCAL_RANK"};
const char* const world[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",     "PMI_SIZE", "MV2_COMM_WORLD_RANK",
    "MV2_COMM_WORLD_SIZE",  "SLURM_PROCID",         "SLURM_NTASKS", "RANK",     "WORLD_SIZE"};

std::string read(const std::string& variable) {
  const std::map<std::string, std::function<std::string()>> readers = {
      {"DEVICEKIT_PREFER", [] { return std::string(to_string(dk::settings::from_environment().get_prefer())); }},
      {"DEVICEKIT_DEVICE",
       [] {
         const auto s = dk::settings::from_environment();
         return s.has_device() ? s.get_device().str() : std::string("none");
       }},
      {"DEVICEKIT_PLATFORMS",
       [] {
         const auto s = dk::settings::from_environment();
         return s.has_platforms() ? dk::format_platform_list(s.get_platforms()) : std::string("none");
       }},
      {"DEVICEKIT_NVML_LIBRARY", [] { return dk::detail::nvml::library_path(dk::settings::from_environment()); }},
      {"DEVICEKIT_ALLOCATOR", [] { return std::string(to_string(dk::settings::from_environment().get_allocator())); }},
      {"DEVICEKIT_COLLECTIVE_MEMORY_SIZE",
       [] { return std::to_string(dk::settings::from_environment().get_collective_memory_size()); }},
      {"DEVICEKIT_COPY_THREADS", [] { return std::to_string(dk::host_copy_threads()); }},
      {"DEVICEKIT_MEMORY_DEBUG",
       [] { return std::string(dk::detail::memory_debug_from_environment() ? "on" : "off"); }},
      {"DEVICEKIT_TRACE",
       [] {
         // Read when the first pool is made; the probe removes the trace it made.
         dk::pool_config small;
         small.max_size = 1u << 20;
         { dk::memory_pool<dk::host_resource> pool{dk::host_resource{}, small}; }
         const std::string path = dk::memory_trace_path();
         dk::stop_memory_trace();
         if (!path.empty()) std::remove(path.c_str());
         return path.empty() ? std::string("none") : path;
       }},
      {"DEVICEKIT_TPU_BATCH_FACTOR",
       [] { return std::to_string(dk::hardware_table_config::from_environment().tpu_batch_factor); }},
      {"DEVICEKIT_ALLOW_TPU",
       [] { return std::string(dk::hardware_table_config::from_environment().allow_tpu ? "1" : "0"); }},
      {"CUDA_VISIBLE_DEVICES",
       [] {
         const std::string why = dk::detail::gpus_hidden_reason(dk::settings::from_environment());
         return why.empty() ? std::string("none") : why;
       }},
      {"CUDA_*",
       [] {
         // What the report compares later settings with: the CUDA_* variables when the runtime started.
         dk::detail::note_cuda_start_environment();
         const auto recorded = dk::detail::cuda_start_environment();
         std::string out;
         for (const auto& [name, value] : recorded.value()) {
           out += (out.empty() ? "" : " ") + name + "=" + value;
         }
         return out.empty() ? std::string("none") : out;
       }},
  };
  if (const auto it = readers.find(variable); it != readers.end()) return it->second();
  if (std::find(std::begin(local_ranks), std::end(local_ranks), variable) != std::end(local_ranks)) {
    const auto r = dk::local_rank_from_environment();
    return r ? std::to_string(r->rank) + " from " + r->source : std::string("none");
  }
  if (std::find(std::begin(world), std::end(world), variable) != std::end(world)) {
    const auto p = dk::process_context::from_environment();
    return std::to_string(p.process_index) + " of " + std::to_string(p.process_count);
  }
  std::cerr << "devicekit_env_probe: no reader for " << variable << "\n";
  std::exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: devicekit_env_probe VARIABLE\n";
    return 3;
  }
  try {
    const std::string value = read(argv[1]);
    std::cout << "value: " << value << "\n";
    return 0;
  } catch (const dk::config_error& e) {
    std::cout << "config_error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 2;
  }
}
