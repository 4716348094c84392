#pragma once
/// \file
/// A tree flattened once: its leaves as flat records, in traversal order, as
/// `jax.tree_util.tree_flatten` gives a list of leaves beside the tree's structure.
///
///   flatten(t, operation)        a flat_tree: every leaf as a flat_leaf, the one device of the
///                                array leaves not on the host (checked), counts and bytes
///   flatten_into(t, out, op)     the same into `out`, reusing its capacity
///   unflatten(like, flat, f)     the structure of `like` again, each leaf f(leaf, record, index)
///                                (what place and to_host build their results with)
///
/// The record says where a leaf's bytes are and what they are, without its path or shape (ask
/// `leaves(t)` in tree/tree.hpp for those): placement, the copy engine, the tree algorithms and
/// the collectives read only these records after the one walk, so no layer walks the user's tree
/// again to learn them.
#include <devicekit/core/device.hpp>
#include <devicekit/core/element_type.hpp>
#include <devicekit/core/error.hpp>
#include <devicekit/tree/errors.hpp>
#include <devicekit/tree/leaf.hpp>
#include <devicekit/tree/path.hpp>
#include <devicekit/tree/tree.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace devicekit {

namespace detail {

/// The deleter of a block of host memory whose leaves belong to a device (memory kinds
/// pinned_host and host, place/place.hpp): its type marks such blocks, so that a flattened leaf
/// says its bytes are host memory (memory_device_of) while its device stays the device, as a JAX
/// array in the pinned_host memory space stays on its device. `give_back` returns the block to
/// the resource that made it; the type knows nothing of resources.
struct host_resident_block {
  void* resource = nullptr;
  std::size_t bytes = 0;
  void (*give_back)(void* resource, void* p, std::size_t bytes) noexcept = nullptr;
  void operator()(void* p) const noexcept { give_back(resource, p, bytes); }
};

/// Where the bytes of `leaf` are: its device, or cpu:0 for a leaf placed in host memory for a
/// device (host_resident_block).
template <class L>
[[nodiscard]] device memory_device_of(const L& leaf) noexcept {
  if constexpr (self_describing_leaf<L>) {
    if (leaf.owner() != nullptr && std::get_deleter<host_resident_block>(leaf.owner()) != nullptr) return device::cpu();
  }
  return leaf_traits<L>::device(leaf);
}

/// Identity of the allocation a leaf's memory belongs to (for merging copies); null if unknown.
template <class L>
[[nodiscard]] const void* owner_of(const L& leaf) noexcept {
  if constexpr (self_describing_leaf<L>) {
    return leaf.owner().get();
  } else {
    return nullptr;
  }
}

}  // namespace detail

/// One leaf of a flattened tree. `data` points into the tree (device memory unless memory() is
/// the cpu); it is valid while the tree is and is not resized. 40 bytes: a placement reads and
/// writes one per leaf, and a tree of 10,000 leaves then keeps its records in the cache.
struct flat_leaf {
  const std::byte* data = nullptr;
  std::size_t bytes = 0;        ///< stored bytes: size() elements of element_size bytes
  const void* owner = nullptr;  ///< identity of the allocation holding the bytes; null: unknown
  devicekit::device device;     ///< the leaf's device (leaf_traits::device)
  element_type type = element_type::opaque;
  leaf_kind kind = leaf_kind::scalar;
  std::uint8_t element_size = 0;  ///< bytes per element (sizeof the leaf's element type)
  bool in_host_memory = false;    ///< a leaf of a device whose bytes are host memory (memory kinds pinned_host, host)

  /// Stored elements.
  [[nodiscard]] std::size_t size() const noexcept { return element_size == 0 ? 0 : bytes / element_size; }
  /// Where the bytes are: `device`, or cpu:0 for a leaf of a device placed in host memory.
  [[nodiscard]] devicekit::device memory() const noexcept { return in_host_memory ? device::cpu() : device; }
  /// An array leaf (contiguous or shaped): one with bytes of its own to move. Scalars are values.
  [[nodiscard]] bool is_array() const noexcept { return kind != leaf_kind::scalar; }
};

