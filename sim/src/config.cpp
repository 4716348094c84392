// The simulator's configuration, violations and injected failures, and its one global state.
// Locking: callers hold the state's mutex; the exit check takes it itself.
// The configuration (DEVICEKIT_SIM_*, config_parse.hpp) is read from the environment at the
// first call, and a bad value ends the process with status 2; a process that ends with more
// violations than it declared exits with status 86.
#include "config_parse.hpp"
#include "entry.hpp"
#include "scheduler.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace devicekit::cuda_sim::detail {

state& global() {
  static state* s = new state;  // never destroyed: workers and atexit handlers use it to the end
  return *s;
}

namespace {

std::optional<std::string> from_environment(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
}

/// Ends the process over a bad DEVICEKIT_SIM_* value, with status 2 (a usage error, as
/// devicekit-info's). The first call that reads the configuration holds the state's mutex, and
/// exit() would run the atexit handlers, among them check_violations_at_exit, which takes that
/// mutex: the process would never end. So what was printed is flushed, and the process ends
/// with std::_Exit, which runs no handler (the program never got past its first CUDA call).
[[noreturn]] void refuse_configuration(const char* what) {
  std::cout.flush();  // what the program printed comes first
  std::fflush(stdout);
  std::fprintf(stderr, "devicekit cuda_sim: bad configuration: %s\n", what);
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(2);
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

}  // namespace

void configure(state& g) {
  if (g.configured) return;
  g.configured = true;
  configuration c;
  try {
    c = parse_configuration(from_environment);
  } catch (const std::invalid_argument& e) {
    refuse_configuration(e.what());
  }
  const std::size_t n = c.devices.size();
  g.devices = std::move(c.devices);
  g.peer_possible = std::move(c.peer_possible);
  g.peer_enabled.assign(n, {});
  g.contexts.assign(n, 0);
  g.bytes_in_use.assign(n, 0);
  g.graph_bytes.assign(n, 0);
  g.graph_bytes_high.assign(n, 0);
  g.legacy.assign(n, nullptr);
  g.default_pool.assign(n, nullptr);
  g.seed = c.seed;
  g.max_delay_us = c.max_delay_us;
  g.racecheck = c.racecheck;
  g.failures = std::move(c.failures);
  g.nccl_faults = std::move(c.nccl_faults);
  g.nccl_timeout = c.nccl_timeout;
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
