#pragma once
/// \file
/// `allocation_registry`: every live allocation of a pool. The record (address, requested bytes,
/// owning block or slab) is always kept: it is how a free finds its block in one lookup, and how
/// double frees, foreign pointers and wrong sizes are caught before the pool is touched. With
/// tracking on, the allocating call's std::source_location and the alignment asked for are kept
/// beside it (the idea of PyTorch's memory snapshots with stack traces, at the cost of one
/// source_location). One snapshot function lists the live allocations, for live_allocations() and
/// for the leak report. Not locked: device_memory calls it under its own lock.
#include <devicekit/core/device.hpp>
#include <devicekit/memory/detail/pool_structures.hpp>
#include <devicekit/memory/errors.hpp>
#include <devicekit/memory/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <source_location>
#include <string>
#include <unordered_map>
#include <vector>

namespace devicekit {

/// One live allocation.
struct allocation_record {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::size_t alignment = 0;     ///< as requested; 0 unless tracking
  std::source_location where{};  ///< the allocating call; empty unless tracking
};

namespace detail {

[[nodiscard]] inline std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}
[[nodiscard]] inline std::string where_text(const std::source_location& w) {
  if (w.file_name() == nullptr || w.file_name()[0] == '\0') return "unknown (tracking off)";
  return std::string(w.file_name()) + ":" + std::to_string(w.line()) + " in " + w.function_name();
}

class allocation_registry {
 public:
  void set_tracking(bool on) noexcept { tracking_ = on; }
  [[nodiscard]] bool tracking() const noexcept { return tracking_; }

  /// Makes sure the next insert does not allocate (so that nothing throws once a block is taken).
  void reserve_one() {
    live_.reserve_one();
    if (tracking_) sites_.reserve(sites_.size() + 1);
  }
  void insert(const live_record& r, const std::source_location& where, std::size_t alignment) {
    live_.insert(r);
    if (tracking_) sites_.insert_or_assign(r.key, allocation_site{where, alignment});
  }
  [[nodiscard]] live_record* find(std::uintptr_t a) noexcept { return live_.find(a); }

  /// The record a `deallocate(p, bytes)` on `dev`'s pool frees, or invalid_free saying what is
  /// wrong - a double free (or an interior pointer: `inside_pool(p)` says `p` lies in the pool's
  /// memory), a foreign pointer, a wrong size - before anything has changed.
  template <class InsidePool>
  [[nodiscard]] live_record& find_for_free(void* p, std::size_t bytes, device dev, const InsidePool& inside_pool) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    live_record* rec = live_.find(a);
    if (rec != nullptr && rec->requested == bytes) return *rec;  // the hot path builds no text
    const std::string call =
        "deallocate(" + pointer_text(p) + ", " + std::to_string(bytes) + ") on " + dev.str() + ": ";
    if (rec != nullptr) {
      throw invalid_free(invalid_free::kind::wrong_size,
                         call + "wrong size: it was allocated with " + std::to_string(rec->requested) + " bytes at " +
                             where_text(site_of(a).where) +
                             "; pass the size given to allocate. The pool is unchanged.");
    }
    if (inside_pool(a)) {
      throw invalid_free(invalid_free::kind::double_free,
                         call +
                             "not a live allocation although it lies in this pool's memory: a double free, "
                             "or a pointer into the middle of an allocation. The pool is unchanged.");
    }
    throw invalid_free(invalid_free::kind::foreign_pointer,
                       call +
                           "this pointer was not allocated by this pool (it lies outside all of its memory): "
                           "free it with the allocator that made it. The pool is unchanged.");
  }
  [[nodiscard]] const live_record* find(std::uintptr_t a) const noexcept { return live_.find(a); }
  void erase(live_record* r) {
    const std::uintptr_t a = r->key;
    live_.erase(r);
    if (tracking_) sites_.erase(a);
  }

  [[nodiscard]] std::size_t size() const noexcept { return live_.size(); }
  template <class F>
  void for_each(F&& f) const {
    live_.for_each(f);
  }

  /// Where the allocation at `a` came from (empty unless tracking).
  [[nodiscard]] allocation_site site_of(std::uintptr_t a) const {
    const auto it = sites_.find(a);
    return it == sites_.end() ? allocation_site{} : it->second;
  }

  /// Every live allocation, by address.
  [[nodiscard]] std::vector<allocation_record> snapshot() const;

  /// Hands the leak report of a pool being destroyed to `on_leak` (or standard error when it is
  /// empty); nothing when no allocation is live or tracking is off. Never throws: it runs in a
  /// destructor.
  template <class OnLeak>
  void report_leaks(device dev, const OnLeak& on_leak) const noexcept {
    if (!tracking_ || live_.size() == 0) return;
    try {
      const std::string text = report(dev, true);
      if (on_leak) {
        on_leak(text);
      } else {
        std::fputs(text.c_str(), stderr);
      }
    } catch (...) {}
  }

  /// The live allocations as text (empty when there are none); `destroyed`: the pool is being
  /// destroyed, so they leaked.
  [[nodiscard]] std::string report(device dev, bool destroyed) const;

 private:
  live_map live_;
  std::unordered_map<std::uintptr_t, allocation_site> sites_;  ///< tracking only
  bool tracking_ = false;
};

}  // namespace detail
}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/allocation_registry.ipp>
#endif