/// A flattened tree: its leaves in traversal order, and what the walk learned of them.
struct flat_tree {
  std::vector<flat_leaf> leaves;
  /// The one device of the array leaves that are not on the host (a tree moves as a whole, from
  /// one place); none when every array leaf is on the host. Host leaves may be mixed in.
  std::optional<device> source;
  std::size_t array_leaves = 0;  ///< leaves with is_array()
  std::size_t array_bytes = 0;   ///< their bytes together
};

namespace detail {

/// Fills `r` with the record of `leaf`, field by field in place: built in a temporary and copied,
/// the record's narrow fields (type, kind, device) are stored piecewise and then reloaded as
/// wide words, which stalls each leaf on a failed store-to-load forwarding (Intel 64 and IA-32
/// Architectures Optimization Reference Manual, "Store Forwarding").
template <class L>
void fill_flat_leaf(const L& leaf, flat_leaf& r) noexcept {
  using traits = leaf_traits<std::remove_cvref_t<L>>;
  static_assert(traits::is_leaf, "flatten_leaf: L must be a leaf");
  using E = typename traits::element_type;
  static_assert(sizeof(E) <= 255, "flatten_leaf: an element of more than 255 bytes");
  r.data = reinterpret_cast<const std::byte*>(traits::data(leaf));
  r.bytes = traits::size(leaf) * sizeof(E);
  r.type = element_type_of<E>;
  r.kind = traits::kind;
  r.element_size = static_cast<std::uint8_t>(sizeof(E));
  if constexpr (traits::kind != leaf_kind::scalar) {
    r.device = traits::device(leaf);
    r.in_host_memory = !r.device.is_cpu() && memory_device_of(leaf).is_cpu();
    r.owner = owner_of(leaf);
  } else {
    r.device = device::cpu();
    r.in_host_memory = false;
    r.owner = nullptr;
  }
}

}  // namespace detail

/// The flat record of one leaf.
template <class L>
[[nodiscard]] flat_leaf flatten_leaf(const L& leaf) noexcept {
  flat_leaf r;
  detail::fill_flat_leaf(leaf, r);
  return r;
}

namespace detail {

/// device_mismatch for the first two array leaves of `t` on different devices, with their paths
/// (found by a walk of their own: the flattening walk keeps no paths).
template <class T>
[[noreturn]] void throw_mixed_devices(const T& t, std::string_view operation) {
  std::optional<device> first;
  std::string first_path;
  for_each_leaf_with_path(
      [&](const tree_path& path, const auto& leaf) {
        using traits = leaf_traits<std::remove_cvref_t<decltype(leaf)>>;
        if constexpr (traits::kind != leaf_kind::scalar) {
          const device d = traits::device(leaf);
          if (d.is_cpu()) return;
          if (!first) {
            first = d;
            first_path = path.display();
          } else if (*first != d) {
            throw device_mismatch(std::string(operation) + ": the tree's leaves are on different devices: '" +
                                      first_path + "' is on " + first->str() + ", '" + path.display() + "' is on " +
                                      d.str() + "; place them on one device first",
                                  *first, d);
          }
        }
      },
      t);
  throw device_mismatch(std::string(operation) + ": the tree's leaves are on different devices", device::cpu(),
                        device::cpu());  // not reached: the walk above finds them
}

}  // namespace detail

/// Calls `f(const flat_leaf&)` for every leaf of `t` in traversal order, each record built once
/// and handed over (the form of flatten that keeps nothing: a caller that stores what it needs
/// of each leaf, as placement stores its copies, writes each leaf once). Returns the one device
/// of the array leaves not on the host, or none; device_mismatch, naming both leaves' paths and
/// `operation`, when there are two (after `f` has seen every leaf).
template <class T, class F>
std::optional<device> for_each_flat_leaf(const T& t, F&& f, std::string_view operation = "flatten") {
  static_assert(require_tree<T>(), "flatten(tree): tree must be a tree (see devicekit/tree/tree.hpp)");
  std::optional<device> source;
  bool mixed = false;
  flat_leaf r;
  for_each_leaf(
      [&](const auto& leaf) {
        detail::fill_flat_leaf(leaf, r);
        if (r.is_array() && !r.device.is_cpu()) {
          if (!source) {
            source = r.device;
          } else if (*source != r.device) {
            mixed = true;
          }
        }
        f(static_cast<const flat_leaf&>(r));
      },
      t);
  if (mixed) detail::throw_mixed_devices(t, operation);
  return source;
}

