#pragma once
/// \file
/// The definitions behind place/mesh.hpp: checking a mesh and naming meshes and partition specs.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/mesh.hpp>

#include <devicekit/core/error.hpp>

#include <limits>
#include <string>

namespace devicekit {

DEVICEKIT_DECL std::optional<std::size_t> mesh::axis_index(std::string_view name) const noexcept {
  for (std::size_t a = 0; a < names_.size(); ++a) {
    if (names_[a] == name) return a;
  }
  return std::nullopt;
}

DEVICEKIT_DECL std::string mesh::str() const {
  std::string s = "mesh(";
  for (std::size_t a = 0; a < rank(); ++a) {
    s += (a ? ", " : "") + names_[a] + "=" + std::to_string(shape_[a]);
  }
  return s + ")";
}

DEVICEKIT_DECL void mesh::validate() const {
  if (devices_.empty()) throw config_error("mesh: no devices given; a mesh needs at least one device");
  // The product may wrap around to the device count ((2^64 - 1)^2 is 1 in 64 bits): such a shape
  // holds more than SIZE_MAX devices, never the ones given.
  std::size_t n = 1;
  bool overflows = false;
  for (auto s : shape_) {
    overflows = overflows || (s != 0 && n > std::numeric_limits<std::size_t>::max() / s);
    n *= s;
  }
  if (overflows || n != devices_.size()) {
    throw config_error("mesh: the shape holds " + (overflows ? std::string("more than SIZE_MAX") : std::to_string(n)) +
                       " devices but " + std::to_string(devices_.size()) + " were given");
  }
  for (std::size_t a = 0; a < names_.size(); ++a) {
    if (names_[a].empty()) throw config_error("mesh: axis " + std::to_string(a) + " has no name");
    for (std::size_t b = 0; b < a; ++b) {
      if (names_[a] == names_[b]) throw config_error("mesh: two axes are called '" + names_[a] + "'");
    }
  }
}

DEVICEKIT_DECL std::string partition_spec::str() const {
  std::string s = "partition_spec(";
  for (std::size_t d = 0; d < dims_.size(); ++d) s += (d ? ", " : "") + (dims_[d] ? "'" + *dims_[d] + "'" : "None");
  return s + ")";
}

}  // namespace devicekit
