#pragma once
/// \file
/// The definitions behind memory/detail/memory_trace.hpp.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/core/error.hpp>
#include <devicekit/core/settings.hpp>
#include <devicekit/memory/detail/memory_trace.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace devicekit::detail {

namespace {
constexpr std::size_t trace_buffer_bytes = std::size_t{1} << 20;
}

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
  file_ = f;
  path_ = path;
  buffer_.clear();
  buffer_.reserve(trace_buffer_bytes);
  seq_ = 0;
  records_ = 0;
  next_pool_ = 0;
  next_location_ = 0;
  write_failed_ = false;
  pools_.clear();
  locations_.clear();
  forget_caches();
  unsigned char header[trace_header_bytes];
  std::memcpy(header, trace_magic, 8);
  std::memcpy(header + 8, &trace_version, 4);
  std::memcpy(header + 12, &trace_endian_mark, 4);
  buffer_.insert(buffer_.end(), header, header + trace_header_bytes);
  active_memory_trace.store(this, std::memory_order_release);
}

DEVICEKIT_DECL void memory_trace_writer::close() noexcept {
  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return;
  active_memory_trace.store(nullptr, std::memory_order_release);
  const trace_end_body body{records_ + 1};
  put(trace_op::end, 0, &body, sizeof body);
  flush_locked();
  if (std::fclose(file_) != 0) write_failed_ = true;
  if (write_failed_) {
    std::fprintf(stderr, "devicekit: the memory trace \"%s\" could not be written in full (disk full?)\n", path_.c_str());
  }
  file_ = nullptr;
  path_.clear();
  pools_.clear();
  locations_.clear();
  forget_caches();
  buffer_.clear();
  buffer_.shrink_to_fit();
}

DEVICEKIT_DECL std::string memory_trace_writer::path() const {
  std::lock_guard lock(mutex_);
  return path_;
}

DEVICEKIT_DECL void memory_trace_writer::flush_locked() noexcept {
  if (buffer_.empty() || file_ == nullptr) return;
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) write_failed_ = true;
  buffer_.clear();
}

DEVICEKIT_DECL void memory_trace_writer::put(trace_op op, std::uint8_t flags, const void* body, std::size_t body_bytes,
                                             const char* tail, std::size_t tail_bytes, const char* tail2,
                                             std::size_t tail2_bytes) {
  const std::size_t size = sizeof(trace_prefix) + body_bytes + tail_bytes + tail2_bytes;
  const trace_prefix prefix{op, flags, static_cast<std::uint16_t>(size)};
  if (buffer_.size() + size > trace_buffer_bytes) flush_locked();
  const std::size_t at = buffer_.size();
  buffer_.resize(at + size);  // reserved at open: no reallocation
  unsigned char* out = buffer_.data() + at;
  std::memcpy(out, &prefix, sizeof prefix);
  std::memcpy(out + sizeof prefix, body, body_bytes);
  if (tail_bytes != 0) std::memcpy(out + sizeof prefix + body_bytes, tail, tail_bytes);
  if (tail2_bytes != 0) std::memcpy(out + sizeof prefix + body_bytes + tail_bytes, tail2, tail2_bytes);
  ++records_;
}

DEVICEKIT_DECL std::uint32_t memory_trace_writer::location_id(const std::source_location& where) {
  const location_key key{where.file_name(), where.function_name(), where.line()};
  cached_location& cached =
      location_cache_[(reinterpret_cast<std::uintptr_t>(key.file) / 8 + key.line * 31u) % location_cache_size];
  if (cached.key == key) return cached.id;
  const auto [it, fresh] = locations_.try_emplace(key, 0u);
  if (fresh) {
    it->second = ++next_location_;
    // A record holds at most 64 KiB: names longer than a few KiB are cut (they are for people).
    const std::size_t file_bytes = std::min<std::size_t>(std::strlen(key.file), 4096);
    const std::size_t function_bytes = std::min<std::size_t>(std::strlen(key.function), 4096);
    const trace_location_body body{it->second, key.line, static_cast<std::uint32_t>(file_bytes), 0};
    put(trace_op::location, 0, &body, sizeof body, key.file, file_bytes, key.function, function_bytes);
  }
  cached = {key, it->second};
  return it->second;
}

DEVICEKIT_DECL void memory_trace_writer::forget_caches() noexcept {
  for (cached_location& c : location_cache_) c = {};
  last_pool_ = nullptr;
  last_entry_ = nullptr;
}

