#pragma once
/// \file
/// Boost.Hana structs as tree nodes (host only: Hana does not support nvcc). A struct declared
/// with `BOOST_HANA_DEFINE_STRUCT` or adapted with `BOOST_HANA_ADAPT_STRUCT` is a node whose
/// children are its members, in declaration order, keyed by member name (paths such as
/// "batch.images").
///
/// Mapping a struct (`tree_map`, `place`, `to_host`) gives the struct type itself when every
/// member keeps its type and the struct is default-constructible; otherwise a
/// `mapped_struct<S, Members...>`, which keeps the member names:
///
///   auto on_dev = dk::place(b, dev);                  // mapped_struct<batch, device_array<float>, ...>
///   on_dev.get<"images">()                            // by name (or get<0>(), or hana::at_key)
///   batch back = dk::to_host(on_dev);                 // the original struct type again
///
/// `mapped_struct` is itself a Hana struct, so Hana's algorithms work on it.
#if defined(__CUDACC__)
#  error "devicekit/tree/hana.hpp is host-only (Boost.Hana does not support nvcc): include it from a .cpp file"
#endif
#include <devicekit/tree/tree.hpp>

#include <boost/hana/accessors.hpp>
#include <boost/hana/at.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/pair.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>
#include <boost/hana/tuple.hpp>

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace devicekit {

/// A string usable as a template argument: `get<"images">()`.
template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(const char (&s)[N]) noexcept { std::copy_n(s, N, chars); }
  [[nodiscard]] constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
};

namespace detail {

template <class HanaString>
struct hana_string_chars;
template <char... C>
struct hana_string_chars<boost::hana::string<C...>> {
  static constexpr char value[] = {C..., '\0'};
  static constexpr std::string_view view{value, sizeof...(C)};
};

template <class S>
using hana_accessors_t = decltype(boost::hana::accessors<S>());

template <class S, std::size_t I>
using hana_member_name_t =
    std::remove_cvref_t<decltype(boost::hana::first(boost::hana::at_c<I>(std::declval<hana_accessors_t<S>>())))>;

template <class S, std::size_t I>
using hana_member_t = std::remove_cvref_t<decltype(boost::hana::second(
    boost::hana::at_c<I>(std::declval<hana_accessors_t<S>>()))(std::declval<S&>()))>;

template <class S>
inline constexpr std::size_t hana_arity = decltype(boost::hana::length(std::declval<hana_accessors_t<S>>()))::value;

template <class S, std::size_t I>
inline constexpr std::string_view hana_member_name = hana_string_chars<hana_member_name_t<S, I>>::view;

template <class S, class... Us>
constexpr bool keeps_member_types() {
  if constexpr (sizeof...(Us) != hana_arity<S>) {
    return false;
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return (std::is_same_v<hana_member_t<S, I>, Us> && ...); }
    (std::make_index_sequence<sizeof...(Us)>{});
  }
}

}  // namespace detail

/// The result of mapping a Hana struct `S` when members change type: the new members, under
/// S's member names.
template <class S, class... Ts>
class mapped_struct {
  static_assert(sizeof...(Ts) == detail::hana_arity<S>, "mapped_struct<S, Ts...>: one type per member of S");

 public:
  using original_type = S;
  using members_type = std::tuple<Ts...>;

  mapped_struct() = default;
  explicit mapped_struct(std::tuple<Ts...> members) : members_(std::move(members)) {}

  /// The member at position I.
  template <std::size_t I>
  [[nodiscard]] auto& get() & noexcept {
    return std::get<I>(members_);
  }
  template <std::size_t I>
  [[nodiscard]] const auto& get() const& noexcept {
    return std::get<I>(members_);
  }
  template <std::size_t I>
  [[nodiscard]] auto&& get() && noexcept {
    return std::get<I>(std::move(members_));
  }

  /// The member called Name (a compile error names a missing member).
  template <fixed_string Name>
  [[nodiscard]] auto& get() & noexcept {
    return std::get<index_of<Name>()>(members_);
  }
  template <fixed_string Name>
  [[nodiscard]] const auto& get() const& noexcept {
    return std::get<index_of<Name>()>(members_);
  }

  /// Member names in order.
  template <std::size_t I>
  [[nodiscard]] static constexpr std::string_view name() noexcept {
    return detail::hana_member_name<S, I>;
  }

