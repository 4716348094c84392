#pragma once
/// \file
/// `device_list`: the devices of one or more processes, as jaxlib's DeviceList / xla_client
/// present them. Each entry (`process_device`) is a device of some process with jaxlib's fields:
/// a global `id`, `process_index`, `host_id` (the process index, as in jaxlib) and
/// `local_hardware_id` (the CUDA ordinal within its process). A list knows which process it is
/// seen from (`current_process()`): its `addressable_devices()` are that process's.
///
///   auto mine = devicekit::device_list::local(dm.devices(), devicekit::process_context::from_environment());
///   // exchange device_topology::serialize() strings across processes (MPI), parse them, then:
///   auto global = devicekit::device_list::gather({list_of_rank0, list_of_rank1});
///
/// The queries jaxlib's DeviceList answers about memories and devices (its memory_kinds,
/// default_memory_kind, and xla_client's check_and_canonicalize_memory_kind), and device_kind:
///
///   list.memory_kinds()          the memory kinds every addressable device has, default first
///   list.default_memory_kind()   `device`; nullopt when this process has no device in the list
///   list.device_kind()           the model the devices share; config_error when they differ
///   check_and_canonicalize_memory_kind(kind, list)   nullopt -> the default kind; a kind or
///                                jaxlib name the devices have -> that kind; else config_error
///                                listing the kinds they have
///
/// The process index comes from the launcher's environment (`process_context::from_environment`:
/// the MPI world rank that mpirun, srun or torchrun exports), so this layer needs no MPI; without
/// a launcher it is one process, index 0.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/memory_kind.hpp>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devicekit {

/// Which process this is among how many: the world rank and size of a multi-process run.
struct process_context {
  int process_index = 0;
  int process_count = 1;
  std::string source;  ///< the environment variables it came from; empty for the single-process default

  /// The rank and size the launcher exported (Open MPI, MPICH/Hydra PMI, MVAPICH2, Slurm's srun,
  /// torchrun: OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, MV2_COMM_WORLD_RANK/SIZE,
  /// SLURM_PROCID/NTASKS, RANK/WORLD_SIZE, in that order), or one process. config_error for a
  /// value that is not a number or a rank outside [0, size).
  [[nodiscard]] static process_context from_environment();

  /// Validated: config_error unless 0 <= index < count.
  [[nodiscard]] static process_context make(int index, int count, std::string source = {});

 private:
  static int number(const char* name, std::string_view text);
};

/// One device of one process, with jaxlib's Device fields.
struct process_device {
  int id = 0;                 ///< global id: unique across the processes of the list
  device local;               ///< the device as its own process names it (cuda:1)
  int process_index = 0;      ///< the process it belongs to
  int host_id = 0;            ///< jaxlib's host_id: the process index
  int local_hardware_id = 0;  ///< the CUDA ordinal in its process (-1 for the host)
  std::string device_kind;    ///< the model, e.g. "NVIDIA H100 80GB HBM3" (may be empty)

  [[nodiscard]] std::string str() const {
    return local.str() + "@process" + std::to_string(process_index) + " (id " + std::to_string(id) + ")";
  }
  friend bool operator==(const process_device&, const process_device&) = default;
};

class device_list {
 public:
  device_list() = default;

  /// A list as process `current_process` sees it. config_error for a global id used twice, the
  /// same device listed twice for one process, or a process index outside [0, process_count).
  device_list(std::vector<process_device> devices, int current_process, int process_count);

  /// This process's devices (as a manager lists them), numbered as jaxlib numbers them when every
  /// process has the same count: global id = process_index x devices.size() + position.
  [[nodiscard]] static device_list local(const std::vector<device>& devices, const process_context& p = {},
                                         const std::vector<std::string>& kinds = {});

  /// The global list from every process's local list (e.g. after exchanging them with MPI): the
  /// devices by process index, global ids renumbered 0, 1, ... in that order, seen from the
  /// process of `lists[0]`. config_error for a process missing, duplicated or with a disagreeing
  /// process count.
  [[nodiscard]] static device_list gather(std::span<const device_list> lists);
  [[nodiscard]] static device_list gather(std::initializer_list<device_list> lists) {
    return gather(std::span<const device_list>(lists.begin(), lists.size()));
  }

