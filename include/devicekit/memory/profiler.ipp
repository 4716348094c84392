#pragma once
/// \file
/// The definitions behind memory/profiler.hpp: the profile's events and the Chrome trace it writes.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/profiler.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL void profile_state::on_event(pool_event e, std::size_t bytes, std::size_t allocated,
                                            std::size_t reserved) {
  switch (e) {
    case pool_event::grew: peak_reserved = std::max(peak_reserved, reserved); return;
    case pool_event::out_of_memory: ++ooms; return;
    case pool_event::allocate:
      ++allocations;
      bytes_allocated += bytes;
      break;
    case pool_event::free: ++frees; break;
    case pool_event::other: break;
  }
  peak_allocated = std::max(peak_allocated, allocated);
  peak_reserved = std::max(peak_reserved, reserved);
  if (record_timeline) samples.push_back({now_us(), allocated, reserved});
}

DEVICEKIT_DECL void profile_state::on_attach(std::size_t allocated, std::size_t reserved) {
  start_allocated = peak_allocated = allocated;
  peak_reserved = reserved;
  if (record_timeline) {
    markers.push_back({now_us(), true, name});
    samples.push_back({now_us(), allocated, reserved});
  }
}

DEVICEKIT_DECL void profile_state::on_detach(std::size_t allocated, std::size_t reserved) {
  if (record_timeline) {
    samples.push_back({now_us(), allocated, reserved});
    markers.push_back({now_us(), false, name});
  }
}

}  // namespace devicekit::detail

namespace devicekit {

DEVICEKIT_DECL void memory_profiler::start() {
  if (running_) return;
  // Attaching sets the start and peak figures to the pool's present ones: the earlier periods'
  // are carried here first, and the readers combine both under the pool's lock, so a reader
  // never sees the peak drop.
  read([&] {
    if (!resumed_) first_start_allocated_ = state_.start_allocated;
    resumed_ = true;
    carried_peak_allocated_ = std::max(carried_peak_allocated_, state_.peak_allocated);
    carried_peak_reserved_ = std::max(carried_peak_reserved_, state_.peak_reserved);
    return 0;
  });
  memory_->attach_observer(&state_);
  running_ = true;
}

DEVICEKIT_DECL std::size_t memory_profiler::peak_increase_bytes() const {
  return read([&] {
    const std::size_t peak = peak_allocated_locked();
    return peak - std::min(peak, resumed_ ? first_start_allocated_ : state_.start_allocated);
  });
}

DEVICEKIT_DECL void memory_profiler::write_chrome_trace(std::ostream& os) const {
  const auto [samples, markers] = read([&] { return std::make_pair(state_.samples, state_.markers); });
  const std::string dev = memory_->get_device().str();
  os << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  os << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"devicekit memory " << dev << "\"}},\n";
  os << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"profiler scopes\"}}";
  char ts[64];
  for (const auto& s : samples) {
    std::snprintf(ts, sizeof ts, "%.3f", s.t_us);
    os << ",\n{\"name\":\"memory " << dev << " (bytes)\",\"ph\":\"C\",\"pid\":1,\"ts\":" << ts
       << ",\"args\":{\"allocated\":" << s.allocated << ",\"reserved\":" << s.reserved << "}}";
  }
  // Slices must nest: a scope still open inside this profiler when it stopped ends there (this
  // profiler saw no more of it), and the end it reports later is dropped.
  std::vector<const std::string*> open;
  auto slice = [&](const std::string& name, bool begin, double t_us) {
    std::snprintf(ts, sizeof ts, "%.3f", t_us);
    os << ",\n{\"name\":\"" << escape(name) << "\",\"ph\":\"" << (begin ? 'B' : 'E')
       << "\",\"pid\":1,\"tid\":1,\"ts\":" << ts << "}";
  };
  for (const auto& m : markers) {
    if (m.begin) {
      open.push_back(&m.name);
      slice(m.name, true, m.t_us);
      continue;
    }
    const auto it = std::find_if(open.rbegin(), open.rend(), [&](const std::string* n) { return *n == m.name; });
    if (it == open.rend()) continue;
    const auto keep = static_cast<std::size_t>(open.rend() - it) - 1;
    while (open.size() > keep) {
      slice(*open.back(), false, m.t_us);
      open.pop_back();
    }
  }
  os << "\n]}\n";
}

DEVICEKIT_DECL void memory_profiler::write_chrome_trace(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw config_error("memory_profiler: cannot open '" + path + "' for writing");
  write_chrome_trace(f);
  if (!f) throw config_error("memory_profiler: writing '" + path + "' failed");
}

DEVICEKIT_DECL std::string memory_profiler::escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace devicekit
