#pragma once
/// \file
/// The definitions behind memory/trace.hpp: recording's entry points, the reader and the JSON dump.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/memory_trace.hpp>
#include <devicekit/memory/detail/trace_reader.hpp>
#include <devicekit/memory/detail/trace_format.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/trace.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace devicekit {

DEVICEKIT_DECL void start_memory_trace(const std::string& path) { detail::memory_trace_writer::instance().open(path); }

DEVICEKIT_DECL void stop_memory_trace() noexcept { detail::finish_memory_trace(); }

DEVICEKIT_DECL bool memory_trace_recording() noexcept {
  return detail::active_memory_trace.load(std::memory_order_relaxed) != nullptr;
}

DEVICEKIT_DECL void record_transfer(transfer_kind what, device from, device to, std::uint64_t bytes,
                                    std::uint64_t count, const void* stream) noexcept {
  if (detail::active_memory_trace.load(std::memory_order_relaxed) == nullptr) return;
  auto code = [](device d) {
    return detail::trace_device_code(static_cast<std::uint32_t>(d.kind()), static_cast<std::uint32_t>(d.ordinal()));
  };
  detail::memory_trace_writer::instance().transfer(
      static_cast<detail::trace_transfer>(static_cast<std::uint32_t>(what) + 1), code(from), code(to), bytes, count,
      stream);
}

DEVICEKIT_DECL std::string memory_trace_path() { return detail::memory_trace_writer::instance().path(); }

