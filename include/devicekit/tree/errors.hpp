#pragma once
/// \file
/// The errors of tree/: tree_structure_error. (The trees that are not trees at all are compile
/// errors: see tree/detail/check.hpp.)
#include <devicekit/core/error.hpp>

namespace devicekit {

/// Trees that should have had the same structure did not (thrown where the difference is only
/// known at run time: lengths of `std::vector` nodes).
class tree_structure_error : public error {
 public:
  using error::error;
};

}  // namespace devicekit
