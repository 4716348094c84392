#pragma once
/// \file
/// The definitions behind detect/start_environment.hpp. Inline in a header-only build; compiled
/// once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/detect/start_environment.hpp>

#include <cstdio>
#include <mutex>
#include <string_view>

extern "C" char** environ;  // POSIX: the process's environment

namespace devicekit {

namespace detail {

struct cuda_start_record {
  std::mutex mutex;
  std::optional<std::map<std::string, std::string>> variables;
};

inline cuda_start_record& cuda_start() {
  static cuda_start_record r;
  return r;
}

DEVICEKIT_DECL std::map<std::string, std::string> cuda_environment_now() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos || !entry.starts_with("CUDA_")) continue;
    vars.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return vars;
}

DEVICEKIT_DECL void note_cuda_start_environment(std::map<std::string, std::string> variables) {
  cuda_start_record& r = cuda_start();
  std::lock_guard lock(r.mutex);
  if (!r.variables) r.variables = std::move(variables);
}

DEVICEKIT_DECL void note_cuda_start_environment() { note_cuda_start_environment(cuda_environment_now()); }

DEVICEKIT_DECL std::optional<std::map<std::string, std::string>> cuda_start_environment() {
  cuda_start_record& r = cuda_start();
  std::lock_guard lock(r.mutex);
  return r.variables;
}

}  // namespace detail

DEVICEKIT_DECL environment_outcome apply_environment_before_detection(const settings& s) {
  environment_outcome out;
  const auto started = detail::cuda_start_environment();
  for (const std::string& name : s.apply_environment()) {
    const std::string& value = s.environment_variables().at(name);
    if (!started || !name.starts_with("CUDA_")) {
      out.applied.push_back(name);
      continue;
    }
    const auto it = started->find(name);
    if (it != started->end() && it->second == value) {
      out.applied.push_back(name);  // what the runtime started with: in effect
      continue;
    }
    const std::string was = it == started->end() ? "unset" : "'" + it->second + "'";
    out.too_late.push_back(name + "=" + value + " (the CUDA runtime started with " + name + " " + was + ")");
    std::fprintf(stderr,
                 "devicekit: warning: the settings set %s=%s after the CUDA runtime had started with it %s; the "
                 "runtime reads it once, so it keeps the old value. Set it in the environment before the program "
                 "starts, or in the settings of the first manager.\n",
                 name.c_str(), value.c_str(), was.c_str());
  }
  return out;
}

}  // namespace devicekit