DEVICEKIT_DECL const traced_pool* memory_trace::pool(std::uint32_t id) const noexcept {
  for (const traced_pool& p : pools) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

DEVICEKIT_DECL memory_trace parse_memory_trace(std::span<const unsigned char> bytes, bool allow_partial) {
  using namespace detail;
  memory_trace t;
  if (bytes.size() < trace_header_bytes || std::memcmp(bytes.data(), trace_magic, 8) != 0) {
    throw trace_format_error(
        "not a devicekit memory trace (it does not start with \"DKMTRACE\"); record one with "
        "DEVICEKIT_TRACE=<file> or devicekit::start_memory_trace",
        0);
  }
  std::uint32_t version = 0;
  std::uint32_t mark = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&mark, bytes.data() + 12, 4);
  if (mark != trace_endian_mark) {
    throw trace_format_error("written on a machine of the other byte order; replay it where it was recorded", 12);
  }
  if (version < trace_oldest_version || version > trace_version) {
    throw trace_format_error("format version " + std::to_string(version) + ", and this devicekit reads versions " +
                                 std::to_string(trace_oldest_version) + " to " + std::to_string(trace_version) +
                                 "; replay it with the devicekit that recorded it",
                             8);
  }
  t.version = version;
  t.locations.emplace_back();
  t.clients.emplace_back("devicekit");
  std::map<std::uint32_t, trace_reader_pool<trace_record>> pools;
  std::uint64_t records = 0;
  std::size_t at = trace_header_bytes;
  while (at < bytes.size()) {
    const std::uint64_t offset = at;
    auto corrupt = [&](const std::string& what) { return trace_format_error(what + ": the file is corrupt", offset); };
    if (bytes.size() - at < sizeof(trace_prefix)) {
      throw trace_format_error(
          "the file ends inside a record: it was cut short (a run that stopped while writing, "
          "or a partial copy)",
          offset);
    }
    trace_prefix prefix;
    std::memcpy(&prefix, bytes.data() + at, sizeof prefix);
    if (prefix.size < sizeof(trace_prefix)) {
      throw corrupt("a record of " + std::to_string(prefix.size) + " bytes, shorter than its prefix");
    }
    if (prefix.size > bytes.size() - at) {
      throw trace_format_error(
          "the file ends inside a record: it was cut short (a run that stopped while writing, "
          "or a partial copy)",
          offset);
    }
    const unsigned char* rec = bytes.data() + at;
    const std::size_t body_bytes = prefix.size - sizeof(trace_prefix);
    // Fixed bodies have their exact size; a pool's description and a location carry text after it.
    auto need = [&](std::size_t n, const char* what, bool text_after) {
      if (body_bytes < n || (!text_after && body_bytes != n)) {
        throw corrupt(std::string("a ") + what + " record of " + std::to_string(prefix.size) + " bytes");
      }
    };
    auto pool_of = [&](std::uint32_t id) -> trace_reader_pool<trace_record>& {
      const auto it = id == 0 ? pools.end() : pools.find(id);  // 0: the process's transfers, no pool
      if (it == pools.end())
        throw corrupt("a record of pool " + std::to_string(id) + ", which the trace never described");
      if (it->second.ended) throw corrupt("a record of pool " + std::to_string(id) + " after its end");
      return it->second;
    };
    auto ordered_record = [&](const trace_order& o, trace_record::kind k) {
      trace_record r;
      r.what = k;
      r.ordered = (prefix.flags & trace_ordered) != 0;
      r.pool = o.pool;
      r.thread = o.thread;
      r.tick = o.tick;
      r.thread_seq = o.thread_seq;
      r.offset = offset;
      return r;
    };
    ++records;
    switch (prefix.op) {
      case trace_op::pool: {
        need(sizeof(trace_pool_body), "pool", true);
        const auto b = read_body<trace_pool_body>(rec);
        if (b.pool == 0 || pools.count(b.pool) != 0)
          throw corrupt("pool " + std::to_string(b.pool) + " described twice or numbered 0");
        if (!plausible_size(b.total_bytes) || !plausible_size(b.budget_bytes) || !plausible_size(b.initial_size) ||
            !plausible_size(b.min_chunk_size) || !plausible_size(b.max_chunk_size) ||
            !plausible_size(b.small_size_limit) || !plausible_size(b.headroom_bytes) ||
            !plausible_size(b.collective_reserve_bytes) || !std::isfinite(b.fraction) || b.fraction < 0 ||
            b.fraction > 1 || !std::isfinite(b.growth_factor) || b.growth_factor < 1 || b.growth_factor > 1e6 ||
            !std::isfinite(b.defrag_threshold)) {
          throw corrupt("pool " + std::to_string(b.pool) + " is described with sizes or factors no pool has");
        }
        traced_pool p;
        p.id = b.pool;
        p.device.assign(reinterpret_cast<const char*>(rec) + sizeof(trace_prefix) + sizeof b, body_bytes - sizeof b);
        p.gpu = (b.flags & trace_pool_gpu) != 0;
        p.has_events = (b.flags & trace_pool_has_events) != 0;
        p.has_fence = (b.flags & trace_pool_has_fence) != 0;
        p.release_on_free = (b.flags & trace_pool_release_on_free) != 0;
        p.capped_to_available = (b.flags & trace_pool_capped) != 0;
        p.own_max_size = (b.flags & trace_pool_own_max_size) != 0;
        p.total_bytes = b.total_bytes;
        p.headroom_bytes = b.headroom_bytes;
        p.budget_bytes = b.budget_bytes;
        p.collective_reserve_bytes = b.collective_reserve_bytes;
        p.initial_size = b.initial_size;
        p.min_chunk_size = b.min_chunk_size;
        p.max_chunk_size = b.max_chunk_size;
        p.small_size_limit = b.small_size_limit;
        p.fraction = b.fraction;
        p.growth_factor = b.growth_factor;
        p.defrag_threshold = b.defrag_threshold;
        t.pools.push_back(std::move(p));
        pools[b.pool];
        break;
      }
      case trace_op::location: {
        need(sizeof(trace_location_body), "location", true);
        const auto b = read_body<trace_location_body>(rec);
        trace_reader_pool<trace_record>& p = pool_of(b.pool);
        if (b.id != p.locations + 1 || b.file_bytes > body_bytes - sizeof b) {
          throw corrupt("source location " + std::to_string(b.id) + " of pool " + std::to_string(b.pool) +
                        " out of place");
        }
        ++p.locations;
        const char* text = reinterpret_cast<const char*>(rec) + sizeof(trace_prefix) + sizeof b;
        std::string where(text, b.file_bytes);
        where += ":" + std::to_string(b.line);
        const std::size_t fn_bytes = body_bytes - sizeof b - b.file_bytes;
        if (fn_bytes != 0) {
          // GCC's names of template instances end in " [with T = ...]", often longer than the rest.
          const std::string_view fn(text + b.file_bytes, fn_bytes);
          where += " (" + std::string(fn.substr(0, fn.find(" [with "))) + ")";
        }
        p.where[b.id] = static_cast<std::uint32_t>(t.locations.size());
        t.locations.push_back(std::move(where));
        break;
      }
      case trace_op::client: {
        if (version < 3) throw corrupt("a client record in a version " + std::to_string(version) + " trace");
        need(sizeof(trace_client_body), "client", true);
        const auto b = read_body<trace_client_body>(rec);
        trace_reader_pool<trace_record>& p = pool_of(b.pool);
        if (b.id != p.clients.size() + 1 || b.id > trace_most_clients || body_bytes == sizeof b) {
          throw corrupt("client " + std::to_string(b.id) + " of pool " + std::to_string(b.pool) + " out of place");
        }
        p.clients.push_back(static_cast<std::uint32_t>(t.clients.size()));
        t.clients.emplace_back(reinterpret_cast<const char*>(rec) + sizeof(trace_prefix) + sizeof b,
                               body_bytes - sizeof b);
        break;
      }
      case trace_op::allocate:
      case trace_op::out_of_memory:
      case trace_op::live:
      case trace_op::deallocate: {
        const bool on_stream = (prefix.flags & trace_ordered) != 0;
        need(sizeof(trace_block_body) + (on_stream ? sizeof(std::uint64_t) : 0), "block", false);
        const auto b = read_body<trace_block_body>(rec);
        std::uint64_t stream = 0;
        if (on_stream) std::memcpy(&stream, rec + sizeof(trace_prefix) + sizeof b, sizeof stream);
        trace_reader_pool<trace_record>& p = pool_of(b.order.pool);
        const auto k = prefix.op == trace_op::live         ? trace_record::kind::live
                       : prefix.op == trace_op::allocate   ? trace_record::kind::allocate
                       : prefix.op == trace_op::deallocate ? trace_record::kind::deallocate
                                                           : trace_record::kind::out_of_memory;
        trace_record r = ordered_record(b.order, k);
        r.addr = b.addr;
        r.bytes = b.bytes;
        r.stream = stream;
        if (k != trace_record::kind::live) r.seq = ++p.last_seq;
        if (k == trace_record::kind::deallocate) {
          if (b.order.extra != 0 || (prefix.flags & ~trace_ordered) != 0)
            throw corrupt("a free with an alignment or a location");
          const auto it = p.live.find(b.addr);
          if (it == p.live.end()) {
            throw trace_format_error("a free of address " + std::to_string(b.addr) + " in pool " +
                                         std::to_string(b.order.pool) + ", which the trace never allocated there",
                                     offset);
          }
          if (it->second != b.bytes) {
            throw corrupt("a free of " + std::to_string(b.bytes) + " bytes of an allocation of " +
                          std::to_string(it->second));
          }
          p.live.erase(it);
          p.records.push_back(r);
          break;
        }
        const std::uint32_t location = version >= 3 ? b.order.extra & trace_most_locations : b.order.extra;
        const std::uint32_t client = version >= 3 ? b.order.extra >> trace_location_bits : 0;
        if (location != 0) {
          const auto it = p.where.find(location);
          if (it == p.where.end()) {
            throw corrupt("an allocation at source location " + std::to_string(location) +
                          ", which the trace never named");
          }
          r.location = it->second;
        }
        if (client != 0) {
          if (client > p.clients.size() || k == trace_record::kind::live) {
            throw corrupt("an allocation of client " + std::to_string(client) + ", which the trace never named");
          }
          r.client = p.clients[client - 1];
        }
        r.alignment = trace_alignment_of(prefix.flags);
        if (!plausible_size(b.bytes) || b.bytes == 0 || r.alignment >= (std::uint64_t{1} << 56)) {
          throw corrupt("an allocation of " + std::to_string(b.bytes) + " bytes aligned to " +
                        std::to_string(r.alignment));
        }
        if (k != trace_record::kind::out_of_memory && (b.addr == 0 || !p.live.emplace(b.addr, b.bytes).second)) {
          throw corrupt("an allocation at address " + std::to_string(b.addr) + ", which is live already (or 0)");
        }
        p.records.push_back(r);
        break;
      }
      case trace_op::ready: {
        need(sizeof(trace_ready_body), "ready", false);
        const auto b = read_body<trace_ready_body>(rec);
        trace_reader_pool<trace_record>& p = pool_of(b.order.pool);
        trace_record r = ordered_record(b.order, trace_record::kind::ready);
        r.stream = b.stream;
        r.value = b.upto;
        p.records.push_back(r);
        break;
      }
      case trace_op::maintenance: {
        need(sizeof(trace_maintenance_body), "maintenance", false);
        const auto b = read_body<trace_maintenance_body>(rec);
        trace_reader_pool<trace_record>& p = pool_of(b.order.pool);
        if (b.order.extra < 1 || b.order.extra > 5)
          throw corrupt("maintenance of kind " + std::to_string(b.order.extra));
        trace_record r = ordered_record(b.order, trace_record::kind::maintenance);
        r.stream = b.stream;
        r.value = b.order.extra;
        p.records.push_back(r);
        break;
      }
      case trace_op::outside: {
        if (version < 2) throw corrupt("an outside record in a version 1 trace");
        need(sizeof(trace_outside_body), "outside", false);
        const auto b = read_body<trace_outside_body>(rec);
        trace_reader_pool<trace_record>& p = pool_of(b.order.pool);
        trace_record r = ordered_record(b.order, trace_record::kind::outside);
        r.value = b.bytes;
        p.records.push_back(r);
        break;
      }
      case trace_op::transfer: {
        if (version < 3) throw corrupt("a transfer record in a version " + std::to_string(version) + " trace");
        need(sizeof(trace_transfer_body), "transfer", false);
        const auto b = read_body<trace_transfer_body>(rec);
        if (b.order.pool != 0) throw corrupt("a transfer record of pool " + std::to_string(b.order.pool));
        if (b.order.extra < 1 || b.order.extra > trace_transfer_last)
          throw corrupt("a transfer of kind " + std::to_string(b.order.extra));
        auto device_of = [&](std::uint32_t code) {
          const std::uint32_t kind = code >> 24;
          if (kind > static_cast<std::uint32_t>(device_kind::cuda))
            throw corrupt("a transfer of a device of kind " + std::to_string(kind));
          return device(static_cast<device_kind>(kind), static_cast<int>(code & 0xffffffu));
        };
        trace_record r = ordered_record(b.order, trace_record::kind::transfer);
        r.transfer = static_cast<transfer_kind>(b.order.extra - 1);
        r.from = device_of(b.from);
        r.to = device_of(b.to);
        r.bytes = b.bytes;
        r.value = b.count;
        r.stream = b.stream;
        pools[0].records.push_back(r);
        break;
      }
      case trace_op::pool_end: {
        need(sizeof(trace_pool_end_body), "pool end", false);
        const auto b = read_body<trace_pool_end_body>(rec);
        trace_reader_pool<trace_record>& p = pool_of(b.order.pool);
        auto& described =
            *std::find_if(t.pools.begin(), t.pools.end(), [&](const traced_pool& q) { return q.id == b.order.pool; });
        described.peak_allocated_bytes = b.peak_allocated_bytes;
        described.peak_reserved_bytes = b.peak_reserved_bytes;
        p.ended = true;
        p.records.push_back(ordered_record(b.order, trace_record::kind::pool_end));
        break;
      }
      case trace_op::end: {
        need(sizeof(trace_end_body), "end", false);
        const auto b = read_body<trace_end_body>(rec);
        if (b.records != records) {
          throw corrupt("the end record counts " + std::to_string(b.records) + " records where there are " +
                        std::to_string(records));
        }
        if (at + prefix.size != bytes.size()) {
          throw trace_format_error("bytes after the end record: two traces written to one file, or a corrupt file",
                                   offset + prefix.size);
        }
        t.complete = true;
        break;
      }
      default:
        throw trace_format_error("a record of unknown kind " + std::to_string(static_cast<int>(prefix.op)) +
                                     " (a newer format, or a corrupt file)",
                                 offset);
    }
    at += prefix.size;
  }
  if (!t.complete && !allow_partial) {
    throw trace_format_error(
        "the trace ends without its end record: the run stopped before the trace was closed "
        "(a crash, or a kill), or the file was cut; replay what there is with --partial",
        bytes.size());
  }
  t.records = merge_pool_records(pools);
  return t;
}

