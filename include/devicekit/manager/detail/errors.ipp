#pragma once
/// \file
/// The definitions behind manager/detail/errors.hpp: the text of the manager's errors.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/manager/detail/errors.hpp>

#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/detect/detectors.hpp>

#include <optional>
#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL std::string device_names(const capabilities& caps) {
  std::string s;
  for (const auto& p : caps.devices) s += (s.empty() ? "" : ", ") + p.id.str();
  return s.empty() ? "none" : s;
}

DEVICEKIT_DECL std::optional<config_error> missing_device_of_manager(device d, const char* operation,
                                                                     const std::string& names) {
  if (device_exists(d)) return std::nullopt;
  return config_error(missing_device_error(d, operation).what() +
                      ("; it is not one of this manager's devices either (" + names + ")"));
}

DEVICEKIT_DECL config_error not_a_device_error(device d, const std::string& names) {
  return config_error("device " + d.str() + " is not one of this manager's devices (" + names + ")");
}

DEVICEKIT_DECL config_error not_a_memory_device_error(device d, const std::string& names) {
  return config_error("device " + d.str() + " is not one of this manager's devices (" + names +
                      ", and cpu:0 for host memory)");
}

DEVICEKIT_DECL config_error unusable_device_error(device d, const device_properties& p) {
  return config_error("cannot use " + d.str() + " (" + p.name + "): " + p.unusable_reason +
                      "; update the NVIDIA driver to one that supports this CUDA toolkit, or run on the CPU "
                      "(DEVICEKIT_PREFER=cpu or DEVICEKIT_PLATFORMS=cpu)");
}

DEVICEKIT_DECL config_error compile_only_device_error(device d, const device_properties& p) {
  return config_error("cannot allocate on " + d.str() + " (" + p.name +
                      "): it is a compile-only device, described (compile_only_detector) but not present in this "
                      "process; plans, shard layouts, budgets and reports work on it, memory and placement do not. "
                      "Run on the machine it describes, or with a detector that finds this process's devices");
}

DEVICEKIT_DECL config_error pinned_without_cuda_error(device d) {
  return config_error("memory kind pinned_host on " + d.str() +
                      " needs CUDA (page-locked memory comes from cudaMallocHost), but devicekit was built without it "
                      "(DEVICEKIT_HAS_CUDA is 0); use memory_kind::host, or build with the CUDA toolkit");
}

DEVICEKIT_DECL config_error pinned_without_gpu_error(device d, const std::string& fallback_reason) {
  return config_error("memory kind pinned_host on " + d.str() +
                      " needs a CUDA device to pin memory for, and this manager has none" +
                      (fallback_reason.empty() ? std::string() : " (" + fallback_reason + ")") +
                      "; use memory_kind::host (ordinary host memory) instead");
}

DEVICEKIT_DECL device_mismatch not_a_placement_device_error(device dev, const std::string& names) {
  return device_mismatch("cannot place on " + dev.str() + ": it is not one of this manager's devices (" + names + ")",
                         std::nullopt, dev);
}

DEVICEKIT_DECL device_mismatch scoped_device_mismatch_error(const char* operation, device scoped,
                                                            const std::string& names) {
  return device_mismatch(std::string(operation) + ": the default_device_scope asks for " + scoped.str() +
                             ", which is not one of this manager's devices (" + names +
                             "); scope one of them, or pass the device explicitly",
                         std::nullopt, scoped);
}

DEVICEKIT_DECL config_error no_usable_device_error(const capabilities& caps, const settings& config) {
  return config_error(
      "no detector found a usable device: " +
      (caps.fallback_reason.empty() ? std::string("no reason given") : caps.fallback_reason) +
      (config.has_platforms()
           ? "; widen the platform list (" + platform_list_text(config) + ") or add a detector for a listed platform"
           : std::string("; add cpu_detector to the detector list for a CPU fallback")));
}

DEVICEKIT_DECL config_error unavailable_default_device_error(device wanted, const capabilities& caps) {
  std::string have;
  for (const auto& p : caps.devices) have += (have.empty() ? "" : ", ") + p.id.str();
  return config_error("requested default device " + wanted.str() + " is not available; available: " + have +
                      (caps.fallback_reason.empty() ? "" : " (" + caps.fallback_reason + ")"));
}

DEVICEKIT_DECL config_error row_share_out_of_order_error(std::string_view scheme, std::size_t i,
                                                         const device_share& share, std::size_t next) {
  return config_error("distribute: scheme '" + std::string(scheme) + "' declares splits_batch, but share " +
                      std::to_string(i) + " (" + share.dev.str() + ") " +
                      (share.whole ? std::string("is a whole copy")
                       : share.padding != 0
                           ? "asks for " + std::to_string(share.padding) + " padding row(s)"
                           : "starts at row " + std::to_string(share.begin) + " instead of " + std::to_string(next)) +
                      "; row shares must cover the batch in order without padding (use basic_shard_batch"
                      "<uneven_batch::pad> for padding)");
}

DEVICEKIT_DECL config_error row_shares_sum_error(std::string_view scheme, std::size_t rows, std::size_t batch) {
  return config_error("distribute: scheme '" + std::string(scheme) + "' gives row shares that sum to " +
                      std::to_string(rows) + " rows, but the batch has " + std::to_string(batch) +
                      "; the shares must cover every row once");
}

DEVICEKIT_DECL config_error row_shares_undeclared_error(std::string_view scheme) {
  return config_error("distribute: scheme '" + std::string(scheme) +
                      "' gives row shares; declare 'static constexpr bool splits_batch = true' in it to shard");
}

}  // namespace devicekit::detail
