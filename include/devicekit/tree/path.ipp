#pragma once
/// \file
/// The definitions behind tree/path.hpp: spelling a path.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/tree/path.hpp>

namespace devicekit {

DEVICEKIT_DECL std::string tree_path::str() const {
  std::string s = parent_ ? parent_->str() : std::string();
  if (positional_) {
    s.append("[").append(std::to_string(index_)).append("]");
  } else if (!name_.empty()) {
    if (!s.empty()) s.push_back('.');
    s.append(name_);
  }
  return s;
}

}  // namespace devicekit
