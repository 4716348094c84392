// Every environment variable the library reads, through the readers that read them:
// settings::from_environment (DEVICEKIT_PREFER, DEVICEKIT_DEVICE, DEVICEKIT_PLATFORMS,
// DEVICEKIT_NVML_LIBRARY, DEVICEKIT_ALLOCATOR, DEVICEKIT_COLLECTIVE_MEMORY_SIZE),
// hardware_table_config::from_environment (DEVICEKIT_TPU_BATCH_FACTOR, DEVICEKIT_ALLOW_TPU),
// DEVICEKIT_MEMORY_DEBUG (read when a pool is made), DEVICEKIT_COPY_THREADS (set_host_copy_threads(0)
// reads it again), local_rank_from_environment (the launchers' node-local ranks),
// process_context::from_environment (the launchers' world rank and size) and
// gpus_hidden_reason (CUDA_VISIBLE_DEVICES). docs/environment.md's table is the contract.
//
// The input is lines NAME=VALUE (a dictionary, environment.dict, gives libFuzzer the names):
// each known NAME is set to VALUE; every variable not named is unset. Each reader then returns
// what the table documents or throws config_error naming the variable; a reader accepts a set
// exactly when each of its variables holds a documented value.
#include "fuzz_check.hpp"

#include <devicekit/core/device_list.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/detectors.hpp>
#include <devicekit/detect/hardware.hpp>
#include <devicekit/distribute/assignment.hpp>
#include <devicekit/memory/pool_config.hpp>
#include <devicekit/transfer/detail/copy_workers.hpp>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

namespace dk = devicekit;

const std::vector<std::string> known = {"DEVICEKIT_PREFER",
                                        "DEVICEKIT_DEVICE",
                                        "DEVICEKIT_PLATFORMS",
                                        "DEVICEKIT_NVML_LIBRARY",
                                        "DEVICEKIT_ALLOCATOR",
                                        "DEVICEKIT_COLLECTIVE_MEMORY_SIZE",
                                        "DEVICEKIT_TPU_BATCH_FACTOR",
                                        "DEVICEKIT_ALLOW_TPU",
                                        "DEVICEKIT_MEMORY_DEBUG",
                                        "DEVICEKIT_COPY_THREADS",
                                        "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "SLURM_LOCALID",
                                        "MV2_COMM_WORLD_LOCAL_RANK",
                                        "LOCAL_RANK",
                                        "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_SIZE",
                                        "PMI_RANK",
                                        "PMI_SIZE",
                                        "MV2_COMM_WORLD_RANK",
                                        "MV2_COMM_WORLD_SIZE",
                                        "SLURM_PROCID",
                                        "SLURM_NTASKS",
                                        "RANK",
                                        "WORLD_SIZE",
                                        "CUDA_VISIBLE_DEVICES"};

/// A whole decimal number as std::from_chars reads an int: an optional '-', digits, no more.
std::optional<long long> integer(std::string_view t) {
  bool negative = false;
  if (!t.empty() && t.front() == '-') {
    negative = true;
    t.remove_prefix(1);
  }
  if (t.empty()) return std::nullopt;
  long long n = 0;
  for (const char c : t) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
    if (n > static_cast<long long>(INT_MAX) + 1) return std::nullopt;
  }
  n = negative ? -n : n;
  if (n > INT_MAX || n < INT_MIN) return std::nullopt;
  return n;
}

std::optional<int> non_negative(std::string_view t) {
  const auto n = integer(t);
  if (!n || *n < 0) return std::nullopt;
  return static_cast<int>(*n);
}

struct environment {
  std::map<std::string, std::string> set;
  [[nodiscard]] const std::string* get(const std::string& name) const {
    const auto it = set.find(name);
    return it == set.end() ? nullptr : &it->second;
  }
  /// Set and not empty: most readers treat an empty value as unset.
  [[nodiscard]] const std::string* given(const std::string& name) const {
    const std::string* v = get(name);
    return v && !v->empty() ? v : nullptr;
  }
};

environment apply(std::string_view input) {
  for (const auto& name : known) ::unsetenv(name.c_str());
  environment env;
  while (!input.empty()) {
    const auto end = std::min(input.find('\n'), input.size());
    const std::string_view line = input.substr(0, end);
    input.remove_prefix(std::min(end + 1, input.size()));
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string name(line.substr(0, eq));
    std::string value(line.substr(eq + 1));
    value = value.substr(0, value.find('\0'));  // what setenv can hold
    if (std::find(known.begin(), known.end(), name) == known.end()) continue;
    ::setenv(name.c_str(), value.c_str(), 1);
    env.set[name] = value;
  }
  return env;
}

