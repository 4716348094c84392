#pragma once
/// \file
/// What replicate and shard return (place/shard.hpp): `per_device<Tree>`, one placed tree per
/// device, and `sharded<Tree>`, the shards with how the batch was split. The collectives over
/// trees take them too (distribute/tree_collectives.hpp).
#include <devicekit/core/device.hpp>
#include <devicekit/place/uneven.hpp>

#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

/// One placed tree per device, in the order of the devices given (or of the mesh).
template <class Tree>
struct per_device {
  std::vector<device> devices;
  std::vector<Tree> trees;

  [[nodiscard]] std::size_t size() const noexcept { return trees.size(); }
  [[nodiscard]] Tree& operator[](std::size_t i) { return trees.at(i); }
  [[nodiscard]] const Tree& operator[](std::size_t i) const { return trees.at(i); }
  [[nodiscard]] auto begin() noexcept { return trees.begin(); }
  [[nodiscard]] auto end() noexcept { return trees.end(); }
  [[nodiscard]] auto begin() const noexcept { return trees.begin(); }
  [[nodiscard]] auto end() const noexcept { return trees.end(); }
};

/// The shards of a tree, with how the batch was split.
template <class Tree>
struct sharded : per_device<Tree> {
  std::vector<std::vector<std::size_t>> mesh_coords;  ///< each shard's position in the mesh
  std::optional<std::size_t> batch_axis;              ///< the first split dimension
  std::size_t batch_size = 0;                         ///< its size in the source
  std::size_t pad = 0;                                ///< rows added along it (uneven::pad)
  std::vector<std::size_t> valid;                     ///< real rows of the batch in each shard
  uneven policy = uneven::error;
};

namespace detail {
template <class T>
std::true_type is_per_device_test(const per_device<T>*);
std::false_type is_per_device_test(...);
/// True for per_device<T> and what derives from it (sharded<T>): what replicate and shard return.
template <class T>
inline constexpr bool is_per_device_v = decltype(is_per_device_test(std::declval<std::remove_cvref_t<T>*>()))::value;
}  // namespace detail

}  // namespace devicekit
