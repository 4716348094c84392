#pragma once
/// \file
/// The device mesh and partition spec of shard's mesh form (place/shard.hpp), as JAX has them:
/// `mesh` (jax.sharding.Mesh, a 1-D or 2-D arrangement of devices with named axes) and
/// `partition_spec` (jax.sharding.PartitionSpec, the mesh axis each array dimension is split over).
#include <devicekit/core/device.hpp>
#include <devicekit/core/error.hpp>

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devicekit {

/// A 1-D or 2-D arrangement of devices with named axes, row-major (as jax.sharding.Mesh).
class mesh {
 public:
  /// A 1-D mesh of `devices` along one axis called `axis`.
  explicit mesh(std::vector<device> devices, std::string axis = "data")
      : devices_(std::move(devices)), shape_{devices_.size()}, names_{std::move(axis)} {
    validate();
  }
  /// A rows x cols mesh: devices[r * cols + c] sits at (r, c).
  mesh(std::vector<device> devices, std::size_t rows, std::size_t cols, std::string row_axis, std::string col_axis)
      : devices_(std::move(devices)), shape_{rows, cols}, names_{std::move(row_axis), std::move(col_axis)} {
    validate();
  }

  [[nodiscard]] const std::vector<device>& devices() const noexcept { return devices_; }
  [[nodiscard]] std::size_t rank() const noexcept { return shape_.size(); }
  [[nodiscard]] std::size_t size() const noexcept { return devices_.size(); }
  [[nodiscard]] std::size_t axis_size(std::size_t a) const { return shape_.at(a); }
  [[nodiscard]] const std::string& axis_name(std::size_t a) const { return names_.at(a); }
  [[nodiscard]] std::optional<std::size_t> axis_index(std::string_view name) const noexcept;
  /// Coordinates of the device at flat position `i`.
  [[nodiscard]] std::vector<std::size_t> coords(std::size_t i) const {
    if (rank() == 1) return {i};
    return {i / shape_[1], i % shape_[1]};
  }
  [[nodiscard]] std::string str() const;

 private:
  void validate() const;

  std::vector<device> devices_;
  std::vector<std::size_t> shape_;
  std::vector<std::string> names_;
};

/// For each leaf dimension, the mesh axis it is split over, or std::nullopt (not split):
/// `partition_spec{"data", std::nullopt}` splits dimension 0 over "data" (as
/// jax.sharding.PartitionSpec). Dimensions past the spec's length, and spec entries past a leaf's
/// rank, are not split.
class partition_spec {
 public:
  partition_spec() = default;
  partition_spec(std::initializer_list<std::optional<std::string>> dims) : dims_(dims) {}
  explicit partition_spec(std::vector<std::optional<std::string>> dims) : dims_(std::move(dims)) {}
  [[nodiscard]] std::size_t size() const noexcept { return dims_.size(); }
  [[nodiscard]] const std::optional<std::string>& operator[](std::size_t d) const { return dims_.at(d); }
  [[nodiscard]] std::string str() const;

 private:
  std::vector<std::optional<std::string>> dims_;
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/place/mesh.ipp>
#endif
