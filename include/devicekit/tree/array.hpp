#pragma once
/// \file
/// devicekit's array leaves. Both hold a data pointer, the device it lives on, and a shared owner
/// of the memory (null for a view of memory owned elsewhere). Copies share the buffer, as JAX
/// arrays do; placement (place/) makes new buffers.
///
///   device_array<T>                          1-D: what placing a contiguous range gives
///   shaped_array<T, Extents, Layout>         N-D with `md::extents` and an mdspan layout: a host
///                                            array you fill, or what placing a shaped leaf gives
///
/// A host `md::mdspan<T, E, L>` view (default accessor) is a shaped leaf too; placing it gives a
/// `shaped_array<T, E, L>`.
#include <devicekit/core/device.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/mdspan.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

/// A 1-D array of `T` on a device (or the host, `cpu:0`). Its memory is device memory unless
/// `device().is_cpu()`: read it on the host through `to_host` (place/), not through `data()`.
template <class T>
class device_array {
  static_assert(leaf_element<T> && !std::is_const_v<T>,
                "device_array<T>: T must be a non-const arithmetic type or reduced-precision float (float16_t, ...)");

 public:
  using devicekit_leaf_tag = void;
  using element_type = T;
  using value_type = T;
  static constexpr leaf_kind leaf_kind_value = leaf_kind::contiguous;
  static constexpr std::size_t rank() noexcept { return 1; }

  device_array() = default;
  /// Adopts `size` elements at `data` on `dev`; `owner` keeps them alive (null: a view).
  device_array(std::shared_ptr<void> owner, T* data, std::size_t size, devicekit::device dev) noexcept
      : owner_(std::move(owner)), data_(data), size_(size), device_(dev) {}

  /// A non-owning view of memory that someone else keeps alive.
  [[nodiscard]] static device_array view(T* data, std::size_t size, devicekit::device dev = device::cpu()) noexcept {
    return device_array(nullptr, data, size, dev);
  }

  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] devicekit::device device() const noexcept { return device_; }
  [[nodiscard]] std::array<std::size_t, 1> shape() const noexcept { return {size_}; }
  /// The memory as a span (device memory unless on the cpu).
  [[nodiscard]] std::span<T> span() const noexcept { return {data_, size_}; }
  [[nodiscard]] const std::shared_ptr<void>& owner() const noexcept { return owner_; }
  /// True when this array keeps its memory alive (false for a view).
  [[nodiscard]] bool owns() const noexcept { return owner_ != nullptr; }

 private:
  std::shared_ptr<void> owner_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
  devicekit::device device_ = device::cpu();
};

#if DEVICEKIT_HAS_MDSPAN

/// An N-D array of `T` whose shape is an `md::extents` (static and dynamic extents mixed) laid
/// out by an mdspan layout (`md::layout_right`, `md::layout_left`, `md::layout_stride`). Its
/// storage is the mapping's `required_span_size()` elements.
///
///   shaped_array<float, md::dextents<std::size_t, 3>> images(md::dextents<std::size_t, 3>(8, 28, 28));
///   images(0, 1, 2) = 1.f;            // host arrays only
///   auto v = images.view();           // md::mdspan<float, ...>, usable in a kernel on its device
template <class T, class Extents, class Layout = md::layout_right>
class shaped_array {
  static_assert(leaf_element<T> && !std::is_const_v<T>,
                "shaped_array<T, Extents, Layout>: T must be a non-const arithmetic type or reduced-precision float");

 public:
  using devicekit_leaf_tag = void;
  using element_type = T;
  using value_type = T;
  using extents_type = Extents;
  using layout_type = Layout;
  using mapping_type = typename Layout::template mapping<Extents>;
  using index_type = typename Extents::index_type;
  using mdspan_type = md::mdspan<T, Extents, Layout>;
  static constexpr leaf_kind leaf_kind_value = leaf_kind::shaped;
  static constexpr std::size_t rank() noexcept { return Extents::rank(); }

  /// Empty: dynamic extents zero, no storage (unless every extent is static).
  shaped_array() : shaped_array(mapping_type(Extents())) {}

  /// A zero-filled host array of the given extents (or mapping).
  explicit shaped_array(const Extents& e) : shaped_array(mapping_type(e)) {}
  explicit shaped_array(const mapping_type& m) : mapping_(m) {
    const std::size_t n = size();
    if (n != 0) {
      std::shared_ptr<T[]> storage(new T[n]());
      data_ = storage.get();
      owner_ = std::shared_ptr<void>(std::move(storage), data_);
    }
  }

