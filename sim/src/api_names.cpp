// The refusal of a name the simulator does not count calls under (api_names.hpp), with the names
// it may have meant: a typo, another case, or a function that forwards to a counted one
// (cudaEventCreate, counted as cudaEventCreateWithFlags).
// Locking: none.
#include "api_names.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devicekit::cuda_sim::detail {

namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

/// Levenshtein distance between `a` and `b`, ignoring case.
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const std::size_t change = diagonal + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, change});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// Whether `a` begins `b`, ignoring case.
bool begins(std::string_view a, std::string_view b) {
  if (a.size() > b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::string unknown_api_problem(std::string_view api) {
  // Near: at most two edits away, or a name that `api` begins (a forwarding function such as
  // cudaMemset, counted as cudaMemsetAsync) when `api` is long enough to say which.
  constexpr std::size_t most_edits = 2;
  constexpr std::size_t shortest_prefix = 8;
  std::vector<std::pair<std::size_t, std::string_view>> near;
  for (std::string_view name : counted_apis) {
    const std::size_t d = distance(api, name);
    if (d <= most_edits) {
      near.emplace_back(d, name);
    } else if (api.size() >= shortest_prefix && begins(api, name)) {
      near.emplace_back(most_edits + 1, name);
    }
  }
  std::ranges::sort(near);
  std::string problem = quoted(api) + " is not a function whose calls the simulator counts";
  constexpr std::size_t most_shown = 4;
  for (std::size_t i = 0; i < near.size() && i < most_shown; ++i) {
    problem += (i == 0 ? " - did you mean " : " or ") + std::string(near[i].second);
  }
  if (!near.empty()) problem += "?";
  return problem + " (sim/README.md, \"Fault injection\", lists the functions it counts)";
}

}  // namespace devicekit::cuda_sim::detail
