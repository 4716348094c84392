#pragma once
// The simulator's configuration (DEVICEKIT_SIM_*) as values, parsed without touching the state
// and without ending the process: configure() (config.cpp) applies it, and a bad value is an
// exception here that configure() turns into exit status 2. A fuzzer can call it on any input.
// Locking: none (a pure function of `lookup`).
#include "state.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace devicekit::cuda_sim::detail {

/// The most simulated devices (DEVICEKIT_SIM_GPUS).
inline constexpr int max_devices = 64;

/// What DEVICEKIT_SIM_* asks for (sim/README.md, "Configuration"); the defaults are those of an
/// unset environment.
struct configuration {
  std::vector<device_spec> devices = std::vector<device_spec>(1);  ///< GPUS and GPU<i>, with their bus ids and UUIDs
  std::vector<std::vector<bool>> peer_possible = {{true}};         ///< PEER: [i][j] = i can access j
  std::uint64_t seed = 1;                                          ///< SEED
  unsigned max_delay_us = 200;                                     ///< MAX_DELAY_US
  bool racecheck = true;                                           ///< RACECHECK
  std::map<std::string, std::map<int, cudaError_t>> failures;      ///< FAIL: api -> call number -> error
  std::map<int, nccl_fault> nccl_faults;                           ///< NCCL_FAULT: by device
  std::chrono::milliseconds nccl_timeout{60'000};                  ///< NCCL_TIMEOUT_S
};

/// What DEVICEKIT_SIM_* asks for; `lookup(name)` gives a variable's value, or nullopt when unset
/// (an empty value counts as unset). Throws std::invalid_argument whose what() is the message
/// (naming the variable, its value, and what it accepts) on any bad value; nothing else, short
/// of std::bad_alloc. What it allocates is bounded by the input's length and by max_devices.
configuration parse_configuration(const std::function<std::optional<std::string>(const std::string&)>& lookup);

}  // namespace devicekit::cuda_sim::detail
