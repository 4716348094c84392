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
/// The process index comes from the launcher's environment (`process_context::from_environment`:
/// the MPI world rank that mpirun, srun or torchrun exports), so this layer needs no MPI; without
/// a launcher it is one process, index 0.
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
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
  [[nodiscard]] static process_context from_environment() {
    static constexpr std::pair<const char*, const char*> pairs[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                                                    {"PMI_RANK", "PMI_SIZE"},
                                                                    {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"},
                                                                    {"SLURM_PROCID", "SLURM_NTASKS"},
                                                                    {"RANK", "WORLD_SIZE"}};
    for (const auto& [rank_var, size_var] : pairs) {
      const char* r = std::getenv(rank_var);
      const char* n = std::getenv(size_var);
      if (r == nullptr || n == nullptr) continue;
      return make(number(rank_var, r), number(size_var, n), std::string(rank_var) + "/" + size_var);
    }
    return {};
  }

  /// Validated: config_error unless 0 <= index < count.
  [[nodiscard]] static process_context make(int index, int count, std::string source = {}) {
    if (count < 1 || index < 0 || index >= count) {
      throw config_error("process index " + std::to_string(index) + " of " + std::to_string(count) +
                         " processes is invalid" + (source.empty() ? "" : " (from " + source + ")") +
                         ": the index must lie in [0, process count) and the count be at least 1");
    }
    return {index, count, std::move(source)};
  }

 private:
  static int number(const char* name, std::string_view text) {
    int v = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || v < 0) {
      throw config_error(std::string(name) + "='" + std::string(text) + "' is not a non-negative integer");
    }
    return v;
  }
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
  device_list(std::vector<process_device> devices, int current_process, int process_count)
      : devices_(std::move(devices)), current_(current_process), count_(process_count) {
    (void)process_context::make(current_, count_);
    std::set<int> ids;
    std::set<std::pair<int, device>> seen;
    for (const auto& d : devices_) {
      if (d.process_index < 0 || d.process_index >= count_) {
        throw config_error("device_list: " + d.str() + " names process " + std::to_string(d.process_index) +
                           ", outside [0, " + std::to_string(count_) + ")");
      }
      if (!ids.insert(d.id).second) {
        throw config_error("device_list: global id " + std::to_string(d.id) +
                           " is used twice; each device of the list needs its own id");
      }
      if (!seen.insert({d.process_index, d.local}).second) {
        throw config_error("device_list: " + d.local.str() + " of process " + std::to_string(d.process_index) +
                           " is listed twice");
      }
    }
  }

  /// This process's devices (as a manager lists them), numbered as jaxlib numbers them when every
  /// process has the same count: global id = process_index x devices.size() + position.
  [[nodiscard]] static device_list local(const std::vector<device>& devices, const process_context& p = {},
                                         const std::vector<std::string>& kinds = {}) {
    std::vector<process_device> out;
    for (std::size_t i = 0; i < devices.size(); ++i) {
      process_device d;
      d.local = devices[i];
      d.id = p.process_index * static_cast<int>(devices.size()) + static_cast<int>(i);
      d.process_index = d.host_id = p.process_index;
      d.local_hardware_id = devices[i].is_cuda() ? devices[i].ordinal() : -1;
      if (i < kinds.size()) d.device_kind = kinds[i];
      out.push_back(std::move(d));
    }
    return device_list(std::move(out), p.process_index, p.process_count);
  }

  /// The global list from every process's local list (e.g. after exchanging them with MPI): the
  /// devices by process index, global ids renumbered 0, 1, ... in that order, seen from the
  /// process of `lists[0]`. config_error for a process missing, duplicated or with a disagreeing
  /// process count.
  [[nodiscard]] static device_list gather(std::span<const device_list> lists) {
    if (lists.empty()) throw config_error("device_list::gather: no lists given; pass one list per process");
    const int count = lists.front().process_count();
    std::vector<const device_list*> by_process(static_cast<std::size_t>(count), nullptr);
    for (const auto& l : lists) {
      if (l.process_count() != count) {
        throw config_error("device_list::gather: lists disagree on the process count (" + std::to_string(count) +
                           " and " + std::to_string(l.process_count()) + ")");
      }
      auto& slot = by_process[static_cast<std::size_t>(l.current_process())];
      if (slot != nullptr) {
        throw config_error("device_list::gather: two lists come from process " + std::to_string(l.current_process()));
      }
      slot = &l;
    }
    std::vector<process_device> all;
    for (int p = 0; p < count; ++p) {
      const device_list* l = by_process[static_cast<std::size_t>(p)];
      if (l == nullptr) {
        throw config_error("device_list::gather: no list from process " + std::to_string(p) + " of " +
                           std::to_string(count) + "; pass one list per process");
      }
      for (const auto& d : l->addressable_devices()) {
        all.push_back(d);
        all.back().id = static_cast<int>(all.size()) - 1;
      }
    }
    return device_list(std::move(all), lists.front().current_process(), count);
  }
  [[nodiscard]] static device_list gather(std::initializer_list<device_list> lists) {
    return gather(std::span<const device_list>(lists.begin(), lists.size()));
  }

  /// Every device of the list (jaxlib: the global devices).
  [[nodiscard]] const std::vector<process_device>& devices() const noexcept { return devices_; }
  [[nodiscard]] const std::vector<process_device>& global_devices() const noexcept { return devices_; }
  /// The devices of the current process: the ones it can address (jaxlib: addressable_devices,
  /// local_devices).
  [[nodiscard]] std::vector<process_device> addressable_devices() const {
    std::vector<process_device> out;
    for (const auto& d : devices_) {
      if (d.process_index == current_) out.push_back(d);
    }
    return out;
  }
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
  [[nodiscard]] const process_device& by_id(int id) const {
    for (const auto& d : devices_) {
      if (d.id == id) return d;
    }
    throw config_error("device_list: no device has global id " + std::to_string(id) + " (the list has " +
                       std::to_string(devices_.size()) + " devices)");
  }

  friend bool operator==(const device_list&, const device_list&) = default;

 private:
  std::vector<process_device> devices_;
  int current_ = 0;
  int count_ = 1;
};

}  // namespace devicekit