/// Which variable the config_error must name, or "" when the reader must accept.
template <class Read>
void expect(Read&& read, const std::string& bad, const char* reader) {
  if (bad.empty()) {
    try {
      read();
    } catch (const dk::config_error& e) {
      fuzz::fail(reader, std::string("refused documented values: ") + e.what());
    }
    return;
  }
  const bool accepted = fuzz::value_or_config_error([&] { return (read(), true); }, bad).has_value();
  fuzz::check(!accepted, reader, "accepted an undocumented value of " + bad);
}

void settings_reader(const environment& env) {
  std::string bad;
  std::optional<dk::device_preference> prefer;
  if (const std::string* v = env.get("DEVICEKIT_PREFER")) {
    if (*v == "auto" || v->empty())
      prefer = dk::device_preference::automatic;
    else if (*v == "cuda" || *v == "gpu")
      prefer = dk::device_preference::cuda;
    else if (*v == "cpu")
      prefer = dk::device_preference::cpu;
    else if (bad.empty())
      bad = "DEVICEKIT_PREFER";
  }
  std::optional<dk::device> device;
  if (const std::string* v = env.given("DEVICEKIT_DEVICE")) {
    const auto colon = v->find(':');
    const std::string kind = v->substr(0, colon);
    const auto n = colon == std::string::npos ? std::optional<int>(0) : non_negative(v->substr(colon + 1));
    if ((kind == "cpu" || kind == "cuda" || kind == "gpu") && n) {
      device = dk::device(kind == "cpu" ? dk::device_kind::cpu : dk::device_kind::cuda, *n);
    } else if (bad.empty()) {
      bad = "DEVICEKIT_DEVICE";
    }
  }
  // The allocator and the size are read before the platforms (settings.ipp's order), so a bad
  // allocator is reported first; the byte size and platform grammars are fuzzed on their own
  // (byte_size.cpp, platform_list.cpp), so here they are judged by their own parser.
  if (const std::string* v = env.given("DEVICEKIT_ALLOCATOR")) {
    const bool ok =
        *v == "pool" || *v == "bfc" || *v == "default" || *v == "async" || *v == "cuda_async" || *v == "platform";
    if (!ok && bad.empty()) bad = "DEVICEKIT_ALLOCATOR";
  }
  std::optional<std::uint64_t> reserve;
  if (const std::string* v = env.given("DEVICEKIT_COLLECTIVE_MEMORY_SIZE")) {
    reserve = fuzz::value_or_config_error([&] { return dk::parse_byte_size(*v, "x"); });
    if (!reserve && bad.empty()) bad = "DEVICEKIT_COLLECTIVE_MEMORY_SIZE";
  }
  if (const std::string* v = env.get("DEVICEKIT_PLATFORMS")) {
    if (!fuzz::value_or_config_error([&] { return dk::parse_platform_list(*v); }) && bad.empty()) {
      bad = "DEVICEKIT_PLATFORMS";
    }
  }
  expect([] { (void)dk::settings::from_environment(); }, bad, "settings::from_environment");
  if (!bad.empty()) return;
  const dk::settings s = dk::settings::from_environment();
  fuzz::check(s.has_prefer() == prefer.has_value() && (!prefer || s.get_prefer() == *prefer),
              "DEVICEKIT_PREFER read as another preference");
  fuzz::check(s.has_device() == device.has_value() && (!device || s.get_device() == *device),
              "DEVICEKIT_DEVICE read as another device");
  fuzz::check(s.get_collective_memory_size() == reserve.value_or(0), "DEVICEKIT_COLLECTIVE_MEMORY_SIZE read wrong");
  const std::string* lib = env.given("DEVICEKIT_NVML_LIBRARY");
  fuzz::check(s.has_nvml_library() == (lib != nullptr) && (!lib || s.get_nvml_library() == *lib),
              "DEVICEKIT_NVML_LIBRARY read wrong");
}

void hardware_reader(const environment& env) {
  std::string bad;
  int factor = 128;
  if (const std::string* v = env.given("DEVICEKIT_TPU_BATCH_FACTOR")) {
    const auto n = integer(*v);
    if (n && *n >= 1)
      factor = static_cast<int>(*n);
    else
      bad = "DEVICEKIT_TPU_BATCH_FACTOR";
  }
  bool allow = true;
  if (const std::string* v = env.given("DEVICEKIT_ALLOW_TPU")) {
    if (*v == "1" || *v == "true")
      allow = true;
    else if (*v == "0" || *v == "false")
      allow = false;
    else if (bad.empty())
      bad = "DEVICEKIT_ALLOW_TPU";
  }
  expect([] { (void)dk::hardware_table_config::from_environment(); }, bad, "hardware_table_config::from_environment");
  if (!bad.empty()) return;
  const auto c = dk::hardware_table_config::from_environment();
  fuzz::check(c.tpu_batch_factor == factor && c.allow_tpu == allow, "the TPU variables were read wrong");
}

