#pragma once
/// \file
/// Distribution schemes: how a manager spreads a tree over its devices. A scheme is a policy
/// (the concept `distribution_scheme`): a copyable type with a `name()` and a
/// `plan(tree_summary, devices)` that says, per device, which part of the tree goes there. The
/// stock schemes are empty types; a user's custom scheme is a plain struct with the same two
/// members (no inheritance, no registration).
///
/// The scheme types live in `devicekit::schemes` so that they do not collide with the placement
/// functions of the same name (`devicekit::replicate(tree, devices)`); `single_device` and
/// `shard_batch` are also available as `devicekit::single_device` and `devicekit::shard_batch`.
#include <devicekit/core/device.hpp>
#include <devicekit/place/uneven.hpp>
#include <devicekit/distribute/assignment.hpp>
#include <devicekit/place/split.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devicekit {

/// What a scheme sees of a tree when it plans: the batch size (the leading extent that all
/// leaves share; 0 when there is none), the number of leaves and their bytes.
struct tree_summary {
  std::size_t batch = 0;
  std::size_t leaf_count = 0;
  std::size_t total_bytes = 0;
};

/// One device's part of a distributed tree. `whole` means a full copy (replicate,
/// single_device); otherwise the rows [begin, begin + count) of the batch axis, followed by
/// `padding` rows of padding (the `pad` policy).
struct device_share {
  device dev;
  bool whole = true;
  std::size_t begin = 0;
  std::size_t count = 0;
  std::size_t padding = 0;

  friend bool operator==(const device_share&, const device_share&) = default;
};

/// A scheme's answer: one share per participating device, in order.
struct distribution_plan {
  std::vector<device_share> shares;

  /// The devices, one replica each (a plan runs one computation per device), as the report
  /// prints it.
  [[nodiscard]] device_assignment assignment() const;
  friend bool operator==(const distribution_plan&, const distribution_plan&) = default;
};

/// A distribution scheme: `name()` and `distribution_plan plan(const tree_summary&,
/// std::span<const device>) const`. The device list is never empty and its first entry is the
/// default device.
template <class S>
concept distribution_scheme = std::copy_constructible<S> &&
    requires(const S& s, const tree_summary& t, std::span<const device> devs) {
  { s.name() } -> std::convertible_to<std::string_view>;
  { s.plan(t, devs) } -> std::same_as<distribution_plan>;
};

namespace schemes {

/// How shard_batch treats a batch that does not divide evenly over the devices: the one
/// `devicekit::uneven` (core/uneven.hpp) that placement's shard takes too. `uneven_batch` is the
/// name it had here before, kept so that `basic_shard_batch<uneven_batch::pad>` still reads well.
using uneven_batch = devicekit::uneven;

/// Everything on the default device.
struct single_device {
  static constexpr std::string_view name() noexcept { return "single_device"; }
  [[nodiscard]] static distribution_plan plan(const tree_summary&, std::span<const device> devices) {
    if (devices.empty()) throw config_error("single_device: no device to place the tree on");
    return {{device_share{devices.front(), true, 0, 0, 0}}};
  }
};

/// A full copy on every device.
struct replicate {
  static constexpr std::string_view name() noexcept { return "replicate"; }
  [[nodiscard]] static distribution_plan plan(const tree_summary&, std::span<const device> devices) {
    distribution_plan p;
    for (const auto& d : devices) p.shares.push_back({d, true, 0, 0, 0});
    return p;
  }
};

/// Data parallel: every leaf split along its batch axis, one shard per device; `Uneven` says
/// what happens when the batch does not divide evenly.
template <uneven_batch Uneven>
struct basic_shard_batch {
  static constexpr devicekit::uneven uneven = Uneven;
  static constexpr std::string_view name() noexcept { return "shard_batch"; }
  [[nodiscard]] static distribution_plan plan(const tree_summary& tree, std::span<const device> devices) {
    if (devices.empty()) throw config_error("shard_batch: no device to shard over");
    const std::size_t n = devices.size();
    const std::size_t batch = tree.batch;
    if (Uneven == uneven_batch::error && batch % n != 0) {
      throw config_error("shard_batch: a batch of " + std::to_string(batch) + " rows does not divide into " +
                         std::to_string(n) +
                         " equal shards (uneven policy 'error'); use uneven_batch::pad or "
                         "uneven_batch::ragged, or a batch size that is a multiple of " +
                         std::to_string(n));
    }
    distribution_plan p;
    if constexpr (Uneven == uneven_batch::pad) {
      // Padded shards all have ceil(batch / n) rows, so the real rows fill them in that size
      // (flax's pad_shard_unpad): the last shards hold the padding.
      const std::size_t per = (batch + n - 1) / n;
      std::size_t begin = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t count = begin < batch ? std::min(per, batch - begin) : 0;
        p.shares.push_back({devices[i], false, begin, count, per - count});
        begin += count;
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const row_range r = balanced_rows(batch, n, i);
        p.shares.push_back({devices[i], false, r.begin, r.count, 0});
      }
    }
    return p;
  }
};

/// The default data-parallel scheme: ragged (balanced shards, sizes differing by at most one),
/// which keeps every row.
using shard_batch = basic_shard_batch<uneven_batch::ragged>;

}  // namespace schemes

using schemes::shard_batch;
using schemes::single_device;

/// Checks that a plan (usually from a custom scheme) fits the tree and the devices: every
/// device is one of `devices`, and row ranges stay inside the batch. Throws config_error naming
/// the scheme and the bad share.
DEVICEKIT_DECL void validate_plan(const distribution_plan& plan, const tree_summary& tree,
                                  std::span<const device> devices, std::string_view scheme_name);

}  // namespace devicekit

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/distribute/scheme.ipp>
#endif
