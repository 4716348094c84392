#pragma once
/// \file
/// The definitions behind memory/replay.hpp.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/core/device.hpp>
#include <devicekit/memory/context_headroom.hpp>
#include <devicekit/memory/detail/replay_upstream.hpp>
#include <devicekit/memory/detail/trace_reader.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/errors.hpp>
#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/replay.hpp>
#include <devicekit/memory/strategy.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace devicekit {

namespace detail {

/// The CUDA context's share of a replayed GPU of `device_bytes`: the default rule
/// (cuda_context_headroom_bytes) where the run used it, which scales with the device; otherwise the
/// run's own headroom, a strategy's choice.
inline std::uint64_t replay_headroom(const traced_pool& p, std::uint64_t device_bytes) {
  if (p.total_bytes != 0 && p.headroom_bytes == cuda_context_headroom_bytes(p.total_bytes)) {
    return cuda_context_headroom_bytes(device_bytes);
  }
  return p.headroom_bytes;
}

/// A pool's budget in the replay (see replay_options).
inline std::uint64_t replay_budget(const traced_pool& p, const replay_options& o, std::uint64_t device_bytes) {
  if (!p.gpu) return p.budget_bytes;
  if (!o.gpu_memory_bytes && !o.fraction) return p.budget_bytes;
  if (p.own_max_size || p.total_bytes == 0)
    return device_bytes != 0 ? std::min(p.budget_bytes, device_bytes) : p.budget_bytes;
  const double f = o.fraction.value_or(p.fraction);
  const memory_budget b = compute_budget(device_bytes, f, replay_headroom(p, device_bytes));
  return b.budget_bytes > p.collective_reserve_bytes ? b.budget_bytes - p.collective_reserve_bytes : 0;
}

inline void apply_pool_setting(pool_config& c, const std::string& name, const std::string& value) {
  auto number = [&]() -> double {
    try {
      std::size_t used = 0;
      const double v = std::stod(value, &used);
      if (used != value.size() || !std::isfinite(v)) throw std::invalid_argument(value);
      return v;
    } catch (const std::exception&) {
      throw config_error("--pool " + name + "=" + value + ": not a number");
    }
  };
  auto size = [&] { return static_cast<std::size_t>(parse_byte_size(value, "--pool " + name)); };
  if (name == "initial_size") {
    c.initial_size = size();
  } else if (name == "growth_factor") {
    c.growth_factor = number();
  } else if (name == "min_chunk_size") {
    c.min_chunk_size = size();
  } else if (name == "max_chunk_size") {
    c.max_chunk_size = size();
  } else if (name == "small_size_limit") {
    c.small_size_limit = size();
  } else if (name == "defrag_threshold") {
    c.defrag_threshold = number();
  } else if (name == "max_size") {
    c.max_size = size();
  } else if (name == "release_on_free") {
    if (value == "true" || value == "1" || value == "on") {
      c.release_on_free = true;
    } else if (value == "false" || value == "0" || value == "off") {
      c.release_on_free = false;
    } else {
      throw config_error("--pool release_on_free=" + value + ": say true or false");
    }
  } else {
    throw config_error("--pool " + name + "=" + value +
                       ": no such pool setting; the settings are initial_size, growth_factor, min_chunk_size, "
                       "max_chunk_size, small_size_limit, defrag_threshold, release_on_free and max_size");
  }
}

/// Where a pool's records go in a replay.
struct replay_pool {
  const traced_pool* traced = nullptr;
  std::unique_ptr<replay_pool_state> state;
  std::unique_ptr<device_memory> pool;
  std::unordered_map<std::uint64_t, std::pair<void*, std::uint64_t>> live;  ///< recorded address -> (ours, seq)
  std::unordered_map<std::uint64_t, std::uint32_t> live_location;           ///< recorded address -> location
  std::unordered_map<std::uint64_t, std::uint32_t> live_client;             ///< recorded address -> client
  replay_pool_result result;
  std::uint64_t last_peak_reserved = 0;
  replay_device* device = nullptr;  ///< the device the pool replays on (its outside records update it)
};

[[nodiscard]] inline int gpu_ordinal(const std::string& device_name) {
  const auto colon = device_name.find(':');
  if (colon == std::string::npos) return 0;
  try {
    return std::stoi(device_name.substr(colon + 1));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace detail

DEVICEKIT_DECL replay_result replay_memory_trace(const memory_trace& trace, const replay_options& options) {
  using namespace detail;
  if (options.fraction && !valid_fraction(*options.fraction)) {
    throw config_error("--strategy " + std::to_string(*options.fraction) +
                       ": a fraction of the device must be in (0, 1]; or name conservative, balanced or aggressive");
  }
  if (options.gpus && *options.gpus < 1) throw config_error("--gpus " + std::to_string(*options.gpus) + ": at least 1");
  if (options.gpu_memory_bytes && *options.gpu_memory_bytes == 0)
    throw config_error("--memory 0: a device needs memory");
  {
    pool_config probe;  // the settings are checked before anything is replayed
    for (const auto& [name, value] : options.pool_settings) apply_pool_setting(probe, name, value);
  }
  replay_result result;
  std::map<std::string, replay_device> devices;
  std::unordered_map<std::uint32_t, replay_pool> pools;
  auto make_pool = [&](const traced_pool& p) -> replay_pool* {
    if (p.gpu && options.gpus && gpu_ordinal(p.device) >= *options.gpus) return nullptr;
    replay_pool& rp = pools[p.id];
    rp.traced = &p;
    rp.state = std::make_unique<replay_pool_state>();
    const std::uint64_t device_bytes =
        p.gpu ? options.gpu_memory_bytes.value_or(p.total_bytes) : 0;  // host pools: their budget only
    replay_device& dev = devices[p.device];
    rp.device = &dev;
    if (p.gpu && device_bytes != 0) {
      // What the run's device had for its pools: its memory less the context (the simulated GPUs
      // charge exactly cuda_context_headroom_bytes, memory/context_headroom.hpp).
      const std::uint64_t context = replay_headroom(p, device_bytes);
      dev.capacity = device_bytes > context ? device_bytes - context : 1;
    }
    pool_config c;
    c.initial_size = p.initial_size;
    c.growth_factor = p.growth_factor;
    c.defrag_threshold = p.defrag_threshold;
    c.min_chunk_size = p.min_chunk_size;
    c.max_chunk_size = p.max_chunk_size;
    c.small_size_limit = p.small_size_limit;
    c.release_on_free = p.release_on_free;
    c.tracking = tracking_mode::off;
    c.on_leak = [](const std::string&) {};  // what the run left live is the run's business
    const std::uint64_t budget = replay_budget(p, options, device_bytes);
    c.max_size = budget;
    for (const auto& [name, value] : options.pool_settings) apply_pool_setting(c, name, value);
    if (c.initial_size > *c.max_size) c.initial_size = *c.max_size;
    rp.result.pool = p.id;
    rp.result.device = p.device;
    rp.result.budget_bytes = *c.max_size;
    rp.result.device_bytes = p.gpu ? device_bytes : 0;
    rp.result.recorded_peak_allocated_bytes = p.peak_allocated_bytes;
    rp.result.recorded_peak_reserved_bytes = p.peak_reserved_bytes;
    const device d = p.gpu ? device::cuda(gpu_ordinal(p.device)) : device::cpu();
    if (p.has_events) {
      rp.pool = std::make_unique<memory_pool<replay_upstream>>(replay_upstream(d, &dev, rp.state.get(), p.has_fence),
                                                               std::move(c));
    } else {
      rp.pool = std::make_unique<memory_pool<replay_host_upstream>>(replay_host_upstream(d, &dev), std::move(c));
    }
    return &rp;
  };
  // The sizes of each pool's live allocations, by recorded address, for a failure's list.
  std::unordered_map<std::uint32_t, std::unordered_map<std::uint64_t, std::uint64_t>> live_bytes;
  std::uint64_t position = 0;  // of the record being replayed
  auto fail = [&](replay_pool& rp, const trace_record& r, const std::string& message) {
    replay_failure f;
    f.pool = r.pool;
    f.device = rp.traced->device;
    f.seq = r.seq;
    f.position = position;
    f.bytes = r.bytes;
    f.location = trace.locations[r.location];
    f.client = trace.clients[r.client];
    f.message = message;
    for (const auto& [addr, ours] : rp.live) {
      const std::uint64_t bytes = live_bytes[r.pool][addr];
      f.live_bytes += bytes;
      ++f.live_count;
      f.largest_live.push_back(
          {bytes, ours.second, trace.locations[rp.live_location[addr]], trace.clients[rp.live_client[addr]]});
    }
    std::sort(f.largest_live.begin(), f.largest_live.end(),
              [](const auto& x, const auto& y) { return x.bytes != y.bytes ? x.bytes > y.bytes : x.seq < y.seq; });
    if (f.largest_live.size() > 10) f.largest_live.resize(10);
    result.failure = std::move(f);
    result.fits = false;
  };
  auto pool_of = [&](std::uint32_t id) -> replay_pool* {
    // Each pool is made when its first record comes, as the run made it before its first event.
    const auto it = pools.find(id);
    if (it != pools.end()) return it->second.pool ? &it->second : nullptr;
    replay_pool* rp = make_pool(*trace.pool(id));
    if (rp == nullptr) pools[id];  // left out (--gpus)
    return rp;
  };
  auto sample = [&](replay_pool& rp, std::uint64_t at) {
    const pool_stats s = rp.pool->stats();
    if (s.peak_reserved_bytes > rp.last_peak_reserved) {
      rp.last_peak_reserved = s.peak_reserved_bytes;
      rp.result.fragmentation_at_peak = s.fragmentation;
    }
    if (options.timeline) result.timeline.push_back({at, rp.result.pool, s.allocated_bytes, s.reserved_bytes});
  };
  for (; position < trace.records.size(); ++position) {
    const trace_record& r = trace.records[position];
    if (r.what == trace_record::kind::transfer) continue;  // copies and collectives move no memory of a pool
    replay_pool* rp = nullptr;
    try {
      rp = pool_of(r.pool);
    } catch (const out_of_memory& e) {
      replay_pool& left = pools[r.pool];
      left.traced = trace.pool(r.pool);
      replay_failure f;
      f.pool = r.pool;
      f.device = left.traced->device;
      f.message = std::string("the pool's preallocated start does not fit: ") + e.what();
      result.failure = std::move(f);
      result.fits = false;
      break;
    }
    if (rp == nullptr) continue;
    const auto stream = reinterpret_cast<native_stream_handle>(static_cast<std::uintptr_t>(r.stream));
    switch (r.what) {
      case trace_record::kind::live:
      case trace_record::kind::allocate:
      case trace_record::kind::out_of_memory: {
        void* p = nullptr;
        const std::size_t alignment = r.alignment != 0 ? r.alignment : detail::pool_granule;  // live: unknown
        try {
          p = r.ordered ? rp->pool->allocate_async(r.bytes, alignment, stream) : rp->pool->allocate(r.bytes, alignment);
        } catch (const out_of_memory& e) {
          if (r.what == trace_record::kind::out_of_memory) {
            ++rp->result.recorded_out_of_memory;
            ++rp->result.reproduced_out_of_memory;
            break;
          }
          fail(*rp, r, e.what());
          break;
        } catch (const invalid_request& e) {
          // An alignment past what the replaying pool's chunks can pad for (a smaller
          // min_chunk_size than the run's): this pool cannot serve the request either.
          fail(*rp, r, e.what());
          break;
        }
        if (r.what == trace_record::kind::out_of_memory) {
          // The run was refused this request and the replay is not: give it back at once, as the
          // run never had it.
          ++rp->result.recorded_out_of_memory;
          if (r.ordered) {
            rp->pool->deallocate_async(p, r.bytes, alignment, stream);
          } else {
            rp->pool->deallocate(p, r.bytes, alignment);
          }
          break;
        }
        rp->live[r.addr] = {p, r.seq};
        rp->live_location[r.addr] = r.location;
        rp->live_client[r.addr] = r.client;
        live_bytes[r.pool][r.addr] = r.bytes;
        ++rp->result.allocations;
        sample(*rp, position);
        break;
      }
      case trace_record::kind::deallocate: {
        const auto it = rp->live.find(r.addr);
        if (it == rp->live.end()) {
          throw trace_format_error("a free of address " + std::to_string(r.addr) + " that is not live in the replay",
                                   r.offset);
        }
        if (r.ordered) {
          rp->pool->deallocate_async(it->second.first, r.bytes, detail::pool_granule, stream);
        } else {
          rp->pool->deallocate(it->second.first, r.bytes);
        }
        rp->live.erase(it);
        rp->live_location.erase(r.addr);
        rp->live_client.erase(r.addr);
        live_bytes[r.pool].erase(r.addr);
        ++rp->result.frees;
        sample(*rp, position);
        break;
      }
      case trace_record::kind::ready: {
        std::uint64_t& upto = rp->state->ready_upto[r.stream];
        upto = std::max(upto, r.value);
        break;
      }
      case trace_record::kind::maintenance:
        switch (r.value) {
          case 1: (void)rp->pool->release_cached(); break;
          case 2: (void)rp->pool->trim(); break;
          case 3: (void)rp->pool->defragment(false); break;
          case 4: (void)rp->pool->defragment(true); break;
          case 5: rp->pool->release_stream(stream); break;
        }
        break;
      case trace_record::kind::outside: rp->device->outside = r.value; break;
      case trace_record::kind::transfer: break;  // skipped above
      case trace_record::kind::pool_end: {
        const pool_stats s = rp->pool->stats();
        rp->result.peak_allocated_bytes = s.peak_allocated_bytes;
        rp->result.peak_reserved_bytes = s.peak_reserved_bytes;
        result.pools.push_back(rp->result);
        rp->pool.reset();  // its memory goes back to the device, for pools made after it
        break;
      }
    }
    // After the record, as the run's writer counts it: an event the pool records during the next
    // record covers up to here (memory_trace_writer::cover_mark).
    if (r.seq != 0) rp->state->last_seq = r.seq;
    if (result.failure) break;
  }
  for (const traced_pool& p : trace.pools) {
    const auto it = pools.find(p.id);
    if (it == pools.end() || !it->second.pool) continue;
    const pool_stats s = it->second.pool->stats();
    it->second.result.peak_allocated_bytes = s.peak_allocated_bytes;
    it->second.result.peak_reserved_bytes = s.peak_reserved_bytes;
    result.pools.push_back(it->second.result);
  }
  std::sort(result.pools.begin(), result.pools.end(),
            [](const replay_pool_result& a, const replay_pool_result& b) { return a.pool < b.pool; });
  return result;
}

DEVICEKIT_DECL std::string replay_result_json(const replay_result& r) {
  using detail::append_json_string;
  std::string out = "{\"fits\":" + std::string(r.fits ? "true" : "false") + ",\"pools\":[";
  for (std::size_t i = 0; i < r.pools.size(); ++i) {
    const replay_pool_result& p = r.pools[i];
    if (i != 0) out += ',';
    out += "{\"pool\":" + std::to_string(p.pool) + ",\"device\":";
    append_json_string(out, p.device);
    out += ",\"budget_bytes\":" + std::to_string(p.budget_bytes) +
           ",\"device_bytes\":" + std::to_string(p.device_bytes) +
           ",\"peak_allocated_bytes\":" + std::to_string(p.peak_allocated_bytes) +
           ",\"peak_reserved_bytes\":" + std::to_string(p.peak_reserved_bytes) +
           ",\"fragmentation_at_peak\":" + std::to_string(p.fragmentation_at_peak) +
           ",\"allocations\":" + std::to_string(p.allocations) + ",\"frees\":" + std::to_string(p.frees);
    if (p.recorded_peak_allocated_bytes) {
      out += ",\"recorded_peak_allocated_bytes\":" + std::to_string(*p.recorded_peak_allocated_bytes) +
             ",\"recorded_peak_reserved_bytes\":" + std::to_string(*p.recorded_peak_reserved_bytes);
    }
    out += ",\"recorded_out_of_memory\":" + std::to_string(p.recorded_out_of_memory) +
           ",\"reproduced_out_of_memory\":" + std::to_string(p.reproduced_out_of_memory) + "}";
  }
  out += "]";
  if (r.failure) {
    const replay_failure& f = *r.failure;
    out += ",\"failure\":{\"pool\":" + std::to_string(f.pool) + ",\"device\":";
    append_json_string(out, f.device);
    out += ",\"seq\":" + std::to_string(f.seq) + ",\"bytes\":" + std::to_string(f.bytes) + ",\"at\":";
    append_json_string(out, f.location);
    out += ",\"client\":";
    append_json_string(out, f.client);
    out += ",\"live_bytes\":" + std::to_string(f.live_bytes) + ",\"live_count\":" + std::to_string(f.live_count) +
           ",\"largest_live\":[";
    for (std::size_t i = 0; i < f.largest_live.size(); ++i) {
      if (i != 0) out += ',';
      out += "{\"bytes\":" + std::to_string(f.largest_live[i].bytes) +
             ",\"seq\":" + std::to_string(f.largest_live[i].seq) + ",\"at\":";
      append_json_string(out, f.largest_live[i].location);
      out += ",\"client\":";
      append_json_string(out, f.largest_live[i].client);
      out += "}";
    }
    out += "],\"message\":";
    append_json_string(out, f.message);
    out += "}";
  }
  out += "}\n";
  return out;
}

DEVICEKIT_DECL std::string replay_timeline_json(const replay_result& r) {
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  bool first = true;
  auto name_of = [&](std::uint32_t pool) -> std::string {
    for (const auto& p : r.pools) {
      if (p.pool == pool) return p.device + " (pool " + std::to_string(pool) + ")";
    }
    return "pool " + std::to_string(pool);
  };
  for (const replay_sample& s : r.timeline) {
    if (!first) out += ',';
    first = false;
    out += "{\"name\":";
    detail::append_json_string(out, name_of(s.pool));
    out += ",\"ph\":\"C\",\"pid\":1,\"ts\":" + std::to_string(s.position) +
           ",\"args\":{\"allocated\":" + std::to_string(s.allocated_bytes) +
           ",\"reserved\":" + std::to_string(s.reserved_bytes) + "}}";
  }
  if (r.failure) {
    if (!first) out += ',';
    out += "{\"name\":";
    detail::append_json_string(
        out, "out of memory: " + std::to_string(r.failure->bytes) + " bytes at " + r.failure->location);
    out += ",\"ph\":\"i\",\"s\":\"g\",\"pid\":1,\"ts\":" + std::to_string(r.failure->position) + "}";
  }
  out += "]}\n";
  return out;
}

}  // namespace devicekit
