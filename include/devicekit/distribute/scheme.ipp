#pragma once
/// \file
/// The definitions behind distribute/scheme.hpp: checking a scheme's plan.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/distribute/scheme.hpp>

namespace devicekit {

DEVICEKIT_DECL void validate_plan(const distribution_plan& plan, const tree_summary& tree,
                                  std::span<const device> devices, std::string_view scheme_name) {
  for (std::size_t i = 0; i < plan.shares.size(); ++i) {
    const auto& s = plan.shares[i];
    bool known = false;
    for (const auto& d : devices) known = known || d == s.dev;
    const std::string where =
        "scheme '" + std::string(scheme_name) + "', share " + std::to_string(i) + " (" + s.dev.str() + "): ";
    if (!known) {
      std::string have;
      for (const auto& d : devices) have += (have.empty() ? "" : ", ") + d.str();
      throw config_error(where + "device is not one of the manager's devices (" + have + ")");
    }
    if (!s.whole && (s.begin > tree.batch || s.count > tree.batch - s.begin)) {
      throw config_error(where + "rows [" + std::to_string(s.begin) + ", " + std::to_string(s.begin + s.count) +
                         ") fall outside the batch of " + std::to_string(tree.batch) + " rows");
    }
  }
}

DEVICEKIT_DECL device_assignment distribution_plan::assignment() const {
  std::vector<device> devs;
  devs.reserve(shares.size());
  for (const auto& s : shares) devs.push_back(s.dev);
  return device_assignment(shares.size(), shares.empty() ? 0 : 1, std::move(devs));
}

}  // namespace devicekit
