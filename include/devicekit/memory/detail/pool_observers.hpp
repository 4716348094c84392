#pragma once
/// \file
/// `observer_list`: who watches a pool (memory_profiler, memory/profiler.hpp) and what they are
/// told. The pool knows only this small interface, so a profiler's state and figures live with
/// the profiler; PyTorch's allocator keeps its trace observers the same way, apart from the
/// allocator. Every call is made under the pool's lock, and the pool skips the list when it is
/// empty (one branch per allocation when nobody watches).
#include <cstddef>
#include <string>
#include <vector>

namespace devicekit::detail {

enum class pool_event : unsigned char {
  allocate,       ///< an allocation of `bytes` succeeded
  free,           ///< a free of `bytes` succeeded
  grew,           ///< the pool took a chunk from its upstream
  out_of_memory,  ///< out_of_memory is about to be thrown
  other,          ///< trim, clear, defragment
};

class pool_observer {
 public:
  /// `allocated` / `reserved`: the pool's figures after the event.
  virtual void on_event(pool_event e, std::size_t bytes, std::size_t allocated, std::size_t reserved) = 0;
  /// This observer starts (attached) or stops (detached) watching.
  virtual void on_attach(std::size_t allocated, std::size_t reserved) = 0;
  virtual void on_detach(std::size_t allocated, std::size_t reserved) = 0;
  /// Another observer named `name` starts or stops watching (scopes nest in a trace).
  virtual void on_scope(bool begin, const std::string& name) = 0;
  [[nodiscard]] virtual const std::string& observer_name() const noexcept = 0;

 protected:
  pool_observer() = default;
  pool_observer(const pool_observer&) = default;
  pool_observer& operator=(const pool_observer&) = default;
  ~pool_observer() = default;
};

class observer_list {
 public:
  [[nodiscard]] bool empty() const noexcept { return list_.empty(); }

  void notify(pool_event e, std::size_t bytes, std::size_t allocated, std::size_t reserved) {
    for (auto* o : list_) o->on_event(e, bytes, allocated, reserved);
  }

  void add(pool_observer* o, std::size_t allocated, std::size_t reserved) {
    o->on_attach(allocated, reserved);
    for (auto* other : list_) other->on_scope(true, o->observer_name());
    list_.push_back(o);
  }

  void remove(pool_observer* o, std::size_t allocated, std::size_t reserved);

 private:
  std::vector<pool_observer*> list_;
};

}  // namespace devicekit::detail

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/detail/pool_observers.ipp>
#endif
