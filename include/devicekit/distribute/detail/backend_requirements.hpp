#pragma once
/// \file
/// The members collective_backend (distribute/collectives.hpp) requires, one concept each, and
/// check_collective_backend, whose static_asserts name the members a backend lacks.
#include <devicekit/core/device.hpp>
#include <devicekit/core/element_type.hpp>
#include <devicekit/distribute/options.hpp>

#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>

namespace devicekit {

namespace detail::backend_requirements {

template <class B>
concept has_participants = requires(const B& cb) {
  { cb.participants() } -> std::convertible_to<std::size_t>;
};
template <class B>
concept has_size = requires(const B& cb) {
  { cb.size() } -> std::convertible_to<int>;
};
template <class B>
concept has_rank = requires(const B& cb, std::size_t p) {
  { cb.rank(p) } -> std::convertible_to<int>;
};
template <class B>
concept has_name = requires {
  { B::name() } -> std::convertible_to<std::string_view>;
};
template <class B>
concept has_can_reduce = requires(element_type t) {
  { B::can_reduce(t) } -> std::convertible_to<bool>;
};
template <class B>
concept has_accepts = requires(const B& cb, std::size_t p, device d) {
  { cb.accepts(d, p) } -> std::convertible_to<bool>;
};
template <class B>
concept has_memory_description = requires(const B& cb, std::size_t p) {
  { cb.memory_description(p) } -> std::convertible_to<std::string>;
};
template <class B>
concept has_set_operation = requires(B& b, std::string_view op) {
  b.set_operation(op);
};
template <class B>
concept has_group_begin = requires(B& b) {
  b.group_begin();
};
template <class B>
concept has_group_end = requires(B& b) {
  b.group_end();
};
template <class B>
concept has_scratch = requires(B& b, std::size_t p, int slot, std::size_t n) {
  { b.scratch(p, slot, n) } -> std::convertible_to<void*>;
};
template <class B>
concept has_copy = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n) {
  b.copy(p, r, s, n);
};
template <class B>
concept has_exchange = requires(B& b, void* r, const void* s, std::size_t n) {
  b.exchange(s, n, r);
};
template <class B>
concept has_broadcast = requires(B& b, std::size_t p, void* r, std::size_t n, element_type t, int root) {
  b.broadcast(p, r, n, t, root);
};
template <class B>
concept has_all_reduce = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n, element_type t,
                                  reduce_op rop) {
  b.all_reduce(p, s, r, n, t, rop);
};
template <class B>
concept has_all_gather = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n, element_type t) {
  b.all_gather(p, s, r, n, t);
};
template <class B>
concept has_reduce_scatter = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n, element_type t,
                                      reduce_op rop) {
  b.reduce_scatter(p, s, r, n, t, rop);
};
template <class B>
concept has_scatter = requires(B& b, std::size_t p, void* r, const void* s, std::size_t n, int root,
                               const std::size_t* sizes) {
  b.scatter(p, s, sizes, sizes, r, n, root);
};
template <class B>
concept has_finish = requires(B& b, std::string_view op) {
  b.finish(op);
};

/// True when B has every member; a static_assert per member names each one B lacks.
template <class B>
constexpr bool check_collective_backend() {
  static_assert(has_participants<B>, "collective_backend: the backend has no `std::size_t participants() const`");
  static_assert(has_size<B>, "collective_backend: the backend has no `int size() const`");
  static_assert(has_rank<B>, "collective_backend: the backend has no `int rank(std::size_t) const`");
  static_assert(has_name<B>, "collective_backend: the backend has no `static std::string_view name()`");
  static_assert(has_can_reduce<B>, "collective_backend: the backend has no `static bool can_reduce(element_type)`");
  static_assert(has_accepts<B>, "collective_backend: the backend has no `bool accepts(device, std::size_t) const`");
  static_assert(has_memory_description<B>,
                "collective_backend: the backend has no `std::string memory_description(std::size_t) const`");
  static_assert(has_set_operation<B>, "collective_backend: the backend has no `void set_operation(std::string_view)`");
  static_assert(has_group_begin<B>, "collective_backend: the backend has no `void group_begin()`");
  static_assert(has_group_end<B>, "collective_backend: the backend has no `void group_end()`");
  static_assert(has_scratch<B>,
                "collective_backend: the backend has no `void* scratch(std::size_t, int, std::size_t)`");
  static_assert(has_copy<B>,
                "collective_backend: the backend has no `void copy(std::size_t, void*, const void*, std::size_t)`");
  static_assert(has_exchange<B>,
                "collective_backend: the backend has no `void exchange(const void*, std::size_t, void*)`");
  static_assert(
      has_broadcast<B>,
      "collective_backend: the backend has no `void broadcast(std::size_t, void*, std::size_t, element_type, int)`");
  static_assert(has_all_reduce<B>,
                "collective_backend: the backend has no `void all_reduce(std::size_t, const void*, void*, std::size_t, "
                "element_type, reduce_op)`");
  static_assert(has_all_gather<B>,
                "collective_backend: the backend has no `void all_gather(std::size_t, const void*, void*, std::size_t, "
                "element_type)`");
  static_assert(has_reduce_scatter<B>,
                "collective_backend: the backend has no `void reduce_scatter(std::size_t, const void*, void*, "
                "std::size_t, element_type, reduce_op)`");
  static_assert(has_scatter<B>,
                "collective_backend: the backend has no `void scatter(std::size_t, const void*, const std::size_t*, "
                "const std::size_t*, void*, std::size_t, int)`");
  static_assert(has_finish<B>, "collective_backend: the backend has no `void finish(std::string_view)`");
  return has_participants<B> && has_size<B> && has_rank<B> && has_name<B> && has_can_reduce<B> && has_accepts<B> &&
         has_memory_description<B> && has_set_operation<B> && has_group_begin<B> && has_group_end<B> &&
         has_scratch<B> && has_copy<B> && has_exchange<B> && has_broadcast<B> && has_all_reduce<B> &&
         has_all_gather<B> && has_reduce_scatter<B> && has_scatter<B> && has_finish<B>;
}

}  // namespace detail::backend_requirements

}  // namespace devicekit