DEVICEKIT_DECL bool memory_trace_writer::add_pool(const void* pool, const trace_pool_description& d) {
  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return false;
  pool_entry& e = pools_[pool];
  if (e.id != 0) return false;
  forget_caches();  // the map may have rehashed: the cached entry may have moved
  e.id = ++next_pool_;
  const pool_config& c = *d.config;
  const memory_budget& b = *d.budget;
  std::uint32_t flags = 0;
  if (d.has_events) flags |= trace_pool_has_events;
  if (d.has_fence) flags |= trace_pool_has_fence;
  if (c.release_on_free) flags |= trace_pool_release_on_free;
  if (d.gpu) flags |= trace_pool_gpu;
  if (b.capped_to_available) flags |= trace_pool_capped;
  if (c.max_size && !c.budget) flags |= trace_pool_own_max_size;  // as budget_of reads them
  const trace_pool_body body{e.id,
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
  put(trace_op::pool, 0, &body, sizeof body, d.device_name.data(), name_bytes);
  return true;
}

DEVICEKIT_DECL void memory_trace_writer::live(const void* pool, std::uintptr_t addr, std::size_t bytes,
                                              std::size_t alignment, const std::source_location* where) {
  std::lock_guard lock(mutex_);
  pool_entry* e = find_pool(pool);
  if (file_ == nullptr || e == nullptr) return;
  const std::uint32_t loc = where != nullptr ? location_id(*where) : 0;
  const trace_alloc_body body{e->id, loc, 0, addr, bytes, alignment, 0};
  put(trace_op::live, 0, &body, sizeof body);
}

DEVICEKIT_DECL bool memory_trace_writer::allocate(const void* pool, trace_op op, std::uintptr_t addr,
                                                  std::size_t bytes, std::size_t alignment, bool ordered,
                                                  const void* stream, const std::source_location& where) {
  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return true;  // closed meanwhile: nothing to register
  pool_entry* e = find_pool(pool);
  if (e == nullptr) return false;
  const std::uint32_t loc = location_id(where);
  const trace_alloc_body body{e->id, loc, ++seq_, addr, bytes, alignment, reinterpret_cast<std::uintptr_t>(stream)};
  put(op, ordered ? trace_ordered : 0, &body, sizeof body);
  e->last_seq = seq_;
  return true;
}

DEVICEKIT_DECL bool memory_trace_writer::deallocate(const void* pool, std::uintptr_t addr, std::size_t bytes,
                                                    bool ordered, const void* stream) {
  std::lock_guard lock(mutex_);
  if (file_ == nullptr) return true;
  pool_entry* e = find_pool(pool);
  if (e == nullptr) return false;
  const trace_free_body body{e->id, 0, ++seq_, addr, bytes, reinterpret_cast<std::uintptr_t>(stream)};
  put(trace_op::deallocate, ordered ? trace_ordered : 0, &body, sizeof body);
  e->last_seq = seq_;
  return true;
}

DEVICEKIT_DECL std::uint64_t memory_trace_writer::cover_mark(const void* pool) {
  std::lock_guard lock(mutex_);
  const auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.last_seq + 1;
}

DEVICEKIT_DECL void memory_trace_writer::ready(const void* pool, const void* stream, std::uint64_t upto) {
  std::lock_guard lock(mutex_);
  const auto it = pools_.find(pool);
  if (file_ == nullptr || it == pools_.end()) return;
  const trace_ready_body body{it->second.id, 0, reinterpret_cast<std::uintptr_t>(stream), upto};
  put(trace_op::ready, 0, &body, sizeof body);
}

DEVICEKIT_DECL void memory_trace_writer::maintenance(const void* pool, trace_maintenance what, const void* stream) {
  std::lock_guard lock(mutex_);
  const auto it = pools_.find(pool);
  if (file_ == nullptr || it == pools_.end()) return;
  const trace_maintenance_body body{it->second.id, static_cast<std::uint32_t>(what),
                                    reinterpret_cast<std::uintptr_t>(stream)};
  put(trace_op::maintenance, 0, &body, sizeof body);
}

DEVICEKIT_DECL void memory_trace_writer::pool_end(const void* pool, std::uint64_t peak_allocated,
                                                  std::uint64_t peak_reserved, std::uint64_t allocations,
                                                  std::uint64_t ooms) {
  std::lock_guard lock(mutex_);
  const auto it = pools_.find(pool);
  if (file_ == nullptr || it == pools_.end()) return;
  const trace_pool_end_body body{it->second.id, 0, peak_allocated, peak_reserved, allocations, ooms};
  put(trace_op::pool_end, 0, &body, sizeof body);
  pools_.erase(it);  // another pool may be made at the same address
  forget_caches();
  flush_locked();
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
