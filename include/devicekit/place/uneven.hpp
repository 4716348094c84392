#pragma once
/// \file
/// `uneven`: what to do when a batch does not divide evenly over the devices. One enum for both
/// places that split a batch: placement's `shard(tree, devices, axis, policy)` and the
/// distribution scheme `schemes::basic_shard_batch<policy>` (which the manager turns into that
/// same `shard` call).
///   error   refuse, like JAX ("axis 0 of size 19 cannot be split evenly over 4 devices")
///   pad     every shard gets ceil(n / parts) rows, the missing ones zero, like flax's
///           pad_shard_unpad
///   ragged  balanced shards, as numpy.array_split: sizes differ by at most one, the first
///           n % parts shards one row larger (9 over 4: 3, 2, 2, 2; see place/split.hpp)
#include <cstdint>
#include <string_view>

namespace devicekit {

enum class uneven : std::uint8_t { error, pad, ragged };

[[nodiscard]] constexpr std::string_view to_string(uneven u) noexcept {
  switch (u) {
    case uneven::pad: return "pad";
    case uneven::ragged: return "ragged";
    default: return "error";
  }
}

}  // namespace devicekit
