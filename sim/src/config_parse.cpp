// DEVICEKIT_SIM_* parsed into a configuration (config_parse.hpp). Every value is read exactly:
// a number is decimal digits and nothing else, within a stated range, and every item of a list
// is checked, so that a typo is refused with what the variable accepts rather than read as
// something else (std::stoi would read "12abc" as 12, std::strtoull "x" as 0).
// Locking: none.
#include "config_parse.hpp"

#include "api_names.hpp"

#include <charconv>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace devicekit::cuda_sim::detail {

namespace {

using lookup_fn = std::function<std::optional<std::string>(const std::string&)>;

constexpr const char* gpus_accepted = "a whole number of simulated devices, 0 to 64 (default 1)";
constexpr const char* device_accepted =
    "comma-separated key=value items: name=<1 to 255 characters>, memory=<bytes, or a whole number with "
    "KiB, MiB or GiB; 1MiB to 1048576GiB>, cc=<major.minor, 1.0 to 99.9>, sms=<1 to 1024>, pci_bus=<0 to 255, "
    "or 0x0 to 0xff>, uuid=<GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx in hex digits>; no two devices with one "
    "pci_bus or uuid";
constexpr const char* peer_accepted =
    "all (default), none, or comma-separated pairs i>j (device i can access device j), i and j two different "
    "devices below DEVICEKIT_SIM_GPUS";
constexpr const char* fail_accepted =
    "comma-separated api:n:code items: the n-th call (1 to 2147483647) of the function `api` (one whose calls the "
    "simulator counts) fails with error number `code` (1 to 999: a cudaError_t, an ncclResult_t for nccl* "
    "functions)";
constexpr const char* nccl_fault_accepted =
    "comma-separated device:ops:error items: NCCL on `device` (below DEVICEKIT_SIM_GPUS) completes `ops` "
    "operations (0 to 2147483647), then the next fails with `error` (an ncclResult_t error, 1 to 6, or the word "
    "error for ncclSystemError) or never completes (the word hang)";
constexpr const char* seed_accepted = "a whole number, 0 to 18446744073709551615 (default 1)";
constexpr const char* max_delay_accepted = "a whole number of microseconds, 0 to 1000000 (default 200)";
constexpr const char* racecheck_accepted = "0 or 1 (default 1)";
constexpr const char* nccl_timeout_accepted =
    "a number of seconds, 0.001 to 86400, with at most 3 decimals (default 60)";

/// The refusal of variable `var` set to `value`: what is wrong with it, then what it accepts.
[[noreturn]] void refuse(const std::string& var, const std::string& value, const std::string& problem,
                         const char* accepted) {
  throw std::invalid_argument(var + "='" + value + "': " + problem + "; accepted: " + accepted);
}

/// A whole number in `base` (digits only: no sign, space, prefix or suffix) within [lo, hi], or
/// nullopt with `problem` saying why not.
std::optional<std::uint64_t> whole(std::string_view text, std::uint64_t lo, std::uint64_t hi, std::string& problem,
                                   int base = 10) {
  if (text.empty()) {
    problem = "an empty number";
    return std::nullopt;
  }
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v, base);
  if (stop != end || (ec != std::errc{} && ec != std::errc::result_out_of_range)) {
    problem = quoted(text) + " is not a whole number";
  } else if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
    problem = quoted(text) + " is out of range";
  } else {
    return v;
  }
  return std::nullopt;
}

