#pragma once
/// \file
/// The definitions behind core/topology.hpp: writing and reading the text form, and the topology of
/// a device list. Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION
/// (core/config.hpp).
#include <devicekit/core/topology.hpp>

#include <cctype>
#include <charconv>
#include <string>
#include <system_error>
#include <utility>

namespace devicekit {

DEVICEKIT_DECL std::string device_topology::serialize() const {
  std::string s = "{\"platform\": " + quote(platform) + ", \"platform_version\": " + quote(platform_version) +
                  ", \"process_index\": " + std::to_string(devices.current_process()) +
                  ", \"process_count\": " + std::to_string(devices.process_count()) + ", \"devices\": [";
  bool first = true;
  for (const auto& d : devices) {
    s += first ? "" : ", ";
    first = false;
    s += "{\"id\": " + std::to_string(d.id) + ", \"device\": " + quote(d.local.str()) +
         ", \"process_index\": " + std::to_string(d.process_index) + ", \"host_id\": " + std::to_string(d.host_id) +
         ", \"local_hardware_id\": " + std::to_string(d.local_hardware_id) +
         ", \"device_kind\": " + quote(d.device_kind) + "}";
  }
  return s + "]}";
}

DEVICEKIT_DECL device_topology device_topology::deserialize(std::string_view text) {
  parser p{text};
  device_topology t;
  int current = 0;
  int count = 1;
  std::vector<process_device> devs;
  p.object([&](const std::string& key) {
    if (key == "platform") {
      t.platform = p.string();
    } else if (key == "platform_version") {
      t.platform_version = p.string();
    } else if (key == "process_index") {
      current = p.integer();
    } else if (key == "process_count") {
      count = p.integer();
    } else if (key == "devices") {
      p.array([&] {
        process_device d;
        p.object([&](const std::string& k) {
          if (k == "id")
            d.id = p.integer();
          else if (k == "device")
            d.local = device::parse(p.string());
          else if (k == "process_index")
            d.process_index = p.integer();
          else if (k == "host_id")
            d.host_id = p.integer();
          else if (k == "local_hardware_id")
            d.local_hardware_id = p.integer();
          else if (k == "device_kind")
            d.device_kind = p.string();
          else
            p.fail("a device key (id, device, process_index, host_id, local_hardware_id, device_kind), not '" + k +
                   "'");
        });
        devs.push_back(std::move(d));
      });
    } else {
      p.fail("a topology key (platform, platform_version, process_index, process_count, devices), not '" + key + "'");
    }
  });
  p.end();
  t.devices = device_list(std::move(devs), current, count);
  return t;
}

DEVICEKIT_DECL std::string device_topology::quote(std::string_view v) {
  std::string s = "\"";
  for (const char c : v) {
    if (c == '"' || c == '\\') s += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;  // control characters are dropped
    s += c;
  }
  return s + "\"";
}

DEVICEKIT_DECL void device_topology::parser::fail(const std::string& expected) const {
  throw config_error("cannot parse device topology at character " + std::to_string(pos) + ": expected " + expected +
                     "; pass text written by device_topology::serialize()");
}

DEVICEKIT_DECL bool device_topology::parser::take(char c) {
  skip();
  if (pos < text.size() && text[pos] == c) {
    ++pos;
    return true;
  }
  return false;
}

DEVICEKIT_DECL std::string device_topology::parser::string() {
  expect('"');
  std::string s;
  while (pos < text.size() && text[pos] != '"') {
    if (text[pos] == '\\' && pos + 1 < text.size()) ++pos;
    s += text[pos++];
  }
  if (pos >= text.size()) fail("the end of a string");
  ++pos;
  return s;
}

DEVICEKIT_DECL int device_topology::parser::integer() {
  skip();
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), v);
  if (ec != std::errc{}) fail("an integer");
  pos = static_cast<std::size_t>(end - text.data());
  return v;
}

namespace detail {
DEVICEKIT_DECL std::string cuda_platform_version() {
  auto text = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
#if DEVICEKIT_HAS_CUDA
  int driver = 0;
  int runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  return "cuda driver " + text(driver) + " runtime " + text(runtime);
#else
  (void)text;
  return "cuda (devicekit built without CUDA)";
#endif
}
}  // namespace detail

DEVICEKIT_DECL device_topology topology_for_devices(const device_list& devices) {
  device_topology t;
  t.devices = devices;
  bool cuda = false;
  bool cpu = false;
  for (const auto& d : devices) (d.local.is_cuda() ? cuda : cpu) = true;
  if (cuda && cpu) {
    throw config_error(
        "topology_for_devices: the list mixes cpu and cuda devices; a topology describes one "
        "platform: pass the GPUs and the host separately");
  }
  if (cuda) {
    t.platform = "cuda";
    t.platform_version = detail::cuda_platform_version();
  }
  return t;
}

}  // namespace devicekit
