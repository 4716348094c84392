// The simulator's configuration, violations and injected failures, and its one global state.
// Locking: callers hold the state's mutex; the exit check takes it itself.
// The configuration (DEVICEKIT_SIM_*) is read from the environment at the first call; a process
// that ends with more violations than it declared exits with status 86.
#include "entry.hpp"
#include "scheduler.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace devicekit::cuda_sim::detail {

state& global() {
  static state* s = new state;  // never destroyed: workers and atexit handlers use it to the end
  return *s;
}

namespace {

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

/// The comma-separated items of `v` (as std::getline splits them).
std::vector<std::string> items_of(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream items(v);
  std::string item;
  while (std::getline(items, item, ',')) out.push_back(item);
  return out;
}

/// "x:y:z" as its three fields, split at the first and the last colon; false with fewer.
bool fields_of(const std::string& item, std::string (&f)[3]) {
  const auto a = item.find(':');
  const auto b = item.rfind(':');
  if (a == std::string::npos || a == b) return false;
  f[0] = item.substr(0, a);
  f[1] = item.substr(a + 1, b - a - 1);
  f[2] = item.substr(b + 1);
  return true;
}

[[noreturn]] void bad_config(const std::string& what) {
  std::fprintf(stderr, "devicekit cuda_sim: bad configuration: %s\n", what.c_str());
  std::exit(2);
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

/// DEVICEKIT_SIM_GPU<i>: the properties of device `i`, over the defaults.
void configure_device(device_spec& d, int i) {
  d.pci_bus = 0x10 + i;
  set_uuid(d, i);
  const std::string var = "DEVICEKIT_SIM_GPU" + std::to_string(i);
  const char* spec = env(var.c_str());
  if (spec == nullptr) return;
  for (const std::string& item : items_of(spec)) {
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

/// DEVICEKIT_SIM_PEER: which of the `n` devices can access which (all by default).
void configure_peers(state& g, int n) {
  g.peer_possible.assign(static_cast<std::size_t>(n), std::vector<bool>(static_cast<std::size_t>(n), true));
  if (const char* v = env("DEVICEKIT_SIM_PEER")) {
    const std::string p = v;
    if (p != "all") {
      for (auto& row : g.peer_possible) std::fill(row.begin(), row.end(), false);
      if (p != "none") {
        for (const std::string& pair : items_of(p)) {
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
}

/// DEVICEKIT_SIM_FAIL: the n-th call of an API fails with the given error.
void configure_failures(state& g) {
  if (const char* v = env("DEVICEKIT_SIM_FAIL")) {
    for (const std::string& item : items_of(v)) {
      std::string f[3];
      if (!fields_of(item, f)) bad_config("DEVICEKIT_SIM_FAIL: '" + item + "' is not api:n:code");
      g.failures[f[0]][std::stoi(f[1])] = static_cast<cudaError_t>(std::stoi(f[2]));
    }
  }
}

/// DEVICEKIT_SIM_NCCL_FAULT: NCCL faults injected on the `n` devices.
void configure_nccl_faults(state& g, int n) {
  if (const char* v = env("DEVICEKIT_SIM_NCCL_FAULT")) {
    for (const std::string& item : items_of(v)) {
      std::string field[3];
      int device = -1;
      nccl_fault f;
      try {
        if (!fields_of(item, field)) throw std::invalid_argument("fields");
        device = std::stoi(field[0]);
        f.remaining = std::stoi(field[1]);
        const std::string& what = field[2];
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
}

}  // namespace

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
  for (int i = 0; i < n; ++i) configure_device(g.devices[static_cast<std::size_t>(i)], i);
  configure_peers(g, n);
  g.peer_enabled.assign(static_cast<std::size_t>(n), {});
  g.contexts.assign(static_cast<std::size_t>(n), 0);
  g.bytes_in_use.assign(static_cast<std::size_t>(n), 0);
  g.graph_bytes.assign(static_cast<std::size_t>(n), 0);
  g.graph_bytes_high.assign(static_cast<std::size_t>(n), 0);
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
  configure_failures(g);
  configure_nccl_faults(g, n);
  // The runtime tears itself down at exit, after the destructors of objects made after its
  // initialisation: calls made later fail with cudaErrorCudartUnloading, as CUDA's do.
  std::atexit(teardown);
}

void violation(state& g, const char* api, const std::string& rule) {
  const std::string text = std::string(api) + ": " + rule;
  g.violations.push_back(text);
  std::fprintf(stderr, "devicekit cuda_sim VIOLATION in %s\n", text.c_str());
}

cudaError_t injected(state& g, const char* api) {
  const int n = ++g.calls[api];
  auto it = g.failures.find(api);
  if (it == g.failures.end()) return cudaSuccess;
  auto call = it->second.find(n);
  return call == it->second.end() ? cudaSuccess : call->second;
}

std::unique_lock<std::mutex> enter(state& g, bool& torn_down) {
  std::unique_lock lk(g.m);
  configure(g);
  torn_down = g.torn_down;
  return lk;
}

}  // namespace devicekit::cuda_sim::detail
