#pragma once
/// \file
/// The definitions behind memory/detail/memory_trace.hpp.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/error.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/memory/detail/memory_trace.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>

namespace devicekit::detail {

// --- a pool's log, under the pool's lock ----------------------------------------------------------

DEVICEKIT_DECL void pool_trace_log::put(trace_op op, std::uint8_t flags, const void* body, std::size_t body_bytes,
                                        const char* tail, std::size_t tail_bytes, const char* tail2,
                                        std::size_t tail2_bytes) noexcept {
  if (!block_) return;  // joined without memory for a block: nothing is kept
  const std::size_t size = sizeof(trace_prefix) + body_bytes + tail_bytes + tail2_bytes;
  if (used_ + size > capacity) memory_trace_writer::instance().write(*this);
  const trace_prefix prefix{op, flags, static_cast<std::uint16_t>(size)};
  unsigned char* out = block_.get() + used_;
  std::memcpy(out, &prefix, sizeof prefix);
  std::memcpy(out + sizeof prefix, body, body_bytes);
  if (tail_bytes != 0) std::memcpy(out + sizeof prefix + body_bytes, tail, tail_bytes);
  if (tail2_bytes != 0) std::memcpy(out + sizeof prefix + body_bytes + tail_bytes, tail2, tail2_bytes);
  used_ += size;
  ++records_;
}

DEVICEKIT_DECL std::uint32_t pool_trace_log::location_id(const std::source_location& where) noexcept {
  if (!locations_) return 0;
  const location_key key{where.file_name(), where.function_name(), where.line()};
  location_table::cached& cached =
      locations_->cache[(reinterpret_cast<std::uintptr_t>(key.file) / 8 + key.line * 31u) % location_table::cache_size];
  if (cached.key == key) return cached.id;
  std::uint32_t id = 0;
  if (locations_->ids.size() >= trace_most_locations && locations_->ids.find(key) == locations_->ids.end()) return 0;
  try {
    const auto [it, fresh] = locations_->ids.try_emplace(key, static_cast<std::uint32_t>(locations_->ids.size() + 1));
    id = it->second;
    if (fresh) {
      // A record holds at most 64 KiB: names longer than a few KiB are cut (they are for people).
      const std::size_t file_bytes = std::min<std::size_t>(std::strlen(key.file), 4096);
      const std::size_t function_bytes = std::min<std::size_t>(std::strlen(key.function), 4096);
      const trace_location_body body{pool_, id, key.line, static_cast<std::uint32_t>(file_bytes)};
      put(trace_op::location, 0, &body, sizeof body, key.file, file_bytes, key.function, function_bytes);
    }
  } catch (const std::bad_alloc&) {
    return 0;  // recorded without its location
  }
  cached = {key, id};
  return id;
}

DEVICEKIT_DECL std::uint32_t pool_trace_log::client_id() noexcept {
  const std::string* client = trace_current_client;
  if (!locations_ || client == nullptr) return 0;
  auto& known = locations_->clients;
  for (std::size_t i = 0; i < known.size(); ++i) {
    if (known[i] == client) return static_cast<std::uint32_t>(i + 1);
  }
  if (known.size() >= trace_most_clients) return 0;
  try {
    known.push_back(client);
  } catch (const std::bad_alloc&) {
    return 0;  // recorded as devicekit's own
  }
  const auto id = static_cast<std::uint32_t>(known.size());
  const trace_client_body body{pool_, id};
  put(trace_op::client, 0, &body, sizeof body, client->data(), std::min<std::size_t>(client->size(), 256));
  return id;
}

DEVICEKIT_DECL void pool_trace_log::ready(const void* stream, std::uint64_t upto) noexcept {
  const trace_ready_body body{next_order(memory_trace_writer::instance(), 0), reinterpret_cast<std::uintptr_t>(stream),
                              upto};
  put(trace_op::ready, 0, &body, sizeof body);
}

DEVICEKIT_DECL void pool_trace_log::maintenance(trace_maintenance what, const void* stream) noexcept {
  const trace_maintenance_body body{next_order(memory_trace_writer::instance(), static_cast<std::uint32_t>(what)),
                                    reinterpret_cast<std::uintptr_t>(stream)};
  put(trace_op::maintenance, 0, &body, sizeof body);
}

DEVICEKIT_DECL void pool_trace_log::outside(std::uint64_t bytes) noexcept {
  const trace_outside_body body{next_order(memory_trace_writer::instance(), 0), bytes};
  put(trace_op::outside, 0, &body, sizeof body);
  outside_ = bytes;
}

DEVICEKIT_DECL void pool_trace_log::finish(std::uint64_t peak_allocated, std::uint64_t peak_reserved,
                                           std::uint64_t allocations, std::uint64_t ooms) noexcept {
  const trace_pool_end_body body{next_order(memory_trace_writer::instance(), 0), peak_allocated, peak_reserved,
                                 allocations, ooms};
  put(trace_op::pool_end, 0, &body, sizeof body);
  memory_trace_writer::instance().write(*this);
  epoch_ = 0;  // the pool's part is complete; a pool that goes on joins the next trace afresh
}

// --- the writer -----------------------------------------------------------------------------------

DEVICEKIT_DECL memory_trace_writer& memory_trace_writer::instance() {
  static auto* writer = new memory_trace_writer();  // never destroyed: see the declaration
  return *writer;
}

DEVICEKIT_DECL void memory_trace_writer::open(const std::string& path) {
  std::lock_guard lock(mutex_);
  if (file_ != nullptr) {
    throw config_error("start_memory_trace(\"" + path + "\"): a memory trace is being recorded already, to \"" + path_ +
                       "\"; stop_memory_trace() first (one trace per process)");
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    throw config_error("start_memory_trace: cannot write \"" + path + "\" (" + std::strerror(errno) +
                       "); name a file in a directory that exists and that this process may write");
  }
  unsigned char header[trace_header_bytes];
  std::memcpy(header, trace_magic, 8);
  std::memcpy(header + 8, &trace_version, 4);
  std::memcpy(header + 12, &trace_endian_mark, 4);
  write_failed_ = std::fwrite(header, 1, sizeof header, f) != sizeof header;
  file_ = f;
  path_ = path;
  records_ = 0;
  next_pool_ = 0;
  records_lost_ = false;
  epoch_.fetch_add(1, std::memory_order_relaxed);  // odd: open
  active_memory_trace.store(this, std::memory_order_release);
}

DEVICEKIT_DECL void memory_trace_writer::close() noexcept {
  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return;
  active_memory_trace.store(nullptr, std::memory_order_release);
  epoch_.fetch_add(1, std::memory_order_relaxed);  // even: every log still joined stops recording
  const trace_end_body body{records_ + 1};
  const trace_prefix prefix{trace_op::end, 0, static_cast<std::uint16_t>(sizeof prefix + sizeof body)};
  unsigned char out[sizeof prefix + sizeof body];
  std::memcpy(out, &prefix, sizeof prefix);
  std::memcpy(out + sizeof prefix, &body, sizeof body);
  if (std::fwrite(out, 1, sizeof out, file_) != sizeof out) write_failed_ = true;
  if (std::fclose(file_) != 0) write_failed_ = true;
  if (write_failed_) {
    std::fprintf(stderr, "devicekit: the memory trace \"%s\" could not be written in full (disk full?)\n",
                 path_.c_str());
  }
  if (records_lost_) {
    std::fprintf(stderr, "devicekit: the memory trace \"%s\" lacks a pool's records: no memory was left for its log\n",
                 path_.c_str());
  }
  file_ = nullptr;
  path_.clear();
}

DEVICEKIT_DECL std::string memory_trace_writer::path() const {
  std::lock_guard lock(mutex_);
  return path_;
}

DEVICEKIT_DECL std::uint32_t memory_trace_writer::thread_number() noexcept {
  return threads_.fetch_add(1, std::memory_order_relaxed) + 1;
}

DEVICEKIT_DECL bool memory_trace_writer::join(pool_trace_log& log, const trace_pool_description& d) noexcept {
  std::uint32_t pool = 0;
  std::uint64_t epoch = 0;
  {
    std::lock_guard lock(mutex_);
    if (file_ == nullptr) return false;
    pool = ++next_pool_;
    epoch = epoch_.load(std::memory_order_relaxed);
  }
  try {
    if (!log.block_) log.block_ = std::make_unique<unsigned char[]>(pool_trace_log::capacity);
    log.locations_ = std::make_unique<pool_trace_log::location_table>();
  } catch (const std::bad_alloc&) {
    std::lock_guard lock(mutex_);
    records_lost_ = true;
    return false;
  }
  log.epoch_ = epoch;
  log.pool_ = pool;
  log.seq_ = 0;
  log.records_ = 0;
  log.outside_ = 0;
  log.used_ = 0;
  const pool_config& c = *d.config;
  const memory_budget& b = *d.budget;
  std::uint32_t flags = 0;
  if (d.has_events) flags |= trace_pool_has_events;
  if (d.has_fence) flags |= trace_pool_has_fence;
  if (c.release_on_free) flags |= trace_pool_release_on_free;
  if (d.gpu) flags |= trace_pool_gpu;
  if (b.capped_to_available) flags |= trace_pool_capped;
  if (c.max_size && !c.budget) flags |= trace_pool_own_max_size;  // as budget_of reads them
  const trace_pool_body body{pool,
                             flags,
                             b.total_bytes,
                             b.headroom_bytes,
                             d.max_size,
                             b.collective_reserve_bytes,
                             c.initial_size,
                             c.min_chunk_size,
                             c.max_chunk_size,
                             c.small_size_limit,
                             b.fraction,
                             c.growth_factor,
                             c.defrag_threshold};
  const std::size_t name_bytes = std::min<std::size_t>(d.device_name.size(), 256);
  log.put(trace_op::pool, 0, &body, sizeof body, d.device_name.data(), name_bytes);
  return true;
}

DEVICEKIT_DECL void memory_trace_writer::write(pool_trace_log& log) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (file_ != nullptr && log.epoch_ == epoch_.load(std::memory_order_relaxed) && log.used_ != 0) {
      if (std::fwrite(log.block_.get(), 1, log.used_, file_) != log.used_) write_failed_ = true;
      records_ += log.records_;
      tick_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  log.used_ = 0;
  log.records_ = 0;
}

DEVICEKIT_DECL void memory_trace_writer::transfer(trace_transfer what, std::uint32_t from, std::uint32_t to,
                                                  std::uint64_t bytes, std::uint64_t count,
                                                  const void* stream) noexcept {
  std::lock_guard lock(transfers_mutex_);
  const std::uint64_t epoch = epoch_.load(std::memory_order_relaxed);
  if (epoch % 2 == 0) return;  // no trace open
  if (!transfers_.joined(epoch)) {
    try {
      if (!transfers_.block_) transfers_.block_ = std::make_unique<unsigned char[]>(pool_trace_log::capacity);
    } catch (const std::bad_alloc&) {
      return;  // not recorded: transfers are informational
    }
    transfers_.epoch_ = epoch;
    transfers_.pool_ = 0;
    transfers_.used_ = 0;
    transfers_.records_ = 0;
  }
  const trace_transfer_body body{transfers_.next_order(*this, static_cast<std::uint32_t>(what)),
                                 from,
                                 to,
                                 bytes,
                                 count,
                                 reinterpret_cast<std::uintptr_t>(stream)};
  transfers_.put(trace_op::transfer, 0, &body, sizeof body);
}

DEVICEKIT_DECL void memory_trace_writer::flush_transfers() noexcept {
  std::lock_guard lock(transfers_mutex_);
  write(transfers_);
}

DEVICEKIT_DECL void memory_trace_from_environment(void (*finish)()) noexcept {
  static const bool once = [finish] {
    try {
      const auto path = getenv_string("DEVICEKIT_TRACE");
      if (!path || path->empty()) return true;
      memory_trace_writer::instance().open(*path);
      std::atexit(finish);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "devicekit: DEVICEKIT_TRACE: %s; the run goes on without a trace\n", e.what());
    }
    return true;
  }();
  (void)once;
}

}  // namespace devicekit::detail