/// Flattens `t` into `out`, reusing its vector's capacity: one walk (for_each_flat_leaf).
template <class T>
void flatten_into(const T& t, flat_tree& out, std::string_view operation = "flatten") {
  out.leaves.clear();
  out.source.reset();
  out.array_leaves = 0;
  out.array_bytes = 0;
  out.source = for_each_flat_leaf(
      t,
      [&out](const flat_leaf& r) {
        out.leaves.push_back(r);
        if (r.is_array()) {
          ++out.array_leaves;
          out.array_bytes += r.bytes;
        }
      },
      operation);
}

/// Flattens `t` (flatten_into).
template <class T>
[[nodiscard]] flat_tree flatten(const T& t, std::string_view operation = "flatten") {
  flat_tree out;
  flatten_into(t, out, operation);
  return out;
}

/// The structure of `like` again, each leaf `f(leaf of like, flat.leaves[i], i)` for the i-th
/// leaf in traversal order: `flat` must be `like` flattened (tree_structure_error when the leaf
/// counts differ). As tree_map, a vector node whose leaves map to scalars becomes a leaf.
template <class T, class F>
[[nodiscard]] auto unflatten(const T& like, const flat_tree& flat, F&& f) {
  std::size_t i = 0;
  auto out = tree_map(
      [&](const auto& leaf) {
        if (i >= flat.leaves.size()) {
          throw tree_structure_error("unflatten: the tree has more leaves than the " +
                                     std::to_string(flat.leaves.size()) + " flattened ones; flatten it again");
        }
        const std::size_t at = i++;
        return f(leaf, flat.leaves[at], at);
      },
      like);
  if (i != flat.leaves.size()) {
    throw tree_structure_error("unflatten: the tree has " + std::to_string(i) + " leaves but " +
                               std::to_string(flat.leaves.size()) + " were flattened; flatten it again");
  }
  return out;
}

namespace detail {

/// A flat_tree taken from this thread's spares and given back on destruction, so that a call
/// that flattens a tree of many leaves reuses the capacity of the previous call instead of
/// allocating (and, above the allocator's mmap threshold, page-faulting) it again, as a
/// hand-written loop would keep its buffer. A few are kept (a call may flatten a source and a
/// destination, and nest); past that, one starts empty.
class reused_flat_tree {
 public:
  reused_flat_tree() noexcept {
    auto& s = spares();
    if (!s.empty()) {
      tree_ = std::move(s.back());
      s.pop_back();
    }
  }
  reused_flat_tree(const reused_flat_tree&) = delete;
  reused_flat_tree& operator=(const reused_flat_tree&) = delete;
  ~reused_flat_tree() {
    // Only modest ones are kept: a huge tree's records are not held for the thread's life.
    constexpr std::size_t kept_leaves = std::size_t{1} << 16;
    auto& s = spares();
    if (tree_.leaves.capacity() <= kept_leaves && s.size() < s.capacity()) s.push_back(std::move(tree_));
  }
  [[nodiscard]] flat_tree& get() noexcept { return tree_; }
  [[nodiscard]] flat_tree* operator->() noexcept { return &tree_; }

 private:
  /// Room for four, reserved once, so that giving one back never allocates (or throws).
  [[nodiscard]] static std::vector<flat_tree>& spares() noexcept {
    thread_local std::vector<flat_tree> s = [] {
      std::vector<flat_tree> v;
      try {
        v.reserve(4);
      } catch (...) {
        // No room for spares: every call starts empty.
      }
      return v;
    }();
    return s;
  }
  flat_tree tree_;
};

}  // namespace detail

}  // namespace devicekit