/// The items of a comma-separated list, empty ones included (refused by their parsers).
std::vector<std::string_view> items_of(std::string_view v) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0;;) {
    const std::size_t comma = v.find(',', start);
    out.push_back(v.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

/// The fields of `item` separated by `sep`, when there are exactly `n`.
std::optional<std::vector<std::string_view>> fields_of(std::string_view item, char sep, std::size_t n) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0;;) {
    if (out.size() == n) return std::nullopt;
    const std::size_t at = item.find(sep, start);
    out.push_back(item.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  if (out.size() != n) return std::nullopt;
  return out;
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int hex_value(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

/// The UUID's text, as nvidia-smi -L and NVML write it.
void format_uuid(device_spec& d) {
  char text[64];
  const unsigned char* u = d.uuid_bytes;
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  d.uuid = text;
}

/// Device `index` as it is when DEVICEKIT_SIM_GPU<index> is unset: an H100 80GB HBM3 (the
/// defaults of device_spec) on PCI bus 0x10 + index, with a UUID of its own.
device_spec default_device(int index) {
  device_spec d;
  d.pci_bus = 0x10 + index;
  for (int i = 0; i < 16; ++i) d.uuid_bytes[i] = static_cast<unsigned char>(0x5d + 17 * index + 29 * i);
  format_uuid(d);
  return d;
}

/// "GPU-" and 8-4-4-4-12 hex digits into `d`; false when `text` is not that.
bool parse_uuid(std::string_view text, device_spec& d) {
  if (text.starts_with("GPU-")) text.remove_prefix(4);
  if (text.size() != 36) return false;
  unsigned char bytes[16] = {};
  int nibbles = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (text[i] == '-') || (!dash && !is_hex(text[i]))) return false;
    if (dash) continue;
    bytes[nibbles / 2] = static_cast<unsigned char>(bytes[nibbles / 2] * 16 + hex_value(text[i]));
    ++nibbles;
  }
  for (int i = 0; i < 16; ++i) d.uuid_bytes[i] = bytes[i];
  format_uuid(d);
  return true;
}

/// A byte size: a whole number, optionally with KiB, MiB or GiB, from 1 MiB to 1 PiB. A context
/// costs an eighth of a small device (cuda_context_headroom_bytes), so any size leaves it memory.
std::optional<std::uint64_t> byte_size(std::string_view text, std::string& problem) {
  std::uint64_t unit = 1;
  for (const auto& [suffix, bytes] :
       {std::pair<std::string_view, std::uint64_t>{"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}}) {
    if (text.ends_with(suffix)) {
      text.remove_suffix(suffix.size());
      unit = bytes;
      break;
    }
  }
  constexpr std::uint64_t lo = 1ull << 20;
  constexpr std::uint64_t hi = 1ull << 50;
  const auto n = whole(text, 0, UINT64_MAX, problem);
  if (!n) return std::nullopt;
  if (*n > hi / unit || *n * unit < lo) {
    problem = quoted(text) + " times " + std::to_string(unit) + " bytes is out of range";
    return std::nullopt;
  }
  return *n * unit;
}

/// One key=value item of DEVICEKIT_SIM_GPU<i> into `d`; the problem, or empty when it is good.
std::string device_item(std::string_view item, device_spec& d) {
  const std::size_t eq = item.find('=');
  if (item.empty()) return "an empty item";
  if (eq == std::string_view::npos) return quoted(item) + " is not key=value";
  const std::string_view key = item.substr(0, eq);
  const std::string_view value = item.substr(eq + 1);
  std::string problem;
  if (key == "name") {
    if (value.empty() || value.size() > 255) return "name must have 1 to 255 characters";
    d.name = std::string(value);
  } else if (key == "memory") {
    const auto bytes = byte_size(value, problem);
    if (!bytes) return "memory: " + problem;
    d.total_memory = *bytes;
  } else if (key == "cc") {
    const auto parts = fields_of(value, '.', 2);
    if (!parts) return "cc: '" + std::string(value) + "' is not major.minor";
    const auto major = whole((*parts)[0], 1, 99, problem);
    const auto minor = major ? whole((*parts)[1], 0, 9, problem) : std::nullopt;
    if (!major || !minor) return "cc: " + problem;
    d.cc_major = static_cast<int>(*major);
    d.cc_minor = static_cast<int>(*minor);
  } else if (key == "sms") {
    const auto sms = whole(value, 1, 1024, problem);
    if (!sms) return "sms: " + problem;
    d.sms = static_cast<int>(*sms);
  } else if (key == "pci_bus") {
    const bool hex = value.starts_with("0x") || value.starts_with("0X");
    const auto bus = whole(hex ? value.substr(2) : value, 0, 255, problem, hex ? 16 : 10);
    if (!bus) return "pci_bus: " + problem;
    d.pci_bus = static_cast<int>(*bus);
  } else if (key == "uuid") {
    if (!parse_uuid(value, d)) return "uuid: '" + std::string(value) + "' is not GPU- and 8-4-4-4-12 hex digits";
  } else {
    return "unknown key '" + std::string(key) + "'";
  }
  return {};
}

std::vector<device_spec> parse_devices(const lookup_fn& lookup, int n) {
  std::vector<device_spec> devices;
  std::vector<std::optional<std::string>> values;
  for (int i = 0; i < n; ++i) {
    devices.push_back(default_device(i));
    const std::string var = "DEVICEKIT_SIM_GPU" + std::to_string(i);
    std::optional<std::string> v = lookup(var);
    if (v && v->empty()) v.reset();
    if (v) {
      for (std::string_view item : items_of(*v)) {
        const std::string problem = device_item(item, devices.back());
        if (!problem.empty()) refuse(var, *v, problem, device_accepted);
      }
    }
    values.push_back(std::move(v));
  }
  // Two devices on one PCI bus, or with one UUID, would be one GPU to whoever tells them apart
  // by these (NVML, NCCL across processes). The one set by a variable is refused.
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < j; ++i) {
      const device_spec& a = devices[static_cast<std::size_t>(i)];
      const device_spec& b = devices[static_cast<std::size_t>(j)];
      const char* same = a.pci_bus == b.pci_bus ? "pci_bus" : a.uuid == b.uuid ? "uuid" : nullptr;
      if (same == nullptr) continue;
      const int blamed = values[static_cast<std::size_t>(j)] ? j : i;
      const int other = blamed == j ? i : j;
      refuse("DEVICEKIT_SIM_GPU" + std::to_string(blamed), values[static_cast<std::size_t>(blamed)].value_or(""),
             std::string("its ") + same + " is also device " + std::to_string(other) + "'s", device_accepted);
    }
  }
  return devices;
}

std::vector<std::vector<bool>> parse_peers(const std::optional<std::string>& v, int n) {
  const auto size = static_cast<std::size_t>(n);
  std::vector<std::vector<bool>> peers(size, std::vector<bool>(size, !v || *v == "all"));
  if (!v || *v == "all" || *v == "none") return peers;
  std::string problem;
  for (std::string_view pair : items_of(*v)) {
    const auto ends = fields_of(pair, '>', 2);
    if (!ends) refuse("DEVICEKIT_SIM_PEER", *v, quoted(pair) + " is not i>j", peer_accepted);
    const auto hi = static_cast<std::uint64_t>(n > 0 ? n - 1 : 0);
    const auto a = whole((*ends)[0], 0, hi, problem);
    const auto b = a ? whole((*ends)[1], 0, hi, problem) : std::nullopt;
    if (n == 0) problem = "there is no device";
    if (n == 0 || !a || !b)
      refuse("DEVICEKIT_SIM_PEER", *v, std::string("in ") + quoted(pair) + ", " + problem, peer_accepted);
    if (*a == *b) refuse("DEVICEKIT_SIM_PEER", *v, quoted(pair) + " names one device twice", peer_accepted);
    peers[*a][*b] = true;
  }
  return peers;
}

bool is_api_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::map<std::string, std::map<int, cudaError_t>> parse_failures(const std::string& v) {
  std::map<std::string, std::map<int, cudaError_t>> failures;
  std::string problem;
  for (std::string_view item : items_of(v)) {
    const std::string text(item);
    const auto f = fields_of(item, ':', 3);
    if (!f) refuse("DEVICEKIT_SIM_FAIL", v, "'" + text + "' is not api:n:code", fail_accepted);
    if (!is_api_name((*f)[0]))
      refuse("DEVICEKIT_SIM_FAIL", v, "in '" + text + "', '" + std::string((*f)[0]) + "' is not a function name",
             fail_accepted);
    // A name no entry point counts would never fire, and a test relying on it would pass for the
    // wrong reason.
    if (!is_counted_api((*f)[0]))
      refuse("DEVICEKIT_SIM_FAIL", v, "in '" + text + "', " + unknown_api_problem((*f)[0]), fail_accepted);
    const auto call = whole((*f)[1], 1, INT_MAX, problem);
    const auto code = call ? whole((*f)[2], 1, 999, problem) : std::nullopt;
    if (!call || !code) refuse("DEVICEKIT_SIM_FAIL", v, "in '" + text + "', " + problem, fail_accepted);
    failures[std::string((*f)[0])][static_cast<int>(*call)] = static_cast<cudaError_t>(*code);
  }
  return failures;
}

std::map<int, nccl_fault> parse_nccl_faults(const std::string& v, int n) {
  std::map<int, nccl_fault> faults;
  std::string problem;
  for (std::string_view item : items_of(v)) {
    const std::string text(item);
    const auto f = fields_of(item, ':', 3);
    if (!f) refuse("DEVICEKIT_SIM_NCCL_FAULT", v, "'" + text + "' is not device:ops:error", nccl_fault_accepted);
    const auto device = n > 0 ? whole((*f)[0], 0, static_cast<std::uint64_t>(n - 1), problem) : std::nullopt;
    if (n == 0) problem = "there is no device";
    const auto ops = device ? whole((*f)[1], 0, INT_MAX, problem) : std::nullopt;
    nccl_fault fault;
    if (ops) fault.remaining = static_cast<int>(*ops);
    std::optional<std::uint64_t> error;
    if (ops && (*f)[2] == "hang") {
      error = 0;  // a silent hang (nccl_fault::error)
    } else if (ops && (*f)[2] == "error") {
      error = 2;  // ncclSystemError
    } else if (ops) {
      error = whole((*f)[2], 1, 6, problem);
    }
    if (!error) refuse("DEVICEKIT_SIM_NCCL_FAULT", v, "in '" + text + "', " + problem, nccl_fault_accepted);
    fault.error = static_cast<int>(*error);
    faults[static_cast<int>(*device)] = fault;
  }
  return faults;
}

/// Seconds with at most 3 decimals, as milliseconds.
std::optional<std::uint64_t> milliseconds_of(std::string_view text, std::string& problem) {
  const std::size_t dot = text.find('.');
  const std::string_view seconds = text.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos ? std::string_view("0") : text.substr(dot + 1);
  const auto s = whole(seconds, 0, 86400, problem);
  if (!s) return std::nullopt;
  if (fraction.empty() || fraction.size() > 3) {
    problem = quoted(text) + " needs 1 to 3 decimals after its point";
    return std::nullopt;
  }
  const auto f = whole(fraction, 0, 999, problem);
  if (!f) return std::nullopt;
  std::uint64_t ms = *f;
  for (std::size_t i = fraction.size(); i < 3; ++i) ms *= 10;
  ms += *s * 1000;
  if (ms < 1 || ms > 86'400'000) {
    problem = quoted(text) + " is out of range";
    return std::nullopt;
  }
  return ms;
}

}  // namespace

configuration parse_configuration(const lookup_fn& lookup) {
  const auto get = [&](const char* name) {
    std::optional<std::string> v = lookup(name);
    if (v && v->empty()) v.reset();  // an empty variable is an unset one
    return v;
  };
  configuration c;
  std::string problem;
  int n = 1;
  if (const auto v = get("DEVICEKIT_SIM_GPUS")) {
    const auto gpus = whole(*v, 0, max_devices, problem);
    if (!gpus) refuse("DEVICEKIT_SIM_GPUS", *v, problem, gpus_accepted);
    n = static_cast<int>(*gpus);
  }
  c.devices = parse_devices(lookup, n);
  c.peer_possible = parse_peers(get("DEVICEKIT_SIM_PEER"), n);
  if (const auto v = get("DEVICEKIT_SIM_SEED")) {
    const auto seed = whole(*v, 0, UINT64_MAX, problem);
    if (!seed) refuse("DEVICEKIT_SIM_SEED", *v, problem, seed_accepted);
    c.seed = *seed;
  }
  if (const auto v = get("DEVICEKIT_SIM_MAX_DELAY_US")) {
    // Bounded: the scheduler draws a delay modulo max + 1, and a longer one only stalls a test.
    const auto delay = whole(*v, 0, 1'000'000, problem);
    if (!delay) refuse("DEVICEKIT_SIM_MAX_DELAY_US", *v, problem, max_delay_accepted);
    c.max_delay_us = static_cast<unsigned>(*delay);
  }
  if (const auto v = get("DEVICEKIT_SIM_RACECHECK")) {
    if (*v != "0" && *v != "1") refuse("DEVICEKIT_SIM_RACECHECK", *v, "neither 0 nor 1", racecheck_accepted);
    c.racecheck = *v == "1";
  }
  if (const auto v = get("DEVICEKIT_SIM_FAIL")) c.failures = parse_failures(*v);
  if (const auto v = get("DEVICEKIT_SIM_NCCL_FAULT")) c.nccl_faults = parse_nccl_faults(*v, n);
  if (const auto v = get("DEVICEKIT_SIM_NCCL_TIMEOUT_S")) {
    const auto ms = milliseconds_of(*v, problem);
    if (!ms) refuse("DEVICEKIT_SIM_NCCL_TIMEOUT_S", *v, problem, nccl_timeout_accepted);
    c.nccl_timeout = std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(*ms));
  }
  return c;
}

}  // namespace devicekit::cuda_sim::detail