  /// Every device of the list (jaxlib: the global devices).
  [[nodiscard]] const std::vector<process_device>& devices() const noexcept { return devices_; }
  [[nodiscard]] const std::vector<process_device>& global_devices() const noexcept { return devices_; }
  /// The devices of the current process: the ones it can address (jaxlib: addressable_devices,
  /// local_devices).
  [[nodiscard]] std::vector<process_device> addressable_devices() const;
  [[nodiscard]] std::vector<process_device> local_devices() const { return addressable_devices(); }
  /// The process indices that own a device of the list, ascending.
  [[nodiscard]] std::vector<int> process_indices() const {
    std::set<int> s;
    for (const auto& d : devices_) s.insert(d.process_index);
    return {s.begin(), s.end()};
  }
  /// True when the current process owns every device of the list.
  [[nodiscard]] bool is_fully_addressable() const noexcept {
    return std::all_of(devices_.begin(), devices_.end(), [&](const auto& d) { return d.process_index == current_; });
  }
  [[nodiscard]] int current_process() const noexcept { return current_; }
  [[nodiscard]] int process_count() const noexcept { return count_; }
  [[nodiscard]] std::size_t size() const noexcept { return devices_.size(); }
  [[nodiscard]] bool empty() const noexcept { return devices_.empty(); }
  [[nodiscard]] const process_device& operator[](std::size_t i) const { return devices_.at(i); }
  [[nodiscard]] auto begin() const noexcept { return devices_.begin(); }
  [[nodiscard]] auto end() const noexcept { return devices_.end(); }
  /// The device with global id `id`; config_error if there is none.
  [[nodiscard]] const process_device& by_id(int id) const;

  /// The memory kinds (core/memory_kind.hpp) that every addressable device of the list has, the
  /// default first (jaxlib's DeviceList.memory_kinds): a cuda device has `device`, `pinned_host`
  /// and `host`; a cpu device `device` (host memory) and `host`. Empty when this process has no
  /// device in the list, as jaxlib gives an empty tuple. (The cpu device's `pinned_host` needs a
  /// GPU to pin memory for, which a list does not know: a manager does, memory_kinds(dm, d).)
  [[nodiscard]] std::vector<memory_kind> memory_kinds() const;
  /// The kind placement uses when given none (jaxlib's DeviceList.default_memory_kind):
  /// `device`; nullopt when this process has no device in the list (jaxlib: None).
  [[nodiscard]] std::optional<memory_kind> default_memory_kind() const;
  /// The device kind every device of the list shares, e.g. "NVIDIA H100 80GB HBM3" (jaxlib's
  /// Device.device_kind). config_error for an empty list, and for devices of different kinds,
  /// naming each kind and a device of it.
  [[nodiscard]] const std::string& device_kind() const;

  friend bool operator==(const device_list&, const device_list&) = default;

 private:
  std::vector<process_device> devices_;
  int current_ = 0;
  int count_ = 1;
};

/// jaxlib's check_and_canonicalize_memory_kind(memory_kind, device_list), what a sharding does with
/// the memory kind it is given: nullopt becomes the list's default memory kind (nullopt when this
/// process has no device in the list); a kind that every addressable device has is returned as
/// it is; any other is a config_error naming the devices' kind and the memory kinds they have. A
/// list without an addressable device accepts any kind: its devices are another process's, as
/// jaxlib assumes too.
[[nodiscard]] DEVICEKIT_DECL std::optional<memory_kind> check_and_canonicalize_memory_kind(
    std::optional<memory_kind> kind, const device_list& devices);
/// The same for a memory kind's name: "device", "pinned_host", "host", or jaxlib's "unpinned_host"
/// for host (canonicalised to memory_kind::host). An unknown name is a config_error listing the
/// kinds the list's devices have.
[[nodiscard]] DEVICEKIT_DECL std::optional<memory_kind> check_and_canonicalize_memory_kind(
    std::optional<std::string_view> kind, const device_list& devices);
/// The default memory kind of `devices` (check_and_canonicalize_memory_kind with no kind).
[[nodiscard]] inline std::optional<memory_kind> check_and_canonicalize_memory_kind(std::nullopt_t,
                                                                                   const device_list& devices) {
  return check_and_canonicalize_memory_kind(std::optional<memory_kind>(), devices);
}

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/device_list.ipp>
#endif
