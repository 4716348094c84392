#pragma once
/// \file
/// The definitions behind detect/compile_only.hpp. Inline in a header-only build; compiled once
/// under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/error.hpp>
#include <devicekit/detect/compile_only.hpp>
#include <devicekit/detect/hardware.hpp>

#include <string>
#include <utility>
#include <vector>

namespace devicekit {

DEVICEKIT_DECL capabilities compile_only_detector::detect() const {
  capabilities c = caps;
  c.detector = "compile_only";
  for (auto& p : c.devices) p.compile_only = true;
  return c;
}

DEVICEKIT_DECL compile_only_detector compile_only_detector::from_topology(const device_topology& t,
                                                                          std::uint64_t memory_bytes) {
  if (memory_bytes == 0) {
    throw config_error(
        "compile_only_detector::from_topology: memory_bytes is 0; give each device's memory "
        "(a topology does not record it), e.g. 80 GiB for an H100 80GB");
  }
  compile_only_detector d;
  capabilities& c = d.caps;
  std::vector<int> process_of;  // per described GPU
  for (const process_device& pd : t.devices.devices()) {
    if (!pd.local.is_cuda()) continue;
    process_of.push_back(pd.process_index);
    device_properties p;
    p.id = device::cuda(pd.id);
    p.name = pd.device_kind.empty() ? "described GPU" : pd.device_kind;
    p.total_memory_bytes = memory_bytes;
    p.hardware = classify_hardware(p.name);
    c.devices.push_back(std::move(p));
  }
  if (c.devices.empty()) {
    throw config_error("compile_only_detector::from_topology: the topology (platform '" + t.platform +
                       "') has no GPU to describe");
  }
  // Peers: the GPUs of one process (jaxlib's host), as a multi-GPU node would have them.
  for (std::size_t i = 0; i < c.devices.size(); ++i) {
    auto& peers = c.devices[i].peer_access;
    peers.assign(c.devices.size(), false);
    for (std::size_t j = 0; j < c.devices.size(); ++j) {
      peers[j] = i != j && process_of[i] == process_of[j];
    }
  }
  c.device_type = device_kind::cuda;
  c.device_count = c.gpu_count = static_cast<int>(c.devices.size());
  c.supports_distributed = c.device_count > 1;
  c.total_memory_bytes = memory_bytes * c.devices.size();
  return d;
}

}  // namespace devicekit
