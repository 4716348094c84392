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
  [[nodiscard]] std::string serialize() const;

  /// Reads what serialize() wrote (keys in any order, whitespace free). config_error naming the
  /// position and what was expected for anything else.
  [[nodiscard]] static device_topology deserialize(std::string_view text);

  friend bool operator==(const device_topology&, const device_topology&) = default;

 private:
  static std::string quote(std::string_view v);

  /// A parser for the JSON subset serialize() writes: objects, arrays, strings, integers.
  struct parser {
    std::string_view text;
    std::size_t pos = 0;

    [[noreturn]] void fail(const std::string& expected) const;
    void skip() {
      while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])) != 0) ++pos;
    }
    bool take(char c);
    void expect(char c) {
      if (!take(c)) fail(std::string("'") + c + "'");
    }
    std::string string();
    int integer();
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
[[nodiscard]] DEVICEKIT_DECL std::string cuda_platform_version();
}  // namespace detail

/// The topology of `devices`: one platform for all of them (config_error for a mix of cpu and
/// cuda devices, which no single platform describes; pass one kind).
[[nodiscard]] DEVICEKIT_DECL device_topology topology_for_devices(const device_list& devices);

/// The topology of this process's `devices` (e.g. dm.devices()) under process context `p`.
[[nodiscard]] inline device_topology topology_for_devices(
    const std::vector<device>& devices, const process_context& p = process_context::from_environment()) {
  return topology_for_devices(device_list::local(devices, p));
}

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/topology.ipp>
#endif
