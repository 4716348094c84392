#pragma once
/// \file
/// `tree_path`: the position of a subtree during a traversal, spelled "batch.images",
/// "layers[2].w", "[0]".
#include <devicekit/core/config.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace devicekit {

/// The position of a subtree: a chain of keys from the root, kept on the stack while a traversal
/// runs. `str()` spells it ("batch.images", "layers[2].w").
class tree_path {
 public:
  /// The root; `name` (may be empty) starts every path.
  explicit constexpr tree_path(std::string_view name = {}) noexcept : name_(name) {}
  /// A named child (struct member) of `parent`.
  constexpr tree_path(const tree_path& parent, std::string_view name) noexcept : parent_(&parent), name_(name) {}
  /// A positional child (tuple element, array index) of `parent`.
  constexpr tree_path(const tree_path& parent, std::size_t index) noexcept
      : parent_(&parent), index_(index), positional_(true) {}

  [[nodiscard]] constexpr const tree_path* parent() const noexcept { return parent_; }
  [[nodiscard]] constexpr bool positional() const noexcept { return positional_; }
  [[nodiscard]] constexpr std::size_t index() const noexcept { return index_; }
  [[nodiscard]] constexpr std::string_view name() const noexcept { return name_; }
  [[nodiscard]] constexpr std::size_t depth() const noexcept { return parent_ ? parent_->depth() + 1 : 0; }

  [[nodiscard]] std::string str() const;
  /// `str()`, or "(root)" for the root of an unnamed tree: for messages.
  [[nodiscard]] std::string display() const {
    std::string s = str();
    return s.empty() ? std::string("(root)") : s;
  }

 private:
  const tree_path* parent_ = nullptr;
  std::string_view name_;
  std::size_t index_ = 0;
  bool positional_ = false;
};

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/tree/path.ipp>
#endif
