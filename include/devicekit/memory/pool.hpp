#pragma once
/// \file
/// `memory_pool<Upstream>`: the caching pool (device_memory, see memory/device_memory.hpp) on a
/// given upstream resource (memory/resources.hpp). Any memory_pool is a device_memory, so code
/// that allocates takes `device_memory&` whatever the upstream.
///
///   devicekit::memory_pool<devicekit::host_resource> pool;          // host memory, balanced budget
///   void* p = pool.allocate(1 << 20);
///   pool.deallocate(p, 1 << 20);
///
///   devicekit::memory_pool<devicekit::cuda_device_resource> gpu{devicekit::cuda_device_resource{0},
///                                                                {.max_size = 8ull << 30}};
///   void* q = gpu.allocate(bytes, stream);                           // stream-ordered
///
///   auto mine = devicekit::make_device_pool(dev, config);            // as a manager makes it
///
/// CCCL interop: with LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE defined before the first
/// include, a memory_pool models `cuda::mr::resource` and `cuda::mr::async_resource` (CCCL 3.0)
/// and has the accessibility properties of its upstream (`cuda::mr::device_accessible`,
/// `cuda::mr::host_accessible`).
#include <devicekit/core/allocator_kind.hpp>
#include <devicekit/memory/detail/pool_upstream.hpp>
#include <devicekit/memory/device_memory.hpp>
#include <devicekit/memory/resources.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace devicekit {

/// What `dev` has available for a budget now. On a GPU: the free memory cudaMemGetInfo reports
/// (which creates the device's CUDA context if there is none) plus pool_held_bytes(dev), what
/// this process's devicekit pools hold there, plus what the clients beside the pools hold
/// (device_client_bytes: NCCL's communicators, which the budget pays for itself, past the reserve
/// for collectives). Memory that other processes, other libraries or the program's own cudaMalloc
/// took is not available; memory a devicekit pool holds is, to that pool, which reuses it (another
/// manager's pool on the same device does not make a new manager's budget smaller). nullopt for
/// the host, without CUDA, and where the runtime cannot answer.
[[nodiscard]] DEVICEKIT_DECL std::optional<std::uint64_t> device_available_bytes(device dev);

namespace detail {
/// A device's total memory and what it has available (device_available_bytes), from one
/// cudaMemGetInfo on a GPU: the basis of a pool's default budget.
struct device_memory_figures {
  std::uint64_t total_bytes = 0;
  std::optional<std::uint64_t> available_bytes;
};
[[nodiscard]] DEVICEKIT_DECL device_memory_figures memory_figures_of(device dev);
}  // namespace detail

/// Adds to `clients` those that hold `dev`'s memory beside the pools (device_client_stats: NCCL's
/// communicators) and, with `with_other`, on a GPU whose memory the runtime reports, "other": what
/// the device has in use beyond this process's devicekit pools and those clients (the CUDA
/// context, other libraries' and processes' memory, the program's own cudaMalloc), as measured now
/// (its peak is that figure, its count 0). Measuring it makes the device's CUDA context.
inline void add_device_clients(std::vector<client_memory_stats>& clients, device dev, bool with_other) {
  for (const client_memory_stats& c : device_client_stats(dev)) add_client_stats(clients, c);
  if (!with_other || !dev.is_cuda()) return;
  try {
    const detail::device_memory_figures f = detail::memory_figures_of(dev);
    if (f.available_bytes && f.total_bytes > *f.available_bytes) {
      const std::uint64_t other = f.total_bytes - *f.available_bytes;
      add_client_stats(clients, {"other", other, other, 0});
    }
  } catch (const error&) {
    // No runtime to ask (no driver): nothing is known beside the pools.
  }
}
/// add_device_clients into out.clients, "other" included; returns `out` (device_manager::memory_stats).
inline device_memory_stats& add_device_clients(device_memory_stats& out, device dev) {
  add_device_clients(out.clients, dev, true);
  return out;
}

template <class Upstream>
class memory_pool final : public device_memory {
  static_assert(
      upstream_resource<Upstream>,
      "memory_pool<Upstream>: Upstream must provide 'void* allocate(size_t, size_t)', "
      "'void deallocate(void*, size_t, size_t)' and 'device get_device() const' (see devicekit/memory/resources.hpp)");

 public:
  using upstream_type = Upstream;

  /// A pool on a default-constructed upstream.
  explicit memory_pool(pool_config config = {}) requires std::default_initializable<Upstream>
      : memory_pool(Upstream{}, std::move(config)) {}

  explicit memory_pool(Upstream upstream, pool_config config = {})
      : device_memory(upstream.get_device(), std::move(config)), upstream_(std::move(upstream)) {
    const bool default_budget = !this->config().budget && !this->config().max_size;
    const detail::device_memory_figures f =
        default_budget ? detail::memory_figures_of(get_device()) : detail::device_memory_figures{};
    start(upstream_, f.total_bytes, f.available_bytes);
  }

  ~memory_pool() override { release_everything(); }

  [[nodiscard]] Upstream& upstream() noexcept { return upstream_.resource(); }
  [[nodiscard]] const Upstream& upstream() const noexcept { return upstream_.resource(); }

#if DEVICEKIT_HAS_CCCL_MR
  friend constexpr void get_property(const memory_pool&, ::cuda::mr::device_accessible) noexcept
      requires(Upstream::is_device_accessible) {}
  friend constexpr void get_property(const memory_pool&, ::cuda::mr::host_accessible) noexcept
      requires(Upstream::is_host_accessible) {}
#endif

 private:
  detail::upstream_adapter<Upstream> upstream_;
};

/// The pool a device_manager makes for `dev`, from your own `config`: a memory_pool over host
/// memory for a cpu device; for a GPU by the allocator `kind` (core/allocator_kind.hpp), as the
/// manager's memory(dev) is made under settings::set_allocator:
///   pool      a caching pool over a driver pool of its own (cudaMallocFromPoolAsync)
///   async     every allocation its own cudaMallocAsync from the device's current memory pool
///   platform  every allocation its own cudaMalloc, freed with cudaFree
/// (async and platform cache nothing: release_on_free is set, whatever `config` says). The driver
/// pool keeps up to the pool's budget when idle (its release threshold). `config` is taken as
/// given; without a budget or max_size the pool gets the balanced budget of `dev`, capped to what
/// it has available (device_available_bytes). Where a manager also applies its strategy
/// (device_manager::pool_config_for), pass that configuration to get the manager's pool itself.
/// config_error for a GPU in a build without CUDA; the pool's own errors for a bad `config`.
[[nodiscard]] DEVICEKIT_DECL std::unique_ptr<device_memory> make_device_pool(
    device dev, pool_config config = {}, allocator_kind kind = allocator_kind::pool);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/memory/pool.ipp>
#endif
