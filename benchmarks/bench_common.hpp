#pragma once
// Shared by the benchmarks: command line (--quick, --json FILE), timing, and the entries of
// bench-summary.json. An entry's ratio is baseline time / devicekit time: bigger is better, and
// both sides are measured in the same run (absolute times on shared machines mean little).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace bench {

struct options {
  bool quick = false;
  std::string json_path;
  std::vector<std::string> rest;  ///< arguments the benchmark interprets itself
};

inline options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      o.quick = true;
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      o.json_path = argv[++i];
    } else {
      o.rest.emplace_back(argv[i]);
    }
  }
  return o;
}

struct entry {
  std::string name;
  std::string device;  ///< "cpu" or "cuda"
  std::string metric;
  double value = 0;  ///< devicekit's figure, in `unit`
  std::string unit;
  std::string baseline;
  double baseline_value = 0;
  double ratio = 0;  ///< baseline time / devicekit time (for non-time metrics: as documented)
  std::string note;
};

class report {
 public:
  void add(entry e) {
    std::printf("%-48s %-5s %12.4f %-6s vs %-28s %12.4f  ratio %8.3f  %s\n", e.name.c_str(), e.device.c_str(), e.value,
                e.unit.c_str(), e.baseline.c_str(), e.baseline_value, e.ratio, e.note.c_str());
    entries_.push_back(std::move(e));
  }
  void write(const std::string& path) const {
    if (path.empty()) return;
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries_) {
      out.push_back({{"name", e.name},
                     {"device", e.device},
                     {"metric", e.metric},
                     {"value", e.value},
                     {"unit", e.unit},
                     {"baseline", e.baseline},
                     {"baseline_value", e.baseline_value},
                     {"ratio", e.ratio},
                     {"note", e.note}});
    }
    std::ofstream(path) << out.dump(2) << "\n";
  }

 private:
  std::vector<entry> entries_;
};

using clock = std::chrono::steady_clock;

inline double seconds_since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

/// Median of `samples` timings (seconds) of `fn`.
template <class Fn>
double median_seconds(int samples, Fn&& fn) {
  std::vector<double> t;
  t.reserve(static_cast<std::size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    const auto t0 = clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Times every one of `fns` (each must finish its own work, synchronising where it queues any):
/// one untimed warm-up call each, then `samples` rounds that call each once in turn, so that
/// all sides see the same machine state. Returns the median seconds of each, in order.
template <class... Fns>
std::array<double, sizeof...(Fns)> interleaved_medians(int samples, Fns&&... fns) {
  (fns(), ...);
  std::array<std::vector<double>, sizeof...(Fns)> t;
  for (int i = 0; i < samples; ++i) {
    std::size_t k = 0;
    ((t[k++].push_back(median_seconds(1, fns))), ...);
  }
  std::array<double, sizeof...(Fns)> out{};
  for (std::size_t k = 0; k < t.size(); ++k) out[k] = median(t[k]);
  return out;
}

}  // namespace bench
