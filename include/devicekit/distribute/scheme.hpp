#pragma once
/// \file
/// Distribution schemes: how a manager spreads data over its devices. A scheme is any type with
/// a `name()` (the concept `distribution_scheme`). The scheme types live in
/// `devicekit::schemes` so that they do not collide with the placement functions of the same
/// name (`devicekit::replicate(tree, devices)`); `single_device` and `shard_batch` are also
/// available as `devicekit::single_device` and `devicekit::shard_batch`.
#include <devicekit/core/config.hpp>

#include <concepts>
#include <string_view>

namespace devicekit {

template <class S>
concept distribution_scheme = std::copy_constructible<S> && requires(const S& s) {
  { s.name() } -> std::convertible_to<std::string_view>;
};

namespace schemes {

/// Everything on the default device.
struct single_device {
  static constexpr std::string_view name() noexcept { return "single_device"; }
};

/// A full copy on every device.
struct replicate {
  static constexpr std::string_view name() noexcept { return "replicate"; }
};

/// Data parallel: every leaf split along its batch axis, one shard per device.
struct shard_batch {
  static constexpr std::string_view name() noexcept { return "shard_batch"; }
};

}  // namespace schemes

using schemes::shard_batch;
using schemes::single_device;

}  // namespace devicekit
