// NCCL across processes: the rendezvous of ncclCommInitRank, and the data of the operations of a
// clique whose ranks live in several processes (mpirun -np N, each rank on its own simulated
// device), exchanged through files.
//
// Why files: the simulator links no MPI and must stay independent of the launcher (mpirun, a
// script, a test that forks); what every process of one host shares without any setup is a file
// system. The unique id (ncclGetUniqueId: the creating pid, a counter and a random nonce) names a
// directory under /dev/shm (a tmpfs: memory, no disk), or under the temporary directory ($TMPDIR,
// else /tmp) where /dev/shm is missing. Processes on different hosts never meet (their waits time
// out). In that directory:
//
//   reg-<rank>            a rank's registration, "<pid> <device>" (ncclCommInitRank)
//   c<seq>-<from>to<to>   the bytes one rank's collective number <seq> sends another
//   p<from>to<to>-<n>     the n-th ncclSend from one rank to another
//   aborted               a rank called ncclCommAbort: the peers' waits end in ncclRemoteError
//   left-<rank>           a rank destroyed (or aborted) its communicator
//   .tmp-*                a file being written; renamed (or linked) once complete, so a reader
//                         never sees part of one
//
// Every data file has exactly one reader, which removes it once read: a collective leaves nothing
// behind. The last rank to leave removes the directory and whatever is left in it. When every
// rank turns out to be in this process, the clique stays in memory (nccl_comm.cpp) and the
// directory is removed as soon as the last rank has joined.
//
// Waits poll with short sleeps and hold no lock (the state's mutex is this process's; a peer
// process may take any time). Between polls they check this process's clique for an abort, the
// directory for a peer's abort mark, the runtime's teardown, and the deadline: remote_timeout()
// after the wait began, so that a peer that never comes ends in an error, not a hang.
// Locking: none held here; consume() takes the state's mutex briefly to read the abort flag.
#include "nccl.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace devicekit::cuda_sim::detail {
namespace {

std::atomic<std::uint64_t> next_temporary{0};

/// Sleeps between polls: 20 us at first, doubling up to 1 ms (a peer in the same collective
/// usually arrives within microseconds; one that lags must not cost a core).
struct backoff {
  std::chrono::microseconds step{20};
  void pause() {
    std::this_thread::sleep_for(step);
    step = std::min(step * 2, std::chrono::microseconds(1000));
  }
};

std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

bool write_all(int fd, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

/// Writes `bytes` of `data` into a fresh temporary file of `dir`; its path, or "" with `why`.
std::string write_temporary(const std::string& dir, const void* data, std::size_t bytes, std::string& why) {
  const std::string tmp = dir + "/.tmp-" + std::to_string(::getpid()) + "-" +
                          std::to_string(next_temporary.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    why = system_error("cannot create", tmp);
    return "";
  }
  const bool ok = write_all(fd, data, bytes);
  if (!ok) why = system_error("cannot write", tmp);
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return "";
  }
  return tmp;
}

/// The whole of file `path` into `out`; false if it does not exist (or cannot be read).
bool read_file(const std::string& path, std::vector<unsigned char>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  out.assign(ok ? static_cast<std::size_t>(st.st_size) : 0, 0);
  std::size_t at = 0;
  while (ok && at < out.size()) {
    const ssize_t n = ::read(fd, out.data() + at, out.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return ok;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

/// The names in `dir` (without "." and "..").
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

/// Removes everything in `dir`, then `dir` (what is already gone is no error: two ranks may
/// clean up at once).
void remove_all(const std::string& dir) {
  for (const auto& n : entries(dir)) (void)::unlink((dir + "/" + n).c_str());
  (void)::rmdir(dir.c_str());
}

}  // namespace

// Set by the configuration at the first call, before any NCCL call can wait: read without the
// mutex, as the waits that use it run without it.
std::chrono::milliseconds remote_timeout() { return global().nccl_timeout; }

std::string rendezvous_dir(const std::string& id) {
  std::string base = "/dev/shm";
  struct stat st {};
  if (::stat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::access(base.c_str(), W_OK | X_OK) != 0) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  // The simulator's own ids are file names already; anything else becomes one.
  const std::string prefix = "devicekit-sim-nccl-";
  std::string name = id.rfind(prefix, 0) == 0 ? id : prefix + "id-" + id;
  for (char& ch : name) {
    const bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
    if (!plain) ch = '_';
  }
  return base + "/" + name;
}

ncclResult_t join_rendezvous(const std::string& dir, int nranks, int rank, int device, bool& spans_processes,
                             std::string& why) {
  spans_processes = false;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    why = system_error("cannot create the rendezvous directory", dir);
    return ncclSystemError;
  }
  const std::string text = std::to_string(::getpid()) + " " + std::to_string(device) + "\n";
  const std::string tmp = write_temporary(dir, text.data(), text.size(), why);
  if (tmp.empty()) return ncclSystemError;
  // link(2), not rename(2): it fails where the name exists, which is a rank given twice.
  const std::string reg = dir + "/reg-" + std::to_string(rank);
  const bool linked = ::link(tmp.c_str(), reg.c_str()) == 0;
  const int link_errno = errno;
  ::unlink(tmp.c_str());
  if (!linked) {
    errno = link_errno;
    why = link_errno == EEXIST ? "rank " + std::to_string(rank) + " joined this unique id twice"
                               : system_error("cannot register in", dir);
    return link_errno == EEXIST ? ncclInvalidUsage : ncclSystemError;
  }
  // Every rank's registration: "<pid> <device>".
  std::vector<std::vector<unsigned char>> regs(static_cast<std::size_t>(nranks));
  std::vector<bool> have(static_cast<std::size_t>(nranks), false);
  const auto deadline = std::chrono::steady_clock::now() + remote_timeout();
  backoff sleep;
  for (;;) {
    int missing = 0;
    for (int r = 0; r < nranks; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (!have[i]) have[i] = read_file(dir + "/reg-" + std::to_string(r), regs[i]);
      if (!have[i]) ++missing;
    }
    if (missing == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      // Nobody may wait for this rank now: its registration goes, and the directory with the
      // last one (a rank that comes later waits alone, and goes the same way).
      ::unlink(reg.c_str());
      (void)::rmdir(dir.c_str());
      std::string list;
      for (int r = 0; r < nranks; ++r) {
        if (!have[static_cast<std::size_t>(r)]) list += (list.empty() ? "" : ", ") + std::to_string(r);
      }
      why = "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " waited " +
            std::to_string(remote_timeout().count()) + " ms (DEVICEKIT_SIM_NCCL_TIMEOUT_S) for rank(s) " + list +
            " to join (rendezvous " + dir +
            "): they never called ncclCommInitRank with this unique id, or their process died";
      return ncclRemoteError;
    }
    sleep.pause();
  }
  std::vector<long> pids(static_cast<std::size_t>(nranks));
  std::vector<int> devices(static_cast<std::size_t>(nranks));
  for (std::size_t i = 0; i < regs.size(); ++i) {
    const std::string s(regs[i].begin(), regs[i].end());
    if (std::sscanf(s.c_str(), "%ld %d", &pids[i], &devices[i]) != 2) {
      why = "unreadable registration of rank " + std::to_string(i) + " in " + dir;
      return ncclInternalError;
    }
    if (pids[i] != static_cast<long>(::getpid())) spans_processes = true;
  }
  // Across processes device d of one process and device d of another are the one simulated GPU
  // (the same PCI bus id), and NCCL refuses two ranks on one GPU ("Duplicate GPU detected").
  if (spans_processes) {
    for (std::size_t a = 0; a < devices.size(); ++a) {
      for (std::size_t b = a + 1; b < devices.size(); ++b) {
        if (devices[a] != devices[b]) continue;
        why = "Duplicate GPU detected: ranks " + std::to_string(a) + " and " + std::to_string(b) +
              " are both on simulated device " + std::to_string(devices[a]) +
              " (across processes a simulated device ordinal is one GPU, with one PCI bus id)";
        return ncclInvalidUsage;
      }
    }
  }
  return ncclSuccess;
}

void remove_rendezvous(const std::string& dir) { remove_all(dir); }

void leave_rendezvous(const std::string& dir, int rank, int nranks) {
  const std::string mark = dir + "/left-" + std::to_string(rank);
  const int fd = ::open(mark.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  const auto names = entries(dir);
  const auto left =
      std::count_if(names.begin(), names.end(), [](const std::string& n) { return n.rfind("left-", 0) == 0; });
  if (left >= nranks) remove_all(dir);
}

void mark_aborted(const std::string& dir, int rank) {
  std::string why;
  const std::string text = std::to_string(rank) + "\n";
  const std::string tmp = write_temporary(dir, text.data(), text.size(), why);
  if (!tmp.empty() && ::rename(tmp.c_str(), (dir + "/aborted").c_str()) != 0) ::unlink(tmp.c_str());
}

bool publish(const std::string& dir, const std::string& name, const void* data, std::size_t bytes, std::string& why) {
  const std::string tmp = write_temporary(dir, data, bytes, why);
  if (tmp.empty()) return false;
  const std::string path = dir + "/" + name;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    why = system_error("cannot publish", path);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

remote_wait consume(const clique& c, const std::string& dir, const std::string& name, std::vector<unsigned char>& out) {
  const std::string path = dir + "/" + name;
  const std::string abort_mark = dir + "/aborted";
  const auto deadline = std::chrono::steady_clock::now() + remote_timeout();
  backoff sleep;
  for (;;) {
    if (read_file(path, out)) {
      ::unlink(path.c_str());
      return remote_wait::ok;
    }
    {
      std::lock_guard lock(global().m);
      if (c.aborted) return remote_wait::aborted;
      if (global().stopping) return remote_wait::stopping;
    }
    if (exists(abort_mark)) return remote_wait::peer_aborted;
    if (std::chrono::steady_clock::now() > deadline) return remote_wait::timed_out;
    sleep.pause();
  }
}

std::string describe(remote_wait w, const char* api, int rank, int peer) {
  const std::string who = std::string(api) + " on rank " + std::to_string(rank) + ": ";
  switch (w) {
    case remote_wait::aborted:
      return who + "the communicator was aborted while it waited for rank " + std::to_string(peer);
    case remote_wait::peer_aborted:
      return who + "a peer process aborted the communicator before rank " + std::to_string(peer) + "'s data came";
    case remote_wait::timed_out:
      return who + "no data from rank " + std::to_string(peer) + " (in another process) within " +
             std::to_string(remote_timeout().count()) +
             " ms (DEVICEKIT_SIM_NCCL_TIMEOUT_S): its process died, or the ranks called different operations";
    case remote_wait::stopping: return who + "the runtime shut down while it waited for rank " + std::to_string(peer);
    default: return who + "no error";
  }
}

}  // namespace devicekit::cuda_sim::detail
