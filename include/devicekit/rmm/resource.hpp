#pragma once
/// \file
/// devicekit and RMM, both ways (the optional component `devicekit::rmm`; needs RMM 26.x, whose
/// resources are CCCL's `cuda::mr` resources, on the include path).
///
///   devicekit::rmm_resource   a devicekit pool as an RMM device memory resource: give it to
///                             `rmm::mr::set_per_device_resource` (or set_current_device_resource)
///                             and `rmm::device_buffer`, cuDF, cuML and the rest allocate from the
///                             pool, under its budget and in its statistics
///   devicekit::rmm_upstream   an RMM resource as the upstream of a devicekit pool:
///                             `memory_pool<rmm_upstream>` takes its chunks from RMM
///
///   auto& gpu = dm.memory(devicekit::device::cuda(0));                 // the manager's pool
///   rmm::mr::set_per_device_resource(rmm::cuda_device_id{0}, devicekit::rmm_resource{gpu});
///   rmm::device_buffer b(1 << 20, stream);                             // from gpu, counted there
///
/// A request past the pool's budget throws `rmm::out_of_memory` (what RMM's callers catch, e.g. to
/// spill), whose message is devicekit's: the budget, what is in use, and what to do. RMM's
/// interface frees with `noexcept`, so a free the pool refuses (a pointer it did not hand out, a
/// wrong size) is not thrown: it leaves the pool unchanged, is written to stderr once per
/// resource, and is counted (`refused_frees()`, `last_refusal()`). A resource that borrows a
/// pool (constructed from a reference) outlives it safely: once the pool is destroyed, an
/// allocation throws `rmm::bad_alloc` saying so, and a free is refused as above.
///
/// devicekit's own headers do not include this one: include it where RMM is (see
/// docs/rmm.md for the CMake lines).
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/core/stream.hpp>
#include <devicekit/memory/client_memory.hpp>
#include <devicekit/memory/cuda_resources.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/errors.hpp>

#include <rmm/error.hpp>
#include <rmm/resource_ref.hpp>

#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#if !DEVICEKIT_HAS_CUDA
#  error "devicekit/rmm/resource.hpp needs CUDA (DEVICEKIT_HAS_CUDA): RMM's resources hand out device memory"
#endif

namespace devicekit {

/// A devicekit pool seen by RMM: a copyable handle that models `cuda::mr::resource_with<
/// cuda::mr::device_accessible>`. Copies share the pool and the count of refused frees, and
/// compare equal (memory from one can be freed through another).
class rmm_resource {
 public:
  /// Shares the ownership of `pool`: the pool lives as long as RMM holds a copy.
  explicit rmm_resource(std::shared_ptr<device_memory> pool) : rmm_resource(checked(pool), std::move(pool)) {}
  /// Borrows `pool` (a manager's dm.memory(dev), default_memory(dev)): the pool need not outlive
  /// this handle; once it is gone, calls are refused (above).
  explicit rmm_resource(device_memory& pool) : rmm_resource(pool, std::shared_ptr<device_memory>{}) {}

  [[nodiscard]] void* allocate(::cuda::stream_ref s, std::size_t bytes, std::size_t alignment = 256) {
    return translate([&] { return live().allocate(bytes, alignment, s.get()); }, bytes);
  }
  void deallocate(::cuda::stream_ref s, void* p, std::size_t bytes, std::size_t alignment = 256) noexcept {
    refuse_quietly([&] { live().deallocate(p, bytes, alignment, s.get()); });
  }
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = 256) {
    return translate([&] { return live().allocate(bytes, alignment); }, bytes);
  }
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment = 256) noexcept {
    refuse_quietly([&] { live().deallocate(p, bytes, alignment); });
  }

  /// The pool; throws rmm::bad_alloc once a borrowed pool is gone.
  [[nodiscard]] device_memory& pool() const { return live().pool(); }
  /// Whether the pool still exists.
  [[nodiscard]] bool pool_alive() const noexcept { return !state_->alive.expired(); }
  /// Frees the pool refused (nothing changed by any of them), over every copy of this handle.
  [[nodiscard]] std::size_t refused_frees() const noexcept { return state_->refused.load(); }
  /// What the last refused free was told.
  [[nodiscard]] std::string last_refusal() const {
    std::lock_guard lock(state_->m);
    return state_->last;
  }

  friend bool operator==(const rmm_resource& a, const rmm_resource& b) noexcept {
    return a.state_ == b.state_ || &a.state_->memory.pool() == &b.state_->memory.pool();
  }
  friend bool operator!=(const rmm_resource& a, const rmm_resource& b) noexcept { return !(a == b); }
  friend constexpr void get_property(const rmm_resource&, ::cuda::mr::device_accessible) noexcept {}

 private:
  struct state {
    explicit state(device_memory& pool) : memory(pool, "rmm") {}
    client_memory memory;                  ///< the pool, as the client "rmm" (memory/client_memory.hpp)
    std::shared_ptr<device_memory> owner;  ///< set when constructed from a shared_ptr
    std::weak_ptr<const void> alive;       ///< device_memory::lifetime()
    device dev;
    std::atomic<std::size_t> refused{0};
    mutable std::mutex m;
    std::string last;
  };

  // `owner` by reference: it is moved from in the body, after checked() has read it.
  rmm_resource(device_memory& pool, std::shared_ptr<device_memory>&& owner) : state_(make_state(pool)) {
    state_->owner = std::move(owner);
    state_->alive = pool.lifetime();
    state_->dev = pool.get_device();
  }

  static std::shared_ptr<state> make_state(device_memory& pool) {
    if (pool.get_device().kind() != device_kind::cuda) {
      throw config_error("rmm_resource: the pool is on " + pool.get_device().str() +
                         ", but RMM's device resources must hand out device memory: give it a GPU's pool "
                         "(dm.memory(device::cuda(k)) or default_memory(device::cuda(k)))");
    }
    return std::make_shared<state>(pool);
  }

  static device_memory& checked(const std::shared_ptr<device_memory>& p) {
    if (p == nullptr) throw config_error("rmm_resource: the pool is null; pass a pool (or a reference to one)");
    return *p;
  }

  const client_memory& live() const {
    if (state_->alive.expired()) {
      throw ::rmm::bad_alloc("devicekit::rmm_resource: the devicekit pool of " + state_->dev.str() +
                             " it borrowed is gone (its manager or owner was destroyed): make RMM's resource from a "
                             "pool that lives as long as RMM uses it (a std::shared_ptr, or default_memory(dev)), "
                             "or set another resource before the pool goes");
    }
    return state_->memory;
  }

  template <class F>
  static void* translate(F&& f, std::size_t bytes) {
    try {
      return f();
    } catch (const out_of_memory& e) {
      // RMM's callers tell a full device from other failures by rmm::out_of_memory (RMM's own
      // tests look for "out_of_memory" in what()); the message names the client ("client rmm: ").
      throw ::rmm::out_of_memory(e.what());
    } catch (const invalid_request& e) {
      throw ::rmm::bad_alloc(std::string("devicekit::rmm_resource: a request of ") + std::to_string(bytes) +
                             " bytes was refused: " + e.what());
    }
  }

  template <class F>
  void refuse_quietly(F&& f) const noexcept {
    try {
      f();
    } catch (const std::exception& e) {
      note_refusal(e.what());
    } catch (...) {
      note_refusal("an unknown exception");
    }
  }

  void note_refusal(const char* what) const noexcept {
    const bool first = state_->refused.fetch_add(1) == 0;
    try {
      std::lock_guard lock(state_->m);
      state_->last = what;
    } catch (...) {}
    if (first) {
      std::fprintf(stderr,
                   "devicekit::rmm_resource: a free through RMM was refused and the pool is unchanged (RMM frees "
                   "are noexcept, so it is not thrown; later refusals are counted in refused_frees()): %s\n",
                   what);
    }
  }

  std::shared_ptr<state> state_;
};

