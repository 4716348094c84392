#pragma once
/// \file
/// The definitions behind memory/detail/allocation_registry.hpp: the snapshot of live allocations
/// and the leak report.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/allocation_registry.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace devicekit::detail {

DEVICEKIT_DECL std::vector<allocation_record> allocation_registry::snapshot() const {
  std::vector<allocation_record> out;
  out.reserve(live_.size());
  live_.for_each([&](const live_record& r) {
    const allocation_site site = site_of(r.key);
    out.push_back({reinterpret_cast<void*>(r.key), r.requested, site.alignment, site.where});
  });
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.ptr < y.ptr; });
  return out;
}

DEVICEKIT_DECL std::string allocation_registry::report(device dev, bool destroyed) const {
  if (live_.size() == 0) return {};
  const std::vector<allocation_record> live = snapshot();
  std::size_t total = 0;
  for (const auto& x : live) total += x.bytes;
  std::string s = "devicekit: memory pool on " + dev.str() + (destroyed ? " destroyed with " : " has ") +
                  std::to_string(live.size()) + " live allocation(s), " + human_bytes(total) +
                  (destroyed ? " leaked:\n" : ":\n");
  std::size_t shown = 0;
  for (const auto& x : live) {
    if (++shown > 100) {
      s += "  ... and " + std::to_string(live.size() - 100) + " more\n";
      break;
    }
    s += "  " + pointer_text(x.ptr) + "  " + std::to_string(x.bytes) + " bytes  allocated at " + where_text(x.where) +
         "\n";
  }
  if (!tracking_) s += "  (set DEVICEKIT_MEMORY_DEBUG=1 to see where each was allocated)\n";
  return s;
}

}  // namespace devicekit::detail
