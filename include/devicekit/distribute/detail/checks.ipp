#pragma once
/// \file
/// The definitions behind distribute/detail/checks.hpp: the argument checks that need no backend.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/distribute/detail/checks.hpp>

#include <cstdio>

namespace devicekit::detail {

DEVICEKIT_DECL std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

DEVICEKIT_DECL structure_summary summarize_pair(std::span<const const_leaf_span> in, std::span<const leaf_span> out) {
  structure_summary s = summarize(in);
  const structure_summary t = summarize(out);
  structure_hasher h;
  h.add(s.hash);
  h.add(t.hash);
  s.hash = h.value();
  s.total_bytes += t.total_bytes;
  return s;
}

DEVICEKIT_DECL void check_scaled(std::string_view operation, std::span<const const_leaf_span> small,
                                 std::span<const const_leaf_span> big, int ranks, std::string_view small_name,
                                 std::string_view big_name) {
  if (small.size() != big.size()) {
    throw config_error(std::string(operation) + ": " + std::string(small_name) + " has " +
                       std::to_string(small.size()) + " leaves, " + std::string(big_name) + " has " +
                       std::to_string(big.size()));
  }
  for (std::size_t i = 0; i < small.size(); ++i) {
    if (small[i].type != big[i].type || big[i].count != small[i].count * static_cast<std::size_t>(ranks)) {
      throw config_error(std::string(operation) + ": leaf " + std::to_string(i) + " of " + std::string(big_name) +
                         " must hold " + std::to_string(ranks) + " x " + std::string(small_name) + " leaf (" +
                         std::to_string(small[i].count) + " " + std::string(to_string(small[i].type)) + "), it holds " +
                         std::to_string(big[i].count) + " " + std::string(to_string(big[i].type)));
    }
  }
}

}  // namespace devicekit::detail
