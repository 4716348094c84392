#pragma once
/// \file
/// `default_device_scope`: the device placement uses, inside a scope, when none is given (as
/// `with jax.default_device(d):` in JAX, or `with torch.device(d):` in PyTorch). It is
/// thread-local (another thread keeps its own default), scopes nest (the innermost wins) and the
/// previous default comes back when a scope ends, by exception too:
///
///   dk::default_device_scope on_second(dk::device::cuda(1));
///   auto t = dk::place(tree);      // on cuda:1; dm.place(tree) and dm.prefetch(source) too
///
/// Outside any scope, placement without a device uses the manager's default device.
#include <devicekit/core/device.hpp>

#include <optional>

namespace devicekit {

namespace detail {
/// The innermost scope's device on this thread; nullopt outside any scope.
[[nodiscard]] inline std::optional<device>& scoped_default_slot() noexcept {
  thread_local std::optional<device> current;
  return current;
}
}  // namespace detail

/// The device of the innermost default_device_scope on this thread, or nullopt outside any.
[[nodiscard]] inline std::optional<device> scoped_default_device() noexcept { return detail::scoped_default_slot(); }

/// Makes `dev` the default device of placement on this thread until the scope ends. Neither
/// copyable nor movable: each scope restores exactly what it replaced, so scopes must end in the
/// reverse order of their start, which objects on the stack guarantee.
class default_device_scope {
 public:
  explicit default_device_scope(device dev) noexcept : device_(dev), previous_(detail::scoped_default_slot()) {
    detail::scoped_default_slot() = dev;
  }
  ~default_device_scope() { detail::scoped_default_slot() = previous_; }
  default_device_scope(const default_device_scope&) = delete;
  default_device_scope& operator=(const default_device_scope&) = delete;
  default_device_scope(default_device_scope&&) = delete;
  default_device_scope& operator=(default_device_scope&&) = delete;

  /// The device this scope set.
  [[nodiscard]] device get() const noexcept { return device_; }

 private:
  device device_;
  std::optional<device> previous_;
};

}  // namespace devicekit
