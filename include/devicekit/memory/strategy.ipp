#pragma once
/// \file
/// The definitions behind memory/strategy.hpp: fractions, their ranges and budgets.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/strategy.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

namespace devicekit {

DEVICEKIT_DECL double runtime_fraction::validate(double f) {
  if (!std::isfinite(f) || f <= 0.0 || f > 1.0) {
    throw config_error("memory fraction " + std::to_string(f) +
                       " is invalid: it must lie in (0, 1], e.g. 0.75 for 75% of total device memory");
  }
  return f;
}

DEVICEKIT_DECL runtime_fraction_range::runtime_fraction_range(double start, double cap)
    : start_(start), cap_(runtime_fraction::validate(cap)) {
  if (!std::isfinite(start) || start < 0.0 || start > cap_) {
    throw config_error("memory fraction range start " + std::to_string(start) + " is invalid: it must lie in [0, " +
                       std::to_string(cap_) + "] (the cap), e.g. \"0.75-0.90\"");
  }
}

DEVICEKIT_DECL runtime_fraction_range runtime_fraction_range::parse(std::string_view text) {
  auto number = [&](std::string_view part) {
    // std::from_chars for double is in libstdc++ 11+; strtod would accept trailing junk.
    double v = 0.0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc{} || end != part.data() + part.size()) {
      throw config_error("cannot parse memory fraction range '" + std::string(text) +
                         "': expected a fraction like \"0.8\" or a start-cap pair like \"0.75-0.90\"");
    }
    return v;
  };
  const auto dash = text.find('-', 1);
  if (dash == std::string_view::npos) return {0.0, number(text)};
  return {number(text.substr(0, dash)), number(text.substr(dash + 1))};
}

DEVICEKIT_DECL memory_budget reserve_for_collectives(memory_budget b, std::uint64_t reserve_bytes,
                                                     std::string_view device_name) {
  if (reserve_bytes == 0) return b;
  if (reserve_bytes > b.total_bytes) {
    throw config_error("collective_memory_size " + std::to_string(reserve_bytes) + " bytes exceeds the " +
                       std::to_string(b.total_bytes) + " bytes of " + std::string(device_name) +
                       ": set a smaller reserve (settings::set_collective_memory_size or "
                       "DEVICEKIT_COLLECTIVE_MEMORY_SIZE, e.g. 256MiB), or 0 for none");
  }
  b.collective_reserve_bytes = reserve_bytes;
  b.budget_bytes = b.budget_bytes > reserve_bytes ? b.budget_bytes - reserve_bytes : 0;
  b.start_bytes = std::min(b.start_bytes, b.budget_bytes);
  return b;
}

DEVICEKIT_DECL memory_budget cap_to_available(memory_budget b, std::uint64_t available_bytes) {
  b.available_bytes = available_bytes;
  b.capped_to_available = b.budget_bytes > available_bytes;
  b.budget_bytes = std::min(b.budget_bytes, available_bytes);
  b.start_bytes = std::min(b.start_bytes, b.budget_bytes);
  return b;
}

DEVICEKIT_DECL memory_budget compute_budget(std::uint64_t total_bytes, double fraction, std::uint64_t headroom_bytes,
                                            double start_fraction) {
  memory_budget b;
  b.total_bytes = total_bytes;
  b.headroom_bytes = headroom_bytes;
  b.fraction = runtime_fraction::validate(fraction);
  b.start_fraction = runtime_fraction_range(start_fraction, fraction).start_fraction();
  auto less_headroom = [&](double f) -> std::uint64_t {
    const double bytes = std::floor(f * static_cast<double>(total_bytes));
    const double h = static_cast<double>(headroom_bytes);
    return bytes > h ? static_cast<std::uint64_t>(bytes - h) : 0;
  };
  b.budget_bytes = less_headroom(b.fraction);
  b.start_bytes = start_fraction > 0.0 ? std::min(b.budget_bytes, less_headroom(start_fraction)) : 0;
  return b;
}

}  // namespace devicekit
