#pragma once
/// \file
/// The definitions behind core/device_list.hpp: reading the process context from the environment
/// and building, checking and gathering device lists. Inline in a header-only build; compiled once
/// under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/device_list.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>
#include <string>
#include <system_error>
#include <utility>

namespace devicekit {

DEVICEKIT_DECL process_context process_context::from_environment() {
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

DEVICEKIT_DECL process_context process_context::make(int index, int count, std::string source) {
  if (count < 1 || index < 0 || index >= count) {
    throw config_error("process index " + std::to_string(index) + " of " + std::to_string(count) +
                       " processes is invalid" + (source.empty() ? "" : " (from " + source + ")") +
                       ": the index must lie in [0, process count) and the count be at least 1");
  }
  return {index, count, std::move(source)};
}

DEVICEKIT_DECL int process_context::number(const char* name, std::string_view text) {
  int v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || v < 0) {
    throw config_error(std::string(name) + "='" + std::string(text) + "' is not a non-negative integer");
  }
  return v;
}

DEVICEKIT_DECL device_list::device_list(std::vector<process_device> devices, int current_process, int process_count)
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

DEVICEKIT_DECL device_list device_list::local(const std::vector<device>& devices, const process_context& p,
                                              const std::vector<std::string>& kinds) {
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

DEVICEKIT_DECL device_list device_list::gather(std::span<const device_list> lists) {
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

DEVICEKIT_DECL std::vector<process_device> device_list::addressable_devices() const {
  std::vector<process_device> out;
  for (const auto& d : devices_) {
    if (d.process_index == current_) out.push_back(d);
  }
  return out;
}

namespace detail {
/// The memory kinds a device of kind `kind` has, default first (device_list::memory_kinds).
[[nodiscard]] inline std::vector<memory_kind> memory_kinds_of(device_kind kind) {
  if (kind == device_kind::cuda) return {memory_kind::device, memory_kind::pinned_host, memory_kind::host};
  return {memory_kind::device, memory_kind::host};
}

/// "device, pinned_host, host"
[[nodiscard]] inline std::string memory_kind_names(const std::vector<memory_kind>& kinds) {
  std::string s;
  for (const memory_kind k : kinds) s += (s.empty() ? "" : ", ") + std::string(to_string(k));
  return s;
}

/// The devices `kinds` belong to, for messages: "cuda:0 (NVIDIA H100 80GB HBM3)", or the count.
[[nodiscard]] inline std::string addressable_text(const std::vector<process_device>& devices) {
  const process_device& first = devices.front();
  std::string s = devices.size() == 1
                      ? "device " + first.local.str()
                      : std::to_string(devices.size()) + " addressable devices (" + first.local.str() + ", ...)";
  if (!first.device_kind.empty()) s += " of kind '" + first.device_kind + "'";
  return s;
}
}  // namespace detail

DEVICEKIT_DECL std::vector<memory_kind> device_list::memory_kinds() const {
  std::vector<memory_kind> common;
  bool first = true;
  for (const auto& d : devices_) {
    if (d.process_index != current_) continue;
    const std::vector<memory_kind> mine = detail::memory_kinds_of(d.local.kind());
    if (first) {
      common = mine;
      first = false;
    } else {
      std::erase_if(common, [&](memory_kind k) { return std::find(mine.begin(), mine.end(), k) == mine.end(); });
    }
  }
  return common;
}

DEVICEKIT_DECL std::optional<memory_kind> device_list::default_memory_kind() const {
  for (const auto& d : devices_) {
    if (d.process_index == current_) return memory_kind::device;
  }
  return std::nullopt;
}

DEVICEKIT_DECL const std::string& device_list::device_kind() const {
  if (devices_.empty()) throw config_error("device_list::device_kind: the list has no devices, so no device kind");
  const process_device& first = devices_.front();
  for (const auto& d : devices_) {
    if (d.device_kind == first.device_kind) continue;
    const auto name = [](const process_device& p) {
      return p.device_kind.empty() ? std::string("an unknown kind") : "'" + p.device_kind + "'";
    };
    throw config_error("device_list::device_kind: the devices are of different kinds: " + first.str() + " is " +
                       name(first) + ", " + d.str() + " is " + name(d) +
                       "; ask each device (process_device::device_kind), or make a list of one kind");
  }
  return first.device_kind;
}

DEVICEKIT_DECL std::optional<memory_kind> check_and_canonicalize_memory_kind(std::optional<memory_kind> kind,
                                                                             const device_list& devices) {
  if (!kind) return devices.default_memory_kind();
  const std::vector<process_device> mine = devices.addressable_devices();
  if (mine.empty()) return kind;  // another process's devices: nothing here to check against
  const std::vector<memory_kind> kinds = devices.memory_kinds();
  if (std::find(kinds.begin(), kinds.end(), *kind) != kinds.end()) return kind;
  throw config_error("memory kind '" + std::string(to_string(*kind)) + "' is not addressable by " +
                     detail::addressable_text(mine) + ", which can address: " + detail::memory_kind_names(kinds));
}

DEVICEKIT_DECL std::optional<memory_kind> check_and_canonicalize_memory_kind(std::optional<std::string_view> kind,
                                                                             const device_list& devices) {
  if (!kind) return devices.default_memory_kind();
  memory_kind parsed{};
  try {
    parsed = parse_memory_kind(*kind);
  } catch (const config_error&) {
    const std::vector<process_device> mine = devices.addressable_devices();
    throw config_error("memory kind '" + std::string(*kind) + "' is not a memory kind" +
                       (mine.empty() ? "; valid kinds: device, pinned_host, host (or unpinned_host)"
                                     : "; " + detail::addressable_text(mine) +
                                           " can address: " + detail::memory_kind_names(devices.memory_kinds()) +
                                           " (host is also spelled unpinned_host)"));
  }
  return check_and_canonicalize_memory_kind(std::optional<memory_kind>(parsed), devices);
}

DEVICEKIT_DECL const process_device& device_list::by_id(int id) const {
  for (const auto& d : devices_) {
    if (d.id == id) return d;
  }
  throw config_error("device_list: no device has global id " + std::to_string(id) + " (the list has " +
                     std::to_string(devices_.size()) + " devices)");
}

}  // namespace devicekit
