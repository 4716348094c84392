#pragma once
/// \file
/// The definitions behind report/engines.hpp: the status line of an engine. The engine queries stay
/// in the header: they depend on DEVICEKIT_HAS_NCCL and DEVICEKIT_HAS_MPI, which may differ between
/// the library and a program. Inline in a header-only build; compiled once under
/// DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/report/engines.hpp>

#include <string>

namespace devicekit {

namespace detail {
DEVICEKIT_DECL void finish_status(engine_info& e, const char* not_built_why) {
  if (!e.built) {
    e.status = std::string("not built (") + not_built_why + ")";
  } else if (e.library_version.empty()) {
    e.status = "headers " + e.header_version + ", library not linked into this program";
  } else {
    e.status = e.library_version;
    if (e.library_version.rfind(e.header_version, 0) != 0) e.status += " (headers " + e.header_version + ")";
  }
}
}  // namespace detail

}  // namespace devicekit
