// devicekit-replay: replays a memory trace (DEVICEKIT_TRACE=<file>, memory/trace.hpp) against
// devicekit's own pool on a device of any size, with any strategy and pool setting, and says
// whether it fits: exit 0 when it does, 1 when it does not, 2 for a trace it cannot read or
// options it cannot use. docs/memory-trace.md shows it at work.
#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/memory/strategy.hpp>
#include <devicekit/memory/replay.hpp>
#include <devicekit/memory/trace.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

std::string human(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

double parse_strategy(const std::string& s) {
  if (s == "conservative") return dk::conservative::fraction();
  if (s == "balanced") return dk::balanced::fraction();
  if (s == "aggressive") return dk::aggressive::fraction();
  std::size_t used = 0;
  double f = 0;
  try {
    f = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || !(f > 0.0 && f <= 1.0)) {
    throw dk::config_error(
        "--strategy " + s +
        ": name conservative (0.60), balanced (0.75) or aggressive (0.90), or give a fraction in (0, 1]");
  }
  return f;
}

void print_result(const dk::replay_result& r, const dk::memory_trace& t) {
  for (const dk::replay_pool_result& p : r.pools) {
    std::cout << p.device << " (pool " << p.pool << "): peak allocated " << human(p.peak_allocated_bytes) << " ("
              << p.peak_allocated_bytes << " bytes), peak reserved " << human(p.peak_reserved_bytes) << " ("
              << p.peak_reserved_bytes << " bytes), fragmentation at that peak " << p.fragmentation_at_peak
              << "; budget " << human(p.budget_bytes);
    if (p.device_bytes != 0) std::cout << " of " << human(p.device_bytes);
    std::cout << "; " << p.allocations << " allocations, " << p.frees << " frees\n";
    if (p.recorded_peak_allocated_bytes) {
      std::cout << "  the run reported: peak allocated " << *p.recorded_peak_allocated_bytes << " bytes, peak reserved "
                << *p.recorded_peak_reserved_bytes << " bytes\n";
    }
    if (p.recorded_out_of_memory != 0) {
      std::cout << "  the run was refused " << p.recorded_out_of_memory << " request(s); the replay refused "
                << p.reproduced_out_of_memory << " of them\n";
    }
  }
  if (r.failure) {
    const dk::replay_failure& f = *r.failure;
    std::cout << "does not fit: " << f.device << " (pool " << f.pool << ") cannot allocate " << human(f.bytes) << " ("
              << f.bytes << " bytes), its request " << f.seq;
    if (!f.location.empty()) std::cout << ", at " << f.location;
    if (f.client != "devicekit") std::cout << ", for client " << f.client;
    std::cout << "\n  live then: " << human(f.live_bytes) << " in " << f.live_count << " allocations; the largest:\n";
    for (const auto& a : f.largest_live) {
      std::cout << "    " << human(a.bytes) << " (request " << a.seq << ")" << (a.location.empty() ? "" : " at ")
                << a.location << (a.client == "devicekit" ? "" : ", client " + a.client) << "\n";
    }
    std::cout << "  " << f.message << "\n";
  } else {
    std::cout << "fits: " << t.records.size() << " records replayed\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "devicekit-replay: replay a devicekit memory trace (DEVICEKIT_TRACE) on any device size, strategy and "
      "pool setting. Exit 0: it fits; 1: it does not; 2: the trace or the options cannot be used."};
  std::string path;
  std::string memory;
  std::string strategy;
  std::optional<int> gpus;
  std::vector<std::string> pool_settings;
  std::string perfetto;
  bool json = false;
  bool dump = false;
  bool partial = false;
  bool min_memory = false;
  app.add_option("trace", path, "the trace file")->required();
  app.add_option("--memory", memory, "each GPU's memory, e.g. 16GiB (default: what the run had)");
  app.add_option("--gpus", gpus, "replay the pools of GPUs 0..N-1 only (each replays its own recorded work)");
  app.add_option("--strategy", strategy, "conservative, balanced, aggressive or a fraction (default: the run's)");
  app.add_option("--pool", pool_settings,
                 "a pool setting, <name>=<value> (repeatable): initial_size, growth_factor, "
                 "min_chunk_size, max_chunk_size, small_size_limit, defrag_threshold, "
                 "release_on_free, max_size")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--json", json, "print the summary as JSON");
  app.add_option("--perfetto", perfetto, "write the replay's timeline (Chrome trace JSON, for ui.perfetto.dev)");
  app.add_flag("--min-memory", min_memory, "find the smallest GPU memory that fits (bisection over replays)");
  app.add_flag("--dump", dump, "print the trace as JSON lines and exit");
  app.add_flag("--partial", partial, "replay a trace without its end record (a run that stopped early)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "devicekit-replay: " << e.what() << "\n" << app.help();
    return 2;
  }
  try {
    const dk::memory_trace trace = dk::read_memory_trace(path, partial);
    if (dump) {
      std::cout << dk::memory_trace_json(trace);
      return 0;
    }
    dk::replay_options options;
    if (!memory.empty()) options.gpu_memory_bytes = dk::parse_byte_size(memory, "--memory");
    if (!strategy.empty()) options.fraction = parse_strategy(strategy);
    options.gpus = gpus;
    for (const std::string& s : pool_settings) {
      const auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0) {
        throw dk::config_error("--pool " + s + ": write <name>=<value>, for example --pool min_chunk_size=8MiB");
      }
      options.pool_settings.emplace_back(s.substr(0, eq), s.substr(eq + 1));
    }
    options.timeline = !perfetto.empty();
    if (min_memory) {
      // The smallest memory that fits, to 1 MiB: fits(hi) and !fits(lo) kept true throughout.
      std::uint64_t hi = 0;
      bool any_gpu = false;
      for (const dk::traced_pool& p : trace.pools) {
        any_gpu = any_gpu || p.gpu;
        if (p.gpu) hi = std::max(hi, p.total_bytes);
      }
      if (!any_gpu) throw dk::config_error("--min-memory: the trace has no GPU pool (its pools are the host's)");
      if (hi == 0) hi = std::uint64_t{1} << 30;
      auto fits = [&](std::uint64_t bytes) {
        dk::replay_options o = options;
        o.gpu_memory_bytes = bytes;
        o.timeline = false;
        return dk::replay_memory_trace(trace, o).fits;
      };
      while (!fits(hi)) {
        if (hi > (std::uint64_t{1} << 50)) {
          std::cout << "does not fit on any GPU up to " << human(hi) << "\n";
          return 1;
        }
        hi *= 2;
      }
      std::uint64_t lo = 0;
      const std::uint64_t step = std::uint64_t{1} << 20;
      while (hi - lo > step) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        (fits(mid) ? hi : lo) = mid;
      }
      options.gpu_memory_bytes = hi;
      std::cout << "smallest GPU memory that fits: " << human(hi) << " (" << hi << " bytes)\n";
    }
    const dk::replay_result result = dk::replay_memory_trace(trace, options);
    if (json) {
      std::cout << dk::replay_result_json(result);
    } else {
      print_result(result, trace);
    }
    if (!perfetto.empty()) {
      std::ofstream out(perfetto);
      out << dk::replay_timeline_json(result);
      if (!out) throw dk::config_error("--perfetto " + perfetto + ": cannot write the file");
    }
    return result.fits ? 0 : 1;
  } catch (const dk::trace_format_error& e) {
    std::cerr << "devicekit-replay: " << path << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "devicekit-replay: " << e.what() << "\n";
    return 2;
  }
}
