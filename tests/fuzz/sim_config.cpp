// The simulator's configuration, DEVICEKIT_SIM_* (sim/README.md, "Configuration";
// docs/environment.md, "Simulated GPUs"), through parse_configuration, the pure function the
// simulator applies at its first call. The input is lines NAME=VALUE (sim_config.dict gives
// libFuzzer the names); a variable not named is unset, and a name given twice keeps its last
// value. The parser either returns a configuration inside the documented ranges or throws
// std::invalid_argument whose message names a variable that was set: the simulator then exits
// with status 2 and that message. Anything else (another exception, a crash, undefined
// behaviour, a leak) is a finding.
#include "fuzz_check.hpp"

#include "api_names.hpp"
#include "config_parse.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

namespace sim = devicekit::cuda_sim::detail;

std::map<std::string, std::string> variables_of(std::string_view text) {
  std::map<std::string, std::string> vars;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    vars[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return vars;
}

/// What the documentation promises of a configuration the parser accepted.
void check_ranges(const sim::configuration& c, const std::map<std::string, std::string>& vars) {
  const std::size_t n = c.devices.size();
  fuzz::check(n <= static_cast<std::size_t>(sim::max_devices), "more than 64 simulated devices accepted");
  fuzz::check(c.peer_possible.size() == n, "the peer table is not one row per device");
  for (const auto& row : c.peer_possible) fuzz::check(row.size() == n, "a peer row is not one entry per device");
  for (std::size_t i = 0; i < n; ++i) {
    const sim::device_spec& d = c.devices[i];
    fuzz::check(d.total_memory >= (std::uint64_t{1} << 20), "a device of less than 1 MiB accepted");
    fuzz::check(d.total_memory <= (std::uint64_t{1} << 50), "a device of more than 1 PiB accepted");
    fuzz::check(d.cc_major >= 1 && d.cc_major <= 99 && d.cc_minor >= 0 && d.cc_minor <= 9,
                "a compute capability outside 1.0-99.9 accepted");
    fuzz::check(d.sms >= 1 && d.sms <= 1024, "an SM count outside 1-1024 accepted");
    fuzz::check(d.pci_bus >= 0 && d.pci_bus <= 255, "a PCI bus outside 0-255 accepted");
    fuzz::check(!d.name.empty() && d.name.size() <= 255, "a device name of 0 or more than 255 characters accepted");
    for (std::size_t j = 0; j < i; ++j) {
      fuzz::check(c.devices[j].pci_bus != d.pci_bus, "two devices on one PCI bus accepted");
      fuzz::check(c.devices[j].uuid != d.uuid, "two devices with one UUID accepted");
    }
  }
  fuzz::check(c.max_delay_us <= 1'000'000, "a delay above 1 s accepted");
  fuzz::check(c.nccl_timeout.count() >= 1 && c.nccl_timeout.count() <= 86'400'000,
              "an NCCL timeout outside 0.001-86400 s accepted");
  for (const auto& [api, calls] : c.failures) {
    fuzz::check(sim::is_counted_api(api), "a failure injected into a function the simulator does not count", api);
    for (const auto& [nth, code] : calls) {
      fuzz::check(nth >= 1, "a failure of call number 0 or below accepted", api);
      fuzz::check(static_cast<int>(code) >= 1 && static_cast<int>(code) <= 999, "an error code outside 1-999 accepted");
    }
  }
  for (const auto& [device, fault] : c.nccl_faults) {
    fuzz::check(device >= 0 && static_cast<std::size_t>(device) < n, "an NCCL fault on a device that does not exist");
    fuzz::check(fault.remaining >= 0, "an NCCL fault after a negative number of operations");
    fuzz::check(fault.error >= 0 && fault.error <= 6, "an NCCL fault with an error outside 1-6 accepted");
  }
  // A variable that was set but empty counts as unset: the defaults must then hold.
  if (const auto it = vars.find("DEVICEKIT_SIM_GPUS"); it == vars.end() || it->second.empty()) {
    fuzz::check(n == 1, "one device by default");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto vars = variables_of(fuzz::text_of(data, size));
  const auto lookup = [&vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  try {
    check_ranges(sim::parse_configuration(lookup), vars);
  } catch (const std::invalid_argument& e) {
    const std::string_view message = e.what();
    bool names_one = false;
    for (const auto& [name, value] : vars) {
      if (name.starts_with("DEVICEKIT_SIM_") && message.find(name) != std::string_view::npos) names_one = true;
    }
    fuzz::check(names_one, "the refusal names no DEVICEKIT_SIM_ variable that was set", message);
  }
  return 0;
}
