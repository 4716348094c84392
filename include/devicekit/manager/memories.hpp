#pragma once
/// \file
/// A device's memories as jaxlib lists them (JAX documentation, "Memories and host offloading";
/// `jax.Device.addressable_memories()`, `default_memory()`, `Memory.kind`,
/// `Memory.addressable_by_devices()`), over the memory kinds devicekit has (core/memory_kind.hpp):
///
///   memory_kinds(m, d)            the kinds placement and `m.memory(d, kind)` accept for `d`,
///                                 the default first
///   default_memory_kind(m, d)     `device`: what `place(tree, d)` and `m.memory(d)` use
///   addressable_memories(m, d)    one memory_space per kind
///   addressable_by_devices(m, s)  the devices of `m` whose placement reaches space `s`
///
/// Where devicekit differs from jaxlib, it says so: jaxlib gives every device its own host memory,
/// devicekit's `host` memory is one pool for the process (memory/registry.hpp), so every device of
/// a manager addresses the same host space; a cpu device's `device` memory is host memory too
/// (jaxlib calls the CPU's default memory `unpinned_host`).
#include <devicekit/core/config.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/memory_kind.hpp>
#include <devicekit/manager/detail/detection.hpp>
#include <devicekit/manager/detail/pools.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace devicekit {

/// One memory of a device: `kind` memory as seen from `owner` (jaxlib's `Memory`).
struct memory_space {
  device owner;
  memory_kind kind = memory_kind::device;

  /// "cuda:0/pinned_host"
  [[nodiscard]] std::string str() const { return owner.str() + "/" + std::string(to_string(kind)); }
  friend bool operator==(const memory_space&, const memory_space&) = default;
};

/// The memory kinds `m` accepts for its device `d`, default first: a GPU has `device`,
/// `pinned_host` and `host`; the cpu device has `device` (host memory) and `host` (the same pool),
/// and `pinned_host` only where the manager has a GPU to pin memory for (as `m.memory(d, kind)`
/// accepts them). config_error for a device `m` does not have.
template <class Manager>
[[nodiscard]] std::vector<memory_kind> memory_kinds(const Manager& m, device d) {
  (void)detail::total_memory_of(m.capabilities(), d, "memory_kinds");  // config_error naming the manager's devices
  std::vector<memory_kind> kinds{memory_kind::device};
  if (detail::pinned_available(d, m.has_gpu())) kinds.push_back(memory_kind::pinned_host);
  kinds.push_back(memory_kind::host);
  return kinds;
}

/// The kind `place(tree, d)` and `m.memory(d)` use: `device` (jaxlib's `default_memory()`; on a
/// cpu device that is host memory).
template <class Manager>
[[nodiscard]] memory_kind default_memory_kind(const Manager& m, device d) {
  (void)detail::total_memory_of(m.capabilities(), d, "default_memory_kind");
  return memory_kind::device;
}

/// One memory_space of `d` per kind of memory_kinds(m, d), the default first.
template <class Manager>
[[nodiscard]] std::vector<memory_space> addressable_memories(const Manager& m, device d) {
  std::vector<memory_space> out;
  for (const memory_kind k : memory_kinds(m, d)) out.push_back({d, k});
  return out;
}

/// The devices of `m` that reach space `s` by placement (`place(tree, dev, s.kind)` lands in it):
/// a device's own memory and its pinned host pool serve that device alone; `host` memory is the
/// process's one host pool, which every device of `m` places into. config_error when `s.owner`
/// is not a device of `m` or `s.kind` is not one of its kinds.
template <class Manager>
[[nodiscard]] std::vector<device> addressable_by_devices(const Manager& m, const memory_space& s) {
  const auto kinds = memory_kinds(m, s.owner);
  if (std::find(kinds.begin(), kinds.end(), s.kind) == kinds.end()) {
    throw config_error("memory space " + s.str() + " does not exist: " + s.owner.str() + " has no memory kind " +
                       std::string(to_string(s.kind)) +
                       " (pinned_host needs a CUDA device to pin memory for); see memory_kinds()");
  }
  if (s.kind != memory_kind::host) return {s.owner};
  std::vector<device> out = m.devices();
  if (std::find(out.begin(), out.end(), device::cpu()) == out.end()) out.push_back(device::cpu());
  return out;
}

}  // namespace devicekit