DEVICEKIT_DECL memory_trace read_memory_trace(const std::string& path, bool allow_partial) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error("cannot read the memory trace \"" + path + "\": no such file, or no permission");
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_memory_trace(bytes, allow_partial);
}

namespace detail {

inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
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
  out += '"';
}

inline const char* record_kind_name(trace_record::kind k) noexcept {
  switch (k) {
    case trace_record::kind::live: return "live";
    case trace_record::kind::allocate: return "allocate";
    case trace_record::kind::deallocate: return "free";
    case trace_record::kind::out_of_memory: return "out_of_memory";
    case trace_record::kind::ready: return "ready";
    case trace_record::kind::maintenance: return "maintenance";
    case trace_record::kind::pool_end: return "pool_end";
    case trace_record::kind::outside: return "outside";
    case trace_record::kind::transfer: return "transfer";
  }
  return "?";
}

inline const char* maintenance_name(std::uint64_t v) noexcept {
  switch (v) {
    case 1: return "release_cached";
    case 2: return "trim";
    case 3: return "defragment";
    case 4: return "defragment_forced";
    case 5: return "release_stream";
  }
  return "?";
}

}  // namespace detail

DEVICEKIT_DECL std::string memory_trace_json(const memory_trace& trace) {
  std::string out = "{\"format\":\"devicekit-memory-trace\",\"version\":" + std::to_string(trace.version) +
                    ",\"complete\":" + (trace.complete ? "true" : "false") + "}\n";
  for (const traced_pool& p : trace.pools) {
    out += "{\"op\":\"pool\",\"pool\":" + std::to_string(p.id) + ",\"device\":";
    detail::append_json_string(out, p.device);
    out += ",\"gpu\":" + std::string(p.gpu ? "true" : "false") + ",\"total_bytes\":" + std::to_string(p.total_bytes) +
           ",\"budget_bytes\":" + std::to_string(p.budget_bytes) + ",\"fraction\":" + std::to_string(p.fraction) +
           ",\"headroom_bytes\":" + std::to_string(p.headroom_bytes) +
           ",\"collective_reserve_bytes\":" + std::to_string(p.collective_reserve_bytes) +
           ",\"initial_size\":" + std::to_string(p.initial_size) +
           ",\"min_chunk_size\":" + std::to_string(p.min_chunk_size) +
           ",\"max_chunk_size\":" + std::to_string(p.max_chunk_size) +
           ",\"small_size_limit\":" + std::to_string(p.small_size_limit) +
           ",\"growth_factor\":" + std::to_string(p.growth_factor) +
           ",\"release_on_free\":" + (p.release_on_free ? "true" : "false") +
           ",\"stream_events\":" + (p.has_events ? "true" : "false") + "}\n";
  }
  for (const trace_record& r : trace.records) {
    out += "{\"op\":\"" + std::string(detail::record_kind_name(r.what)) + "\",\"pool\":" + std::to_string(r.pool);
    switch (r.what) {
      case trace_record::kind::live:
      case trace_record::kind::allocate:
      case trace_record::kind::out_of_memory:
        if (r.what != trace_record::kind::live) out += ",\"seq\":" + std::to_string(r.seq);
        out += ",\"addr\":" + std::to_string(r.addr) + ",\"bytes\":" + std::to_string(r.bytes) +
               ",\"alignment\":" + std::to_string(r.alignment);
        if (r.ordered) out += ",\"stream\":" + std::to_string(r.stream);
        if (r.location != 0) {
          out += ",\"at\":";
          detail::append_json_string(out, trace.locations[r.location]);
        }
        out += ",\"client\":";
        detail::append_json_string(out, trace.clients[r.client]);
        break;
      case trace_record::kind::deallocate:
        out += ",\"seq\":" + std::to_string(r.seq) + ",\"addr\":" + std::to_string(r.addr) +
               ",\"bytes\":" + std::to_string(r.bytes);
        if (r.ordered) out += ",\"stream\":" + std::to_string(r.stream);
        break;
      case trace_record::kind::ready:
        out += ",\"stream\":" + std::to_string(r.stream) + ",\"upto\":" + std::to_string(r.value);
        break;
      case trace_record::kind::maintenance:
        out += ",\"what\":\"" + std::string(detail::maintenance_name(r.value)) + "\"";
        if (r.value == 5) out += ",\"stream\":" + std::to_string(r.stream);
        break;
      case trace_record::kind::outside: out += ",\"bytes\":" + std::to_string(r.value); break;
      case trace_record::kind::transfer:
        out += ",\"kind\":\"" + std::string(to_string(r.transfer)) + "\",\"from\":\"" + r.from.str() + "\",\"to\":\"" +
               r.to.str() + "\",\"bytes\":" + std::to_string(r.bytes) + ",\"leaves\":" + std::to_string(r.value);
        if (r.stream != 0) out += ",\"stream\":" + std::to_string(r.stream);
        break;
      case trace_record::kind::pool_end:
        if (const traced_pool* p = trace.pool(r.pool); p != nullptr && p->peak_allocated_bytes) {
          out += ",\"peak_allocated_bytes\":" + std::to_string(*p->peak_allocated_bytes) +
                 ",\"peak_reserved_bytes\":" + std::to_string(*p->peak_reserved_bytes);
        }
        break;
    }
    out += "}\n";
  }
  return out;
}

}  // namespace devicekit
