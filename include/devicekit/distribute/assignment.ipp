#pragma once
/// \file
/// The definitions behind distribute/assignment.hpp: the node-local rank, assign_device, and the
/// device_assignment table.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/distribute/assignment.hpp>

#include <charconv>
#include <cstdlib>
#include <limits>
#include <utility>

namespace devicekit {

DEVICEKIT_DECL std::optional<local_rank_info> local_rank_from_environment() {
  for (const auto name : local_rank_variables) {
    const std::string var(name);
    const char* v = std::getenv(var.c_str());
    if (v == nullptr || *v == '\0') continue;
    const std::string_view text(v);
    int rank = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
    if (ec != std::errc{} || end != text.data() + text.size() || rank < 0) {
      throw config_error(var + "='" + std::string(text) + "' is not a non-negative integer (a node-local rank)");
    }
    return local_rank_info{rank, var};
  }
  return std::nullopt;
}

DEVICEKIT_DECL device assign_device(std::span<const device> visible, const settings& config,
                                    std::optional<local_rank_info> local_rank) {
  if (visible.empty()) throw config_error("assign_device: no visible device to assign");
  if (config.has_device()) {
    const device wanted = config.get_device();
    for (const auto& d : visible) {
      if (d == wanted) return wanted;
    }
    std::string have;
    for (const auto& d : visible) have += (have.empty() ? "" : ", ") + d.str();
    throw config_error("assign_device: the configured device " + wanted.str() + " is not visible; visible: " + have);
  }
  const std::size_t r = local_rank ? static_cast<std::size_t>(local_rank->rank) : 0;
  return visible[r % visible.size()];
}

DEVICEKIT_DECL device_assignment::device_assignment(std::size_t replicas, std::size_t computations,
                                                    std::vector<device> devices)
    : replicas_(replicas), computations_(computations), devices_(std::move(devices)) {
  // The product wraps around for counts such as 2^32 x 2^32, which would pass for a table of no
  // devices whose at(0, 0) reads past its end.
  const bool overflows = computations_ != 0 && replicas_ > std::numeric_limits<std::size_t>::max() / computations_;
  if (overflows || devices_.size() != replicas_ * computations_) {
    throw config_error("device_assignment: " + std::to_string(replicas_) + " replicas x " +
                       std::to_string(computations_) + " computations need " +
                       (overflows ? std::string("more than SIZE_MAX") : std::to_string(replicas_ * computations_)) +
                       " devices, got " + std::to_string(devices_.size()));
  }
}

DEVICEKIT_DECL device_assignment device_assignment::create(const std::vector<std::vector<device>>& rows) {
  std::vector<device> flat;
  const std::size_t cols = rows.empty() ? 0 : rows.front().size();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].size() != cols) {
      throw config_error("device_assignment: replica " + std::to_string(r) + " has " + std::to_string(rows[r].size()) +
                         " computations, replica 0 has " + std::to_string(cols));
    }
    flat.insert(flat.end(), rows[r].begin(), rows[r].end());
  }
  return {rows.size(), cols, std::move(flat)};
}

DEVICEKIT_DECL device device_assignment::at(std::size_t replica, std::size_t computation) const {
  if (replica >= replicas_ || computation >= computations_) {
    throw config_error("device_assignment: (" + std::to_string(replica) + ", " + std::to_string(computation) +
                       ") is outside " + std::to_string(replicas_) + " x " + std::to_string(computations_));
  }
  return devices_[replica * computations_ + computation];
}

DEVICEKIT_DECL std::optional<std::pair<std::size_t, std::size_t>> device_assignment::find(device d) const {
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i] == d) return std::pair{i / computations_, i % computations_};
  }
  return std::nullopt;
}

DEVICEKIT_DECL std::string device_assignment::str() const {
  std::string s = std::to_string(replicas_) + (replicas_ == 1 ? " replica x " : " replicas x ") +
                  std::to_string(computations_) + (computations_ == 1 ? " computation: [" : " computations: [");
  for (std::size_t r = 0; r < replicas_; ++r) {
    s += r == 0 ? "[" : ", [";
    for (std::size_t c = 0; c < computations_; ++c) s += (c == 0 ? "" : ", ") + at(r, c).str();
    s += "]";
  }
  return s + "]";
}

DEVICEKIT_DECL std::string device_assignment::serialize() const {
  std::string s = std::to_string(replicas_) + "x" + std::to_string(computations_) + ":";
  for (std::size_t i = 0; i < devices_.size(); ++i) {  // appended: see format_platform_list
    if (i != 0) s += ',';
    s += devices_[i].str();
  }
  return s;
}

DEVICEKIT_DECL device_assignment device_assignment::parse(std::string_view text) {
  auto fail = [&](std::string_view why) -> device_assignment {
    throw config_error("cannot parse device assignment '" + std::string(text) + "': " + std::string(why) +
                       "; expected 'RxC:dev,dev,...' such as '2x1:cuda:0,cuda:1'");
  };
  const auto x = text.find('x');
  const auto colon = text.find(':');
  if (x == std::string_view::npos || colon == std::string_view::npos || x > colon) return fail("no 'RxC:' prefix");
  std::size_t r = 0, c = 0;
  const auto parse_size = [](std::string_view s, std::size_t& out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc{} && end == s.data() + s.size();
  };
  if (!parse_size(text.substr(0, x), r) || !parse_size(text.substr(x + 1, colon - x - 1), c)) {
    return fail("the counts are not numbers");
  }
  std::vector<device> devs;
  std::string_view rest = text.substr(colon + 1);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    devs.push_back(device::parse(rest.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return {r, c, std::move(devs)};
}

}  // namespace devicekit
