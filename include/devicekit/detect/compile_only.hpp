#pragma once
/// \file
/// `compile_only_detector`: the devices of a machine this process cannot see, as jaxlib's
/// compile-only devices are (a client made from a described topology to compile for it). A
/// manager over it computes plans, shard layouts, budgets and reports for, say, 8 H100s from a
/// saved topology on a laptop; memory and placement on those devices are refused with a
/// config_error that says why (every device is marked `compile_only`).
#include <devicekit/core/topology.hpp>
#include <devicekit/detect/capabilities.hpp>

#include <cstdint>
#include <string_view>

namespace devicekit {

struct compile_only_detector {
  static constexpr std::string_view name() noexcept { return "compile_only"; }
  capabilities caps;  ///< the described devices (marked compile_only by detect())

  [[nodiscard]] DEVICEKIT_DECL capabilities detect() const;

  /// The GPUs of a saved topology (device_topology::serialize, e.g. a run's on the target
  /// machine), numbered by their global ids: cuda:0 .. cuda:n-1, each with `memory_bytes` of
  /// memory (a topology does not record it) and its device_kind as its name; peers within one
  /// process. config_error for a topology without GPUs or a memory size of 0.
  [[nodiscard]] DEVICEKIT_DECL static compile_only_detector from_topology(const device_topology& t,
                                                                          std::uint64_t memory_bytes);
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/detect/compile_only.ipp>
#endif
