#pragma once
/// \file
/// Which distribution engines this build has: NCCL (GPU collectives) and MPI (processes, host
/// collectives), with the versions of the headers devicekit was compiled against and of the
/// libraries the process runs with. The libraries are looked up with dlsym, so asking costs no
/// link dependency: a build that saw nccl.h but does not link libnccl says so.
#include <devicekit/core/config.hpp>

#if DEVICEKIT_HAS_NCCL
#  include <nccl.h>
#endif
// No <mpi.h> here: MPI's header is left to distribute/mpi.hpp, the one header that needs MPI's
// types, so that a report does not put MPI on every translation unit's include path. What is
// asked of the MPI library goes through dlsym below.

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace devicekit {

/// One engine in the report.
struct engine_info {
  std::string name;             ///< "nccl", "mpi"
  bool built = false;           ///< compiled in (DEVICEKIT_HAS_NCCL / DEVICEKIT_HAS_MPI)
  std::string header_version;   ///< the headers devicekit was compiled against; empty when not built
  std::string library_version;  ///< the library this process runs with; empty when not linked
  std::string status;           ///< one line: "2.27.3", "not built", "headers 2.27.3, library not linked"
};

namespace detail {
/// A function of an already loaded library (the program's own link), or nullptr.
template <class Fn>
[[nodiscard]] Fn loaded_symbol(const char* name) {
  void* p = ::dlsym(RTLD_DEFAULT, name);
  Fn fn = nullptr;
  std::memcpy(&fn, &p, sizeof p);  // POSIX: function pointers round-trip through void*
  return fn;
}

/// Sets `e.status` from what was found; `not_built_why` says why an engine is not built.
DEVICEKIT_DECL void finish_status(engine_info& e, const char* not_built_why);
}  // namespace detail

/// NCCL: NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH of nccl.h, and ncclGetVersion of the linked library
/// (its code is major*10000 + minor*100 + patch since NCCL 2.9, major*1000 + minor*100 + patch
/// before: nccl.h's NCCL_VERSION macro).
[[nodiscard]] inline engine_info query_nccl_engine() {
  engine_info e;
  e.name = "nccl";
#if DEVICEKIT_HAS_NCCL
  e.built = true;
  e.header_version = std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
  if (auto get = detail::loaded_symbol<int (*)(int*)>("ncclGetVersion")) {
    int v = 0;
    if (get(&v) == 0 && v > 0) {
      const int major = v >= 10000 ? v / 10000 : v / 1000;
      const int minor = v >= 10000 ? (v % 10000) / 100 : (v % 1000) / 100;
      const int patch = v % 100;
      e.library_version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    }
  }
#endif
  detail::finish_status(e, "no nccl.h, or no CUDA");
  return e;
}

/// MPI: the MPI standard version the library implements (MPI_Get_version) and the first line of
/// MPI_Get_library_version; the MPI standard ("Version Inquiries") allows both before MPI_Init.
/// Without mpi.h (see above) the header's MPI_VERSION is not known here; `header_version` says
/// "MPI" when the build saw mpi.h (DEVICEKIT_HAS_MPI).
[[nodiscard]] inline engine_info query_mpi_engine() {
  engine_info e;
  e.name = "mpi";
#if DEVICEKIT_HAS_MPI
  e.built = true;
  e.header_version = "MPI";
  auto get_version = detail::loaded_symbol<int (*)(int*, int*)>("MPI_Get_version");
  auto get_library = detail::loaded_symbol<int (*)(char*, int*)>("MPI_Get_library_version");
  int major = 0;
  int minor = 0;
  if (get_version != nullptr && get_library != nullptr && get_version(&major, &minor) == 0) {
    // MPI_MAX_LIBRARY_VERSION_STRING is 256 in Open MPI and 8192 in MPICH: the larger one fits all.
    std::vector<char> text(8192, '\0');
    int length = 0;
    if (get_library(text.data(), &length) == 0) {
      std::string line(text.data(), static_cast<std::size_t>(std::clamp(length, 0, static_cast<int>(text.size()))));
      if (auto nl = line.find_first_of(",\n"); nl != std::string::npos) line.resize(nl);
      while (!line.empty() && line.back() == '\0') line.pop_back();
      e.library_version = "MPI " + std::to_string(major) + "." + std::to_string(minor) + ", " + line;
    }
  }
#endif
  detail::finish_status(e, "mpi.h not visible: link devicekit::mpi");
  return e;
}

/// Both engines, in report order.
[[nodiscard]] inline std::vector<engine_info> query_engines() { return {query_nccl_engine(), query_mpi_engine()}; }

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/report/engines.ipp>
#endif
