#pragma once
/// \file
/// The errors of the device manager, their text in one place: a device the manager does not
/// have, one it cannot use, memory it cannot pin, a placement outside its devices, detection that
/// found nothing usable, and row shares of a scheme that do not cover the batch. The types are
/// core's config_error and device_mismatch; tests match the text, so it lives here,
/// once, next to its siblings, rather than inline at each throw.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/detect/capabilities.hpp>
#include <devicekit/distribute/scheme.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace devicekit::detail {

/// The ids of the devices a detector found ("cuda:0, cuda:1"), or "none".
[[nodiscard]] DEVICEKIT_DECL std::string device_names(const capabilities& caps);

/// A device that is not one of the manager's devices and that this process does not have at all:
/// the config_error every public call gives for it (core/detail/device_exists.hpp), with the manager's
/// devices named too; nullopt when the process has `d` (the caller then gives its own error).
[[nodiscard]] DEVICEKIT_DECL std::optional<config_error> missing_device_of_manager(device d, const char* operation,
                                                                                   const std::string& names);

/// `d` is not one of the manager's devices (properties(d)).
[[nodiscard]] DEVICEKIT_DECL config_error not_a_device_error(device d, const std::string& names);

/// `d` is neither one of the manager's devices nor cpu:0, the host whose memory it also manages.
[[nodiscard]] DEVICEKIT_DECL config_error not_a_memory_device_error(device d, const std::string& names);

/// A device a detector listed that devicekit cannot use (a GPU only NVML sees), with the reason.
[[nodiscard]] DEVICEKIT_DECL config_error unusable_device_error(device d, const device_properties& p);
/// Memory or placement asked of a device that is only described (compile_only_detector).
[[nodiscard]] DEVICEKIT_DECL config_error compile_only_device_error(device d, const device_properties& p);

/// pinned_host memory asked of a build without CUDA (DEVICEKIT_HAS_CUDA is 0).
[[nodiscard]] DEVICEKIT_DECL config_error pinned_without_cuda_error(device d);

/// pinned_host memory asked of a manager without a GPU to pin it for.
[[nodiscard]] DEVICEKIT_DECL config_error pinned_without_gpu_error(device d, const std::string& fallback_reason);

/// Placement on `dev`, which is not one of the manager's devices.
[[nodiscard]] DEVICEKIT_DECL device_mismatch not_a_placement_device_error(device dev, const std::string& names);

/// Placement without a device under a default_device_scope whose device the manager lacks.
[[nodiscard]] DEVICEKIT_DECL device_mismatch scoped_device_mismatch_error(const char* operation, device scoped,
                                                                          const std::string& names);

/// No detector of the manager found a usable device; says how to widen the search.
[[nodiscard]] DEVICEKIT_DECL config_error no_usable_device_error(const capabilities& caps, const settings& config);

/// The configured default device (DEVICEKIT_DEVICE or settings) is not among those found.
[[nodiscard]] DEVICEKIT_DECL config_error unavailable_default_device_error(device wanted, const capabilities& caps);

/// Share `i` of a scheme that declares splits_batch is a whole copy, padded, or out of order
/// (`next` is the row it should start at).
[[nodiscard]] DEVICEKIT_DECL config_error row_share_out_of_order_error(std::string_view scheme, std::size_t i,
                                                                       const device_share& share, std::size_t next);

/// The row shares of a scheme sum to `rows`, not to the batch.
[[nodiscard]] DEVICEKIT_DECL config_error row_shares_sum_error(std::string_view scheme, std::size_t rows,
                                                               std::size_t batch);

/// A scheme gives row shares without declaring that it splits the batch.
[[nodiscard]] DEVICEKIT_DECL config_error row_shares_undeclared_error(std::string_view scheme);

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/manager/detail/errors.ipp>
#endif
