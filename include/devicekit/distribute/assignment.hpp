#pragma once
/// \file
/// Which device a process (or a replica) runs on.
///
///  - `local_rank_from_environment()`: the node-local rank that the launcher exported
///    (Open MPI, Slurm, MVAPICH2, torchrun).
///  - `assign_device(visible, config, local_rank)`: `visible[local_rank % visible.size()]`, the
///    choice MPI + GPU jobs want (Kokkos does the same); an explicit device in `settings`
///    (DEVICEKIT_DEVICE) overrides it and is validated against `visible`.
///  - `device_assignment`: a replica x computation table of devices (jaxlib's
///    DeviceAssignment), printable, serialisable, and shown by the device report.
#include <devicekit/core/device.hpp>
#include <devicekit/core/settings.hpp>

#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devicekit {

/// A node-local rank and the environment variable it came from.
struct local_rank_info {
  int rank = 0;
  std::string source;  ///< e.g. "OMPI_COMM_WORLD_LOCAL_RANK"
};

/// The variables read by local_rank_from_environment, in order of precedence.
inline constexpr std::string_view local_rank_variables[] = {
    "OMPI_COMM_WORLD_LOCAL_RANK",  // Open MPI's mpirun
    "SLURM_LOCALID",               // srun
    "MV2_COMM_WORLD_LOCAL_RANK",   // MVAPICH2
    "LOCAL_RANK",                  // torchrun, accelerate, deepspeed, and many job scripts
};

/// The node-local rank the launcher exported, or nullopt when none of `local_rank_variables` is
/// set. A variable that is set but is not a non-negative integer is a config_error naming it.
[[nodiscard]] DEVICEKIT_DECL std::optional<local_rank_info> local_rank_from_environment();

/// The device for this process: the device set in `config` (for example from DEVICEKIT_DEVICE)
/// when there is one, else `visible[local_rank % visible.size()]`; without a local rank, the
/// first visible device. Throws config_error when `visible` is empty or the configured device
/// is not visible.
[[nodiscard]] DEVICEKIT_DECL device
assign_device(std::span<const device> visible, const settings& config = {},
              std::optional<local_rank_info> local_rank = local_rank_from_environment());

/// A replica x computation table of devices (jaxlib's DeviceAssignment): entry (r, c) is the
/// device that runs computation c of replica r. A data-parallel plan over n devices is n
/// replicas x 1 computation.
class device_assignment {
 public:
  device_assignment() = default;

  /// `devices` in row-major order (replica by replica). Throws config_error when the size is
  /// not replicas * computations.
  device_assignment(std::size_t replicas, std::size_t computations, std::vector<device> devices);

  /// From rows, one per replica; every row must have the same length.
  [[nodiscard]] static device_assignment create(const std::vector<std::vector<device>>& rows);

  [[nodiscard]] std::size_t replica_count() const noexcept { return replicas_; }
  [[nodiscard]] std::size_t computation_count() const noexcept { return computations_; }
  [[nodiscard]] bool empty() const noexcept { return devices_.empty(); }
  [[nodiscard]] const std::vector<device>& devices() const noexcept { return devices_; }

  /// The device of computation `computation` of replica `replica` (bounds-checked).
  [[nodiscard]] device at(std::size_t replica, std::size_t computation) const;

  /// Where `d` appears first, as (replica, computation).
  [[nodiscard]] std::optional<std::pair<std::size_t, std::size_t>> find(device d) const;

  /// "2 replicas x 1 computation: [[cuda:0], [cuda:1]]".
  [[nodiscard]] std::string str() const;

  /// A compact form that parse() reads back: "2x1:cuda:0,cuda:1".
  [[nodiscard]] std::string serialize() const;

  [[nodiscard]] static device_assignment parse(std::string_view text);

  friend bool operator==(const device_assignment&, const device_assignment&) = default;
  friend std::ostream& operator<<(std::ostream& os, const device_assignment& a) { return os << a.str(); }

 private:
  std::size_t replicas_ = 0;
  std::size_t computations_ = 0;
  std::vector<device> devices_;
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/distribute/assignment.ipp>
#endif
