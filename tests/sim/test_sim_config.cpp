// The simulator's configuration (DEVICEKIT_SIM_*, sim/README.md "Configuration"): the parser on
// good values, on bad ones (each refused with a message naming the variable, its value and what
// it accepts) and on random text (only std::invalid_argument escapes). What a process does with a
// bad value (exit status 2, promptly) is tested by running it: sim/expect_bad_config.cmake.
#include <catch2/catch.hpp>

#include <devicekit/cuda_sim/control.hpp>

#include "api_names.hpp"
#include "config_parse.hpp"

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

using devicekit::cuda_sim::detail::configuration;
using devicekit::cuda_sim::detail::parse_configuration;

/// The configuration of an environment that holds exactly `vars`.
configuration parse(const std::map<std::string, std::string>& vars) {
  return parse_configuration([&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

/// The message parse() refuses `vars` with ("" when it accepts them).
std::string refusal(const std::map<std::string, std::string>& vars) {
  try {
    (void)parse(vars);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("config: an empty environment gives the documented defaults", "[sim][config]") {
  const configuration c = parse({});
  REQUIRE(c.devices.size() == 1);
  CHECK(c.devices[0].name == "NVIDIA H100 80GB HBM3");
  CHECK(c.devices[0].total_memory == 85'017'755'648ull);
  CHECK(c.devices[0].cc_major == 9);
  CHECK(c.devices[0].cc_minor == 0);
  CHECK(c.devices[0].sms == 132);
  CHECK(c.devices[0].pci_bus == 0x10);
  CHECK(c.devices[0].uuid.starts_with("GPU-"));
  CHECK(c.devices[0].uuid.size() == 40);
  CHECK(c.peer_possible == std::vector<std::vector<bool>>{{true}});
  CHECK(c.seed == 1);
  CHECK(c.max_delay_us == 200);
  CHECK(c.racecheck);
  CHECK(c.failures.empty());
  CHECK(c.nccl_faults.empty());
  CHECK(c.nccl_timeout == std::chrono::seconds(60));
  // An empty value is an unset variable.
  CHECK(parse({{"DEVICEKIT_SIM_GPUS", ""}, {"DEVICEKIT_SIM_SEED", ""}}).devices.size() == 1);
}

TEST_CASE("config: every variable takes its documented values", "[sim][config]") {
  const configuration c = parse({
      {"DEVICEKIT_SIM_GPUS", "3"},
      {"DEVICEKIT_SIM_GPU1",
       "name=Test GPU,memory=40GiB,cc=8.6,sms=108,pci_bus=0x3b,"
       "uuid=GPU-0123abcd-4567-89ef-0123-456789ABCDEF"},
      {"DEVICEKIT_SIM_GPU2", "memory=2147483648"},
      {"DEVICEKIT_SIM_GPU3", "ignored: there are three devices"},
      {"DEVICEKIT_SIM_PEER", "0>1,2>0"},
      {"DEVICEKIT_SIM_SEED", "18446744073709551615"},
      {"DEVICEKIT_SIM_MAX_DELAY_US", "0"},
      {"DEVICEKIT_SIM_RACECHECK", "0"},
      {"DEVICEKIT_SIM_FAIL", "cudaMalloc:2:2,ncclAllReduce:1:4"},
      {"DEVICEKIT_SIM_NCCL_FAULT", "0:1:hang,1:0:error,2:5:6"},
      {"DEVICEKIT_SIM_NCCL_TIMEOUT_S", "2.5"},
  });
  REQUIRE(c.devices.size() == 3);
  const auto& d = c.devices[1];
  CHECK(d.name == "Test GPU");
  CHECK(d.total_memory == 40ull << 30);
  CHECK(d.cc_major == 8);
  CHECK(d.cc_minor == 6);
  CHECK(d.sms == 108);
  CHECK(d.pci_bus == 0x3b);
  CHECK(d.uuid == "GPU-0123abcd-4567-89ef-0123-456789abcdef");
  CHECK(d.uuid_bytes[0] == 0x01);
  CHECK(d.uuid_bytes[15] == 0xef);
  CHECK(c.devices[0].pci_bus == 0x10);  // the others keep their defaults
  CHECK(c.devices[2].pci_bus == 0x12);
  CHECK(c.devices[2].total_memory == 2ull << 30);
  CHECK(c.devices[0].uuid != c.devices[2].uuid);
  CHECK(c.peer_possible ==
        std::vector<std::vector<bool>>{{false, true, false}, {false, false, false}, {true, false, false}});
  CHECK(parse({{"DEVICEKIT_SIM_GPUS", "2"}, {"DEVICEKIT_SIM_PEER", "none"}}).peer_possible ==
        std::vector<std::vector<bool>>{{false, false}, {false, false}});
  CHECK(c.seed == UINT64_MAX);
  CHECK(c.max_delay_us == 0);
  CHECK_FALSE(c.racecheck);
  CHECK(c.failures.at("cudaMalloc").at(2) == cudaErrorMemoryAllocation);
  CHECK(static_cast<int>(c.failures.at("ncclAllReduce").at(1)) == 4);
  CHECK(c.nccl_faults.at(0).remaining == 1);
  CHECK(c.nccl_faults.at(0).error == 0);  // a hang
  CHECK(c.nccl_faults.at(1).error == 2);  // ncclSystemError
  CHECK(c.nccl_faults.at(2).remaining == 5);
  CHECK(c.nccl_faults.at(2).error == 6);
  CHECK(c.nccl_timeout == std::chrono::milliseconds(2500));
  CHECK(parse({{"DEVICEKIT_SIM_GPUS", "0"}}).devices.empty());
  CHECK(parse({{"DEVICEKIT_SIM_GPUS", "64"}}).devices.size() == 64);
  CHECK(parse({{"DEVICEKIT_SIM_GPU0", "memory=1048576GiB"}}).devices[0].total_memory == 1ull << 50);
  CHECK(parse({{"DEVICEKIT_SIM_GPU0", "memory=1048576KiB"}}).devices[0].total_memory == 1ull << 30);
  CHECK(parse({{"DEVICEKIT_SIM_GPU0", "memory=256MiB"}}).devices[0].total_memory == 256ull << 20);
  CHECK(parse({{"DEVICEKIT_SIM_GPU0", "memory=1MiB"}}).devices[0].total_memory == 1ull << 20);
  CHECK(parse({{"DEVICEKIT_SIM_GPU0", "pci_bus=200"}}).devices[0].pci_bus == 200);
  CHECK(parse({{"DEVICEKIT_SIM_NCCL_TIMEOUT_S", "0.001"}}).nccl_timeout == std::chrono::milliseconds(1));
}

TEST_CASE("config: DEVICEKIT_SIM_FAIL takes every name the simulator counts calls under", "[sim][config]") {
  std::string all;
  for (std::string_view api : devicekit::cuda_sim::detail::counted_apis) {
    all += (all.empty() ? "" : ",") + std::string(api) + ":3:2";
  }
  const configuration c = parse({{"DEVICEKIT_SIM_FAIL", all}});
  CHECK(c.failures.size() == std::size(devicekit::cuda_sim::detail::counted_apis));
  CHECK(c.failures.at("cuStreamIsCapturing").at(3) == cudaErrorMemoryAllocation);
  CHECK(c.failures.at("ncclSend").at(3) == cudaErrorMemoryAllocation);
}

TEST_CASE("config: a bad value is refused with the variable, the value and what it accepts", "[sim][config]") {
  struct bad_case {
    std::map<std::string, std::string> vars;
    std::string message;  ///< the start of the refusal
  };
  const bad_case cases[] = {
      {{{"DEVICEKIT_SIM_GPUS", "abc"}}, "DEVICEKIT_SIM_GPUS='abc': 'abc' is not a whole number; accepted: "},
      {{{"DEVICEKIT_SIM_GPUS", "65"}}, "DEVICEKIT_SIM_GPUS='65': '65' is out of range; accepted: "},
      {{{"DEVICEKIT_SIM_GPUS", "-1"}}, "DEVICEKIT_SIM_GPUS='-1': '-1' is not a whole number"},
      {{{"DEVICEKIT_SIM_GPUS", "+2"}}, "DEVICEKIT_SIM_GPUS='+2'"},
      {{{"DEVICEKIT_SIM_GPUS", "2 "}}, "DEVICEKIT_SIM_GPUS='2 '"},
      {{{"DEVICEKIT_SIM_GPUS", "99999999999999999999999"}}, "DEVICEKIT_SIM_GPUS='99999999999999999999999': "},
      {{{"DEVICEKIT_SIM_GPU0", "memory=lots"}}, "DEVICEKIT_SIM_GPU0='memory=lots': memory: 'lots' is not"},
      {{{"DEVICEKIT_SIM_GPU0", "memory=99999999GiB"}}, "DEVICEKIT_SIM_GPU0='memory=99999999GiB': memory: "},
      {{{"DEVICEKIT_SIM_GPU0", "memory=99999999999999999999GiB"}}, "DEVICEKIT_SIM_GPU0='memory=9999"},
      {{{"DEVICEKIT_SIM_GPU0", "memory=18446744073709551615"}}, "DEVICEKIT_SIM_GPU0='memory=18446744073709551615'"},
      {{{"DEVICEKIT_SIM_GPU0", "memory=1.5GiB"}}, "DEVICEKIT_SIM_GPU0='memory=1.5GiB'"},
      {{{"DEVICEKIT_SIM_GPU0", "memory=80TiB"}}, "DEVICEKIT_SIM_GPU0='memory=80TiB'"},
      {{{"DEVICEKIT_SIM_GPU0", "memory=1023KiB"}}, "DEVICEKIT_SIM_GPU0='memory=1023KiB': memory: "},
      {{{"DEVICEKIT_SIM_GPU0", "memory=-1GiB"}}, "DEVICEKIT_SIM_GPU0='memory=-1GiB'"},
      {{{"DEVICEKIT_SIM_GPU0", "cc=9"}}, "DEVICEKIT_SIM_GPU0='cc=9': cc: '9' is not major.minor"},
      {{{"DEVICEKIT_SIM_GPU0", "cc=9.0.1"}}, "DEVICEKIT_SIM_GPU0='cc=9.0.1'"},
      {{{"DEVICEKIT_SIM_GPU0", "cc=9.x"}}, "DEVICEKIT_SIM_GPU0='cc=9.x'"},
      {{{"DEVICEKIT_SIM_GPU0", "sms=0"}}, "DEVICEKIT_SIM_GPU0='sms=0': sms: '0' is out of range"},
      {{{"DEVICEKIT_SIM_GPU0", "sms=2147483648"}}, "DEVICEKIT_SIM_GPU0='sms=2147483648'"},
      {{{"DEVICEKIT_SIM_GPU0", "pci_bus=0x100"}}, "DEVICEKIT_SIM_GPU0='pci_bus=0x100'"},
      {{{"DEVICEKIT_SIM_GPU0", "pci_bus=0x"}}, "DEVICEKIT_SIM_GPU0='pci_bus=0x'"},
      {{{"DEVICEKIT_SIM_GPU0", "uuid=GPU-1234"}}, "DEVICEKIT_SIM_GPU0='uuid=GPU-1234': uuid: "},
      {{{"DEVICEKIT_SIM_GPU0", "uuid=GPU-0123abcd-4567-89ef-0123-456789abcdeg"}}, "DEVICEKIT_SIM_GPU0='uuid="},
      {{{"DEVICEKIT_SIM_GPU0", "name="}}, "DEVICEKIT_SIM_GPU0='name=': name must have 1 to 255 characters"},
      {{{"DEVICEKIT_SIM_GPU0", "name=" + std::string(256, 'x')}}, "DEVICEKIT_SIM_GPU0='name=xxx"},
      {{{"DEVICEKIT_SIM_GPU0", "colour=green"}}, "DEVICEKIT_SIM_GPU0='colour=green': unknown key 'colour'"},
      {{{"DEVICEKIT_SIM_GPU0", "sms"}}, "DEVICEKIT_SIM_GPU0='sms': 'sms' is not key=value"},
      {{{"DEVICEKIT_SIM_GPU0", "sms=4,,cc=8.0"}}, "DEVICEKIT_SIM_GPU0='sms=4,,cc=8.0': an empty item"},
      {{{"DEVICEKIT_SIM_GPU0", "sms=4,"}}, "DEVICEKIT_SIM_GPU0='sms=4,': an empty item"},
      {{{"DEVICEKIT_SIM_GPUS", "2"}, {"DEVICEKIT_SIM_GPU1", "pci_bus=16"}},
       "DEVICEKIT_SIM_GPU1='pci_bus=16': its pci_bus is also device 0's"},
      {{{"DEVICEKIT_SIM_GPUS", "2"}, {"DEVICEKIT_SIM_GPU0", "pci_bus=0x11"}},
       "DEVICEKIT_SIM_GPU0='pci_bus=0x11': its pci_bus is also device 1's"},
      {{{"DEVICEKIT_SIM_GPUS", "2"},
        {"DEVICEKIT_SIM_GPU0", "uuid=GPU-00000000-0000-0000-0000-000000000000"},
        {"DEVICEKIT_SIM_GPU1", "uuid=GPU-00000000-0000-0000-0000-000000000000"}},
       "DEVICEKIT_SIM_GPU1='uuid=GPU-00000000-0000-0000-0000-000000000000': its uuid is also device 0's"},
      {{{"DEVICEKIT_SIM_PEER", "bogus"}}, "DEVICEKIT_SIM_PEER='bogus': 'bogus' is not i>j; accepted: "},
      {{{"DEVICEKIT_SIM_GPUS", "2"}, {"DEVICEKIT_SIM_PEER", "0>2"}}, "DEVICEKIT_SIM_PEER='0>2': in '0>2', '2' is"},
      {{{"DEVICEKIT_SIM_GPUS", "2"}, {"DEVICEKIT_SIM_PEER", "1>1"}}, "DEVICEKIT_SIM_PEER='1>1': '1>1' names one"},
      {{{"DEVICEKIT_SIM_GPUS", "2"}, {"DEVICEKIT_SIM_PEER", "0>1,"}}, "DEVICEKIT_SIM_PEER='0>1,': '' is not i>j"},
      {{{"DEVICEKIT_SIM_GPUS", "0"}, {"DEVICEKIT_SIM_PEER", "0>1"}}, "there is no device"},
      {{{"DEVICEKIT_SIM_PEER", "0>>1"}}, "DEVICEKIT_SIM_PEER='0>>1': '0>>1' is not i>j"},
      {{{"DEVICEKIT_SIM_FAIL", "nonsense"}}, "DEVICEKIT_SIM_FAIL='nonsense': 'nonsense' is not api:n:code"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaMalloc:1:2:3"}}, "DEVICEKIT_SIM_FAIL='cudaMalloc:1:2:3': "},
      {{{"DEVICEKIT_SIM_FAIL", "cuda Malloc:1:2"}}, "'cuda Malloc' is not a function name"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaMalloc:0:2"}}, "in 'cudaMalloc:0:2', '0' is out of range"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaMalloc:99999999999:2"}}, "'99999999999' is out of range"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaMalloc:1:abc"}}, "'abc' is not a whole number"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaMalloc:1:0"}}, "in 'cudaMalloc:1:0', '0' is out of range"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaMalloc:1:"}}, "in 'cudaMalloc:1:', an empty number"},
      // A name no entry point counts: a typo, another case, a function counted under the name of
      // the one it forwards to, the control API, something else (then only where the list is).
      {{{"DEVICEKIT_SIM_FAIL", "cudaMallc:1:2"}},
       "DEVICEKIT_SIM_FAIL='cudaMallc:1:2': in 'cudaMallc:1:2', 'cudaMallc' is not a function whose calls the "
       "simulator counts - did you mean cudaMalloc? (sim/README.md, \"Fault injection\", lists the functions"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaMalloc:1:2,ncclAllreduce:1:2"}},
       "in 'ncclAllreduce:1:2', 'ncclAllreduce' is not a function whose calls the simulator counts - did you mean "
       "ncclAllReduce?"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaEventCreate:1:2"}}, "did you mean cudaEventCreateWithFlags?"},
      {{{"DEVICEKIT_SIM_FAIL", "cudaMemset:1:2"}}, "did you mean cudaMemsetAsync?"},
      {{{"DEVICEKIT_SIM_FAIL", "device_count:1:2"}}, "'device_count' is not a function whose calls the simulator"},
      {{{"DEVICEKIT_SIM_FAIL", "frobnicate:1:2"}},
       "'frobnicate' is not a function whose calls the simulator counts (sim/README.md, \"Fault injection\""},
      {{{"DEVICEKIT_SIM_NCCL_FAULT", "0:1:sometimes"}}, "DEVICEKIT_SIM_NCCL_FAULT='0:1:sometimes': in '0:1:sometimes'"},
      {{{"DEVICEKIT_SIM_NCCL_FAULT", "1:1:hang"}}, "in '1:1:hang', '1' is out of range"},
      {{{"DEVICEKIT_SIM_NCCL_FAULT", "0:-1:hang"}}, "in '0:-1:hang', '-1' is not a whole number"},
      {{{"DEVICEKIT_SIM_NCCL_FAULT", "0:1:7"}}, "in '0:1:7', '7' is out of range"},
      {{{"DEVICEKIT_SIM_NCCL_FAULT", "0:1"}}, "'0:1' is not device:ops:error"},
      {{{"DEVICEKIT_SIM_GPUS", "0"}, {"DEVICEKIT_SIM_NCCL_FAULT", "0:1:hang"}}, "there is no device"},
      {{{"DEVICEKIT_SIM_SEED", "x"}}, "DEVICEKIT_SIM_SEED='x': 'x' is not a whole number; accepted: "},
      {{{"DEVICEKIT_SIM_SEED", "18446744073709551616"}}, "DEVICEKIT_SIM_SEED='18446744073709551616': "},
      {{{"DEVICEKIT_SIM_SEED", "-3"}}, "DEVICEKIT_SIM_SEED='-3'"},
      {{{"DEVICEKIT_SIM_MAX_DELAY_US", "4294967295"}}, "DEVICEKIT_SIM_MAX_DELAY_US='4294967295': '4294967295' is out"},
      {{{"DEVICEKIT_SIM_MAX_DELAY_US", "1ms"}}, "DEVICEKIT_SIM_MAX_DELAY_US='1ms'"},
      {{{"DEVICEKIT_SIM_RACECHECK", "yes"}}, "DEVICEKIT_SIM_RACECHECK='yes': neither 0 nor 1; accepted: 0 or 1"},
      {{{"DEVICEKIT_SIM_NCCL_TIMEOUT_S", "0"}}, "DEVICEKIT_SIM_NCCL_TIMEOUT_S='0': '0' is out of range"},
      {{{"DEVICEKIT_SIM_NCCL_TIMEOUT_S", "forever"}}, "DEVICEKIT_SIM_NCCL_TIMEOUT_S='forever'"},
      {{{"DEVICEKIT_SIM_NCCL_TIMEOUT_S", "1e3"}}, "DEVICEKIT_SIM_NCCL_TIMEOUT_S='1e3'"},
      {{{"DEVICEKIT_SIM_NCCL_TIMEOUT_S", "0.0001"}}, "needs 1 to 3 decimals"},
      {{{"DEVICEKIT_SIM_NCCL_TIMEOUT_S", "86401"}}, "DEVICEKIT_SIM_NCCL_TIMEOUT_S='86401'"},
      {{{"DEVICEKIT_SIM_NCCL_TIMEOUT_S", "-5"}}, "DEVICEKIT_SIM_NCCL_TIMEOUT_S='-5'"},
  };
  for (const bad_case& c : cases) {
    INFO(c.message);
    const std::string message = refusal(c.vars);
    CHECK_THAT(message, Catch::Contains(c.message));
    CHECK_THAT(message, Catch::Contains("; accepted: "));
  }
}

// What a fuzzer does, in small: random text in every variable (digits, separators and letters
// weighted so that most inputs get past the first check) is accepted or refused with
// std::invalid_argument, never anything else.
TEST_CASE("config: random values are accepted or refused, never anything else", "[sim][config]") {
  const char* const names[] = {"DEVICEKIT_SIM_GPUS",          "DEVICEKIT_SIM_GPU0",         "DEVICEKIT_SIM_GPU1",
                               "DEVICEKIT_SIM_PEER",          "DEVICEKIT_SIM_FAIL",         "DEVICEKIT_SIM_NCCL_FAULT",
                               "DEVICEKIT_SIM_SEED",          "DEVICEKIT_SIM_MAX_DELAY_US", "DEVICEKIT_SIM_RACECHECK",
                               "DEVICEKIT_SIM_NCCL_TIMEOUT_S"};
  const std::string alphabet = "0123456789999,,::>>..=-xX GiBKiMhangerormysc_pubuidGPU";
  std::mt19937 rng(20240917);
  std::size_t accepted = 0;
  std::size_t refused = 0;
  for (int round = 0; round < 4000; ++round) {
    std::map<std::string, std::string> vars;
    for (const char* name : names) {
      if (rng() % 3 != 0) continue;
      std::string v;
      const std::size_t n = rng() % 24;
      for (std::size_t i = 0; i < n; ++i) v += alphabet[rng() % alphabet.size()];
      vars[name] = v;
    }
    if (round % 4 == 0) vars["DEVICEKIT_SIM_GPUS"] = std::to_string(rng() % 5);
    try {
      (void)parse(vars);
      ++accepted;
    } catch (const std::invalid_argument&) {
      ++refused;
    }
  }
  CHECK(accepted > 0);
  CHECK(refused > 0);
}

// Run by sim.config.* (tests/CMakeLists.txt) in a process of its own with the environment under
// test: its first CUDA call reads the configuration. With a bad value the process must end with
// status 2 before this case returns.
TEST_CASE("config: the first CUDA call reads the environment", "[.][config_probe]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, count - 1) == cudaSuccess);
  int can_access = 0;
  if (count > 1) REQUIRE(cudaDeviceCanAccessPeer(&can_access, 0, 1) == cudaSuccess);
  std::printf("config probe: %d device(s); last: %s, %zu bytes, cc %d.%d, %d SMs, bus %d; 0 can access 1: %d\n", count,
              prop.name, prop.totalGlobalMem, prop.major, prop.minor, prop.multiProcessorCount, prop.pciBusID,
              can_access);
}