  /// A host array that takes over `storage`, which must hold the mapping's span.
  shaped_array(std::vector<T> storage, const mapping_type& m) : mapping_(m) {
    if (storage.size() < size()) {
      throw config_error("shaped_array: storage of " + std::to_string(storage.size()) +
                         " elements is smaller than "
                         "the shape needs (" +
                         std::to_string(size()) + " elements)");
    }
    auto holder = std::make_shared<std::vector<T>>(std::move(storage));
    data_ = holder->data();
    owner_ = std::shared_ptr<void>(std::move(holder), data_);
  }
  shaped_array(std::vector<T> storage, const Extents& e) : shaped_array(std::move(storage), mapping_type(e)) {}

  /// Adopts memory at `data` on `dev`, kept alive by `owner` (null: a view). What placement uses.
  shaped_array(std::shared_ptr<void> owner, T* data, const mapping_type& m, devicekit::device dev) noexcept
      : owner_(std::move(owner)), data_(data), mapping_(m), device_(dev) {}

  /// A non-owning view of host memory (or of `dev`'s memory) someone else keeps alive.
  [[nodiscard]] static shaped_array view(T* data, const mapping_type& m,
                                         devicekit::device dev = device::cpu()) noexcept {
    return shaped_array(nullptr, data, m, dev);
  }

  [[nodiscard]] T* data() const noexcept { return data_; }
  /// Stored elements: the mapping's required span (what a copy moves).
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(mapping_.required_span_size()); }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return size() * sizeof(T); }
  [[nodiscard]] devicekit::device device() const noexcept { return device_; }
  [[nodiscard]] const mapping_type& mapping() const noexcept { return mapping_; }
  [[nodiscard]] const Extents& extents() const noexcept { return mapping_.extents(); }
  [[nodiscard]] std::size_t extent(std::size_t r) const noexcept {
    return static_cast<std::size_t>(mapping_.extents().extent(r));
  }
  [[nodiscard]] std::array<std::size_t, Extents::rank()> shape() const noexcept {
    std::array<std::size_t, Extents::rank()> s{};
    for (std::size_t r = 0; r < Extents::rank(); ++r) s[r] = extent(r);
    return s;
  }
  /// The array as an mdspan (device memory unless on the cpu).
  [[nodiscard]] mdspan_type view() const noexcept { return mdspan_type(data_, mapping_); }
  [[nodiscard]] const std::shared_ptr<void>& owner() const noexcept { return owner_; }
  [[nodiscard]] bool owns() const noexcept { return owner_ != nullptr; }

  /// Element access, for host arrays.
  template <class... I>
  requires(sizeof...(I) == Extents::rank() && (std::is_convertible_v<I, index_type> && ...)) [[nodiscard]] T&
  operator()(I... idx) const noexcept {
    return data_[static_cast<std::size_t>(mapping_(static_cast<index_type>(idx)...))];
  }

 private:
  std::shared_ptr<void> owner_;
  T* data_ = nullptr;
  mapping_type mapping_{};
  devicekit::device device_ = device::cpu();
};

/// A host mdspan view with the default accessor is a shaped leaf; placing it gives a
/// shaped_array of the same extents and layout.
template <class T, class Extents, class Layout>
struct leaf_traits<md::mdspan<T, Extents, Layout, md::default_accessor<T>>> {
  using view_type = md::mdspan<T, Extents, Layout, md::default_accessor<T>>;
  static constexpr bool is_leaf = leaf_element<T>;
  static constexpr leaf_kind kind = leaf_kind::shaped;
  using element_type = std::remove_cv_t<T>;
  static constexpr std::size_t rank = Extents::rank();
  static const element_type* data(const view_type& v) noexcept { return v.data_handle(); }
  static std::size_t size(const view_type& v) noexcept {
    return static_cast<std::size_t>(v.mapping().required_span_size());
  }
  static std::array<std::size_t, rank> shape(const view_type& v) noexcept {
    std::array<std::size_t, rank> s{};
    for (std::size_t r = 0; r < rank; ++r) s[r] = static_cast<std::size_t>(v.extent(r));
    return s;
  }
  static devicekit::device device(const view_type&) noexcept { return device::cpu(); }
};

#endif  // DEVICEKIT_HAS_MDSPAN

namespace detail {

/// What kind of leaf a type is, for the code that makes placed and host forms of leaves
/// (placement, the tree algorithms' allocate_like).
template <class T>
inline constexpr bool is_shaped_array_v = false;
#if DEVICEKIT_HAS_MDSPAN
template <class T, class E, class L>
inline constexpr bool is_shaped_array_v<shaped_array<T, E, L>> = true;
#endif

template <class T>
inline constexpr bool is_mdspan_view_v = false;
#if DEVICEKIT_HAS_MDSPAN
template <class T, class E, class L>
inline constexpr bool is_mdspan_view_v<md::mdspan<T, E, L, md::default_accessor<T>>> = true;
#endif

template <class L>
inline constexpr bool is_scalar_leaf_v = leaf_traits<std::remove_cvref_t<L>>::kind == leaf_kind::scalar;

}  // namespace detail

}  // namespace devicekit
