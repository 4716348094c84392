#pragma once
/// \file
/// The definitions behind memory/detail/pool_observers.hpp: detaching an observer.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/memory/detail/pool_observers.hpp>

#include <algorithm>

namespace devicekit::detail {

DEVICEKIT_DECL void observer_list::remove(pool_observer* o, std::size_t allocated, std::size_t reserved) {
  const auto it = std::find(list_.begin(), list_.end(), o);
  if (it == list_.end()) return;
  list_.erase(it);
  o->on_detach(allocated, reserved);
  for (auto* other : list_) other->on_scope(false, o->observer_name());
}

}  // namespace devicekit::detail