static_assert(::cuda::mr::resource_with<rmm_resource, ::cuda::mr::device_accessible>);

/// An RMM resource as a devicekit upstream: `memory_pool<rmm_upstream>` takes its chunks from it
/// with allocate_sync (a chunk is then ready for every stream) and orders its own frees with CUDA
/// events and the device fence of `dev`, as over cuda_device_resource. Holds the RMM resource
/// (an owning any_resource; a resource_ref keeps only a reference, so the resource it names must
/// outlive the pool).
class rmm_upstream {
 public:
  static constexpr bool is_host_accessible = false;
  static constexpr bool is_device_accessible = true;

  rmm_upstream(::cuda::mr::any_resource<::cuda::mr::device_accessible> r, int ordinal)
      : state_(std::make_shared<state>(std::move(r), ordinal)) {}
  explicit rmm_upstream(::rmm::device_async_resource_ref r, int ordinal = 0)
      : rmm_upstream(::cuda::mr::any_resource<::cuda::mr::device_accessible>(r), ordinal) {}

  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = 256) {
    const scoped_device on(state_->ordinal);
    return state_->r.allocate_sync(bytes, alignment);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = 256) noexcept {
    if (p == nullptr || !cuda_calls_allowed()) return;
    const scoped_device on(state_->ordinal);
    state_->r.deallocate_sync(p, bytes, alignment);
  }
  [[nodiscard]] device get_device() const noexcept { return device::cuda(state_->ordinal); }

  [[nodiscard]] void* create_event(native_stream_handle s) { return events().create_event(s); }
  void record_event(void* ev, native_stream_handle s) { events().record_event(ev, s); }
  [[nodiscard]] bool event_complete(void* ev) { return events().event_complete(ev); }
  void wait_event(void* ev) { events().wait_event(ev); }
  void destroy_event(void* ev) noexcept { detail::cuda_events::destroy(ev); }
  [[nodiscard]] bool fence_covers(native_stream_handle s) { return events().fence_covers(s); }
  void fence() { events().fence(); }

  friend bool operator==(const rmm_upstream& a, const rmm_upstream& b) noexcept { return a.state_ == b.state_; }
  friend constexpr void get_property(const rmm_upstream&, ::cuda::mr::device_accessible) noexcept {}

 private:
  struct state {
    state(::cuda::mr::any_resource<::cuda::mr::device_accessible> res, int ord) : r(std::move(res)), ordinal(ord) {}
    ::cuda::mr::any_resource<::cuda::mr::device_accessible> r;
    int ordinal = 0;
    std::unique_ptr<cuda_device_resource> events;  ///< its events and fence only: it allocates nothing
    std::once_flag made;
  };
  /// The events and the fence of the device, as cuda_device_resource gives them (its synchronous
  /// mode makes no driver pool), made at first use.
  cuda_device_resource& events() {
    std::call_once(state_->made, [&] {
      state_->events =
          std::make_unique<cuda_device_resource>(state_->ordinal, 0, cuda_device_resource::mode::synchronous);
    });
    return *state_->events;
  }
  std::shared_ptr<state> state_;
};

}  // namespace devicekit