void memory_debug_reader(const environment& env) {
  const std::string* v = env.get("DEVICEKIT_MEMORY_DEBUG");
  std::optional<bool> want = false;
  if (v) {
    const std::string& s = *v;
    if (s.empty() || s == "0" || s == "off" || s == "false" || s == "no")
      want = false;
    else if (s == "1" || s == "on" || s == "true" || s == "yes")
      want = true;
    else
      want.reset();
  }
  expect([] { (void)dk::detail::memory_debug_from_environment(); }, want ? "" : "DEVICEKIT_MEMORY_DEBUG",
         "memory_debug_from_environment");
  if (want) fuzz::check(dk::detail::memory_debug_from_environment() == *want, "DEVICEKIT_MEMORY_DEBUG read wrong");
}

void copy_threads_reader(const environment& env) {
  const std::string* v = env.given("DEVICEKIT_COPY_THREADS");
  std::optional<std::size_t> want;
  bool ok = true;
  if (v) {
    const auto n = integer(*v);
    ok = n && *n >= 1 && *n <= static_cast<long long>(dk::detail::max_host_copy_threads);
    if (ok) want = static_cast<std::size_t>(*n);
  }
  expect([] { dk::set_host_copy_threads(0); }, ok ? "" : "DEVICEKIT_COPY_THREADS", "set_host_copy_threads(0)");
  if (!ok) return;
  const std::size_t got = dk::host_copy_threads();
  if (want) {
    fuzz::check(got == *want, "DEVICEKIT_COPY_THREADS read wrong", *v);
  } else {
    fuzz::check(got >= 1 && got <= 8, "the default copy threads lie outside [1, 8]");
  }
}

void local_rank_reader(const environment& env) {
  std::string bad;
  std::optional<dk::local_rank_info> want;
  for (const auto name : dk::local_rank_variables) {
    const std::string* v = env.given(std::string(name));
    if (!v) continue;
    const auto n = non_negative(*v);
    if (n)
      want = dk::local_rank_info{*n, std::string(name)};
    else
      bad = name;
    break;
  }
  expect([] { (void)dk::local_rank_from_environment(); }, bad, "local_rank_from_environment");
  if (!bad.empty()) return;
  const auto got = dk::local_rank_from_environment();
  fuzz::check(got.has_value() == want.has_value() && (!got || (got->rank == want->rank && got->source == want->source)),
              "the node-local rank was read wrong");
}

void process_reader(const environment& env) {
  static const std::pair<const char*, const char*> pairs[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                                              {"PMI_RANK", "PMI_SIZE"},
                                                              {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"},
                                                              {"SLURM_PROCID", "SLURM_NTASKS"},
                                                              {"RANK", "WORLD_SIZE"}};
  std::string bad;
  int index = 0;
  int count = 1;
  for (const auto& [rank_var, size_var] : pairs) {
    const std::string* r = env.get(rank_var);
    const std::string* n = env.get(size_var);
    if (!r || !n) continue;
    const auto ri = non_negative(*r);
    const auto ni = non_negative(*n);
    if (!ri)
      bad = rank_var;
    else if (!ni)
      bad = size_var;
    else if (*ni < 1 || *ri >= *ni)
      bad = std::string(rank_var) + "/" + size_var;
    else
      index = *ri, count = *ni;
    break;
  }
  expect([] { (void)dk::process_context::from_environment(); }, bad, "process_context::from_environment");
  if (!bad.empty()) return;
  const auto p = dk::process_context::from_environment();
  fuzz::check(p.process_index == index && p.process_count == count, "the process rank or count was read wrong");
}

void visible_devices_reader(const environment& env) {
  // Never an error: an empty (or blank) value hides every GPU, and says so. (The settings come
  // from the environment, whose other variables may be bad, or ask for the CPU, which is a reason
  // of its own.)
  const auto s = fuzz::value_or_config_error([] { return dk::settings::from_environment(); });
  if (!s || s->get_prefer() == dk::device_preference::cpu) return;
  const std::string reason = dk::detail::gpus_hidden_reason(*s);
  const std::string* v = env.get("CUDA_VISIBLE_DEVICES");
  const bool hidden = v && v->find_first_not_of(" \t") == std::string::npos;
  fuzz::check(reason.empty() != hidden, "CUDA_VISIBLE_DEVICES: the reason does not match the value");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const environment env = apply(fuzz::text_of(data, size));
  settings_reader(env);
  hardware_reader(env);
  memory_debug_reader(env);
  copy_threads_reader(env);
  local_rank_reader(env);
  process_reader(env);
  visible_devices_reader(env);
  return 0;
}
