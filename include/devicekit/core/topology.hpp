#pragma once
/// \file
/// `device_topology`: a platform, its version and its devices, as jaxlib's TopologyDescription
/// (xla_client.get_topology_for_devices) describes them, with a stable text form:
///
///   auto topo = devicekit::topology_for_devices(list);         // list: a device_list
///   std::string text = topo.serialize();                        // JSON, same input -> same text
///   auto back = devicekit::device_topology::deserialize(text);  // back == topo
///
/// The version is "cuda driver D.d runtime R.r" on a GPU (cudaDriverGetVersion,
/// cudaRuntimeGetVersion) and "cpu" on the host. The text is what processes exchange to build a
/// global device_list (gather the per-process topologies' device lists).
#include <devicekit/core/config.hpp>
#include <devicekit/core/device_list.hpp>
#include <devicekit/core/error.hpp>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace devicekit {

struct device_topology {
  std::string platform = "cpu";          ///< "cuda" or "cpu"
  std::string platform_version = "cpu";  ///< "cuda driver 13.0 runtime 13.0", or "cpu"
  device_list devices;

  /// One line of JSON with fixed key order: {"platform", "platform_version", "process_index",
  /// "process_count", "devices": [{"id", "device", "process_index", "host_id",
  /// "local_hardware_id", "device_kind"}]}.
  [[nodiscard]] std::string serialize() const {
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

  /// Reads what serialize() wrote (keys in any order, whitespace free). config_error naming the
  /// position and what was expected for anything else.
  [[nodiscard]] static device_topology deserialize(std::string_view text) {
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

  friend bool operator==(const device_topology&, const device_topology&) = default;

 private:
  static std::string quote(std::string_view v) {
    std::string s = "\"";
    for (const char c : v) {
      if (c == '"' || c == '\\') s += '\\';
      if (static_cast<unsigned char>(c) < 0x20) continue;  // control characters are dropped
      s += c;
    }
    return s + "\"";
  }

  /// A parser for the JSON subset serialize() writes: objects, arrays, strings, integers.
  struct parser {
    std::string_view text;
    std::size_t pos = 0;

    [[noreturn]] void fail(const std::string& expected) const {
      throw config_error("cannot parse device topology at character " + std::to_string(pos) + ": expected " + expected +
                         "; pass text written by device_topology::serialize()");
    }
    void skip() {
      while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])) != 0) ++pos;
    }
    bool take(char c) {
      skip();
      if (pos < text.size() && text[pos] == c) {
        ++pos;
        return true;
      }
      return false;
    }
    void expect(char c) {
      if (!take(c)) fail(std::string("'") + c + "'");
    }
    std::string string() {
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
    int integer() {
      skip();
      int v = 0;
      const auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), v);
      if (ec != std::errc{}) fail("an integer");
      pos = static_cast<std::size_t>(end - text.data());
      return v;
    }
    template <class F>
    void object(F&& member) {
      expect('{');
      if (take('}')) return;
      do {
        const std::string key = string();
        expect(':');
        member(key);
      } while (take(','));
      expect('}');
    }
    template <class F>
    void array(F&& element) {
      expect('[');
      if (take(']')) return;
      do element();
      while (take(','));
      expect(']');
    }
    void end() {
      skip();
      if (pos != text.size()) fail("the end of the text");
    }
  };
};

namespace detail {
/// "cuda driver 13.0 runtime 13.0" (versions as CUDA encodes them: 1000 x major + 10 x minor).
[[nodiscard]] inline std::string cuda_platform_version() {
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

/// The topology of `devices`: one platform for all of them (config_error for a mix of cpu and
/// cuda devices, which no single platform describes; pass one kind).
[[nodiscard]] inline device_topology topology_for_devices(const device_list& devices) {
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

/// The topology of this process's `devices` (e.g. dm.devices()) under process context `p`.
[[nodiscard]] inline device_topology topology_for_devices(
    const std::vector<device>& devices, const process_context& p = process_context::from_environment()) {
  return topology_for_devices(device_list::local(devices, p));
}

}  // namespace devicekit