  template <fixed_string Name>
  [[nodiscard]] static constexpr std::size_t index_of() noexcept {
    constexpr std::size_t i = [] {
      std::size_t found = sizeof...(Ts);
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((detail::hana_member_name<S, I> == Name.view() ? (found = I, 0) : 0), ...);
      }
      (std::index_sequence_for<Ts...>{});
      return found;
    }();
    static_assert(i < sizeof...(Ts), "mapped_struct::get<Name>: the struct has no member of that name");
    return i;
  }

  [[nodiscard]] members_type& members() & noexcept { return members_; }
  [[nodiscard]] const members_type& members() const& noexcept { return members_; }
  [[nodiscard]] members_type&& members() && noexcept { return std::move(members_); }

 private:
  members_type members_;
};

template <class T>
inline constexpr bool is_mapped_struct_v = false;
template <class S, class... Ts>
inline constexpr bool is_mapped_struct_v<mapped_struct<S, Ts...>> = true;

namespace detail {
/// What mapping struct S to members Us... gives: S itself, or a mapped_struct.
template <class S, class... Us>
auto rebuild_struct(std::tuple<Us...>&& children) {
  if constexpr (keeps_member_types<S, Us...>() && std::is_default_constructible_v<S>) {
    S out{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((boost::hana::second(boost::hana::at_c<I>(boost::hana::accessors<S>()))(out) = std::get<I>(std::move(children))),
       ...);
    }
    (std::index_sequence_for<Us...>{});
    return out;
  } else {
    return mapped_struct<S, Us...>(std::move(children));
  }
}
}  // namespace detail

/// A Boost.Hana struct is a record node.
template <class S>
requires(boost::hana::Struct<S>::value && !is_mapped_struct_v<S>) struct node_traits<S> {
  static constexpr bool is_node = true;
  static constexpr bool fixed = true;
  static constexpr node_kind kind = node_kind::record;
  static constexpr std::size_t arity = detail::hana_arity<S>;
  template <std::size_t I>
  using child_type = detail::hana_member_t<S, I>;
  template <std::size_t I, class Self>
  static constexpr decltype(auto) get(Self&& n) noexcept {
    auto& member = boost::hana::second(boost::hana::at_c<I>(boost::hana::accessors<S>()))(n);
    return detail::forward_member<Self>(member);
  }
  template <std::size_t I>
  static constexpr std::string_view key_name() noexcept {
    return detail::hana_member_name<S, I>;
  }
  template <class... Us>
  static auto rebuild(std::tuple<Us...>&& children) {
    return detail::rebuild_struct<S>(std::move(children));
  }
};

/// A mapped_struct is a record node with its original's member names.
template <class S, class... Ts>
struct node_traits<mapped_struct<S, Ts...>> {
  static constexpr bool is_node = true;
  static constexpr bool fixed = true;
  static constexpr node_kind kind = node_kind::record;
  static constexpr std::size_t arity = sizeof...(Ts);
  template <std::size_t I>
  using child_type = std::tuple_element_t<I, std::tuple<Ts...>>;
  template <std::size_t I, class Self>
  static constexpr decltype(auto) get(Self&& n) noexcept {
    return std::get<I>(std::forward<Self>(n).members());
  }
  template <std::size_t I>
  static constexpr std::string_view key_name() noexcept {
    return detail::hana_member_name<S, I>;
  }
  template <class... Us>
  static auto rebuild(std::tuple<Us...>&& children) {
    return detail::rebuild_struct<S>(std::move(children));
  }
};

}  // namespace devicekit

// Left out of the API reference (Doxygen's cond section): Doxygen cannot place a specialisation
// of a Boost.Hana trait whose primary template it does not read.
/// \cond
/// mapped_struct is a Hana struct too (hana::keys, hana::at_key, hana::members work on it).
template <class S, class... Ts>
struct boost::hana::accessors_impl<devicekit::mapped_struct<S, Ts...>> {
  static constexpr auto apply() {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return boost::hana::make_tuple(boost::hana::make_pair(
          devicekit::detail::hana_member_name_t<S, I>{},
          [](auto&& s) -> decltype(auto) { return std::get<I>(static_cast<decltype(s)&&>(s).members()); })...);
    }
    (std::index_sequence_for<Ts...>{});
  }
};
/// \endcond
