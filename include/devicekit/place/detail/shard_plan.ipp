#pragma once
/// \file
/// The definitions behind place/detail/shard_plan.hpp: the split of each dimension and the checks of the plan.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/detail/shard_plan.hpp>

#include <devicekit/core/error.hpp>
#include <devicekit/place/split.hpp>

#include <algorithm>
#include <map>
#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL part_range split_part(std::size_t n, std::size_t parts, std::size_t index, uneven policy) {
  if (policy == uneven::error || n % parts == 0) {
    const std::size_t per = n / parts;
    return {index * per, per, per};
  }
  if (policy == uneven::ragged) {
    const row_range r = balanced_rows(n, parts, index);
    return {r.begin, r.count, r.count};
  }
  // pad: every part ceil(n / parts) rows, filled in order, so the padding is at the end (flax).
  const std::size_t per = (n + parts - 1) / parts;
  const std::size_t begin = std::min(n, index * per);
  const std::size_t valid = std::min(per, n - begin);
  return {begin, valid, per};
}

DEVICEKIT_DECL part_range batch_part(std::size_t n, std::size_t parts, std::size_t index, uneven policy,
                                     std::span<const std::size_t> counts) {
  if (counts.empty()) return split_part(n, parts, index, policy);
  std::size_t begin = 0;
  for (std::size_t i = 0; i < index; ++i) begin += counts[i];
  return {begin, counts[index], counts[index]};
}

DEVICEKIT_DECL std::string uneven_message(std::string_view what, std::size_t axis, std::size_t n, std::size_t parts,
                                          const std::optional<std::string>& mesh_axis) {
  const std::size_t per = (n + parts - 1) / parts;
  return "shard: " + std::string(what) + "axis " + std::to_string(axis) + " of size " + std::to_string(n) +
         " cannot be split evenly over " + std::to_string(parts) + " devices" +
         (mesh_axis ? " (mesh axis '" + *mesh_axis + "')" : std::string()) + ": " + std::to_string(n) + " = " +
         std::to_string(parts) + " x " + std::to_string(n / parts) + " + " + std::to_string(n % parts) +
         "; use uneven::pad (adds " + std::to_string(per * parts - n) +
         " zero row(s), like flax) or uneven::ragged (shard sizes differ by at most one row)";
}

DEVICEKIT_DECL leaf_split shard_plan::split(std::size_t leaf, std::span<const std::size_t> coords) const {
  const leaf_info& l = info[leaf];
  leaf_split out;
  if (l.kind == leaf_kind::scalar) return out;
  for (std::size_t d = 0; d < l.shape.size(); ++d) {
    if (d < axes.dim_axis.size() && axes.dim_axis[d]) {
      const std::size_t axis = *axes.dim_axis[d];
      out.dims.push_back(d == axes.batch_dim
                             ? batch_part(l.shape[d], m->axis_size(axis), coords[axis], policy, batch_counts)
                             : split_part(l.shape[d], m->axis_size(axis), coords[axis], policy));
    } else {
      out.dims.push_back({0, l.shape[d], l.shape[d]});
    }
  }
  return out;
}

DEVICEKIT_DECL axis_plan shard_plan::plan_axes(const mesh& m, const partition_spec& spec) {
  axis_plan p;
  p.dim_axis.resize(spec.size());
  for (std::size_t d = 0; d < spec.size(); ++d) {
    if (!spec[d]) continue;
    const auto a = m.axis_index(*spec[d]);
    if (!a) {
      throw config_error("shard: " + spec.str() + " names mesh axis '" + *spec[d] + "', which " + m.str() +
                         " does not have");
    }
    for (std::size_t e = 0; e < d; ++e) {
      if (p.dim_axis[e] == a) {
        throw config_error("shard: " + spec.str() + " splits two dimensions over mesh axis '" + *spec[d] + "'");
      }
    }
    p.dim_axis[d] = a;
    if (!p.batch_dim) p.batch_dim = d;
  }
  return p;
}

DEVICEKIT_DECL std::size_t shard_plan::agreed_batch_size(std::optional<std::size_t> strict_axis) const {
  if (!axes.batch_dim) return 0;
  const std::size_t batch_dim = *axes.batch_dim;
  std::map<std::size_t, std::vector<std::string>> by_size;
  for (const auto& l : info) {
    if (l.kind == leaf_kind::scalar) continue;
    if (l.shape.size() <= batch_dim) {
      if (strict_axis) {
        throw config_error("shard: leaf '" + (l.path.empty() ? std::string("(root)") : l.path) + "' has rank " +
                           std::to_string(l.shape.size()) + ", so it has no axis " + std::to_string(batch_dim) +
                           " to split; shard along an axis every array leaf has");
      }
      continue;
    }
    by_size[l.shape[batch_dim]].push_back(l.path.empty() ? std::string("(root)") : l.path);
  }
  if (by_size.size() > 1) {
    std::string msg = "shard: the leaves disagree on the batch size along axis " + std::to_string(batch_dim) + ": ";
    bool first = true;
    for (const auto& [size, paths] : by_size) {
      if (!first) msg += "; ";
      first = false;
      for (std::size_t i = 0; i < paths.size(); ++i) msg += (i ? ", '" : "'") + paths[i] + "'";
      msg += (paths.size() == 1 ? " has " : " have ") + std::to_string(size);
    }
    throw config_error(msg + " (every leaf split along the batch axis must have the same size there)");
  }
  return by_size.empty() ? 0 : by_size.begin()->first;
}

DEVICEKIT_DECL void shard_plan::check_split(const partition_spec& spec) const {
  const axis_plan& p = axes;
  if (!batch_counts.empty()) {
    if (!p.batch_dim) throw config_error("shard: row counts were given, but " + spec.str() + " splits no dimension");
    check_row_counts(batch_counts, m->axis_size(*p.dim_axis[*p.batch_dim]), batch_size, "shard");
  }
  if (policy != uneven::error) return;
  const auto axis_name = [&](std::size_t axis) -> std::optional<std::string> {
    if (!mesh_given) return std::nullopt;
    return m->axis_name(axis);
  };
  if (p.batch_dim && batch_counts.empty()) {
    const std::size_t parts = m->axis_size(*p.dim_axis[*p.batch_dim]);
    if (batch_size % parts != 0) {
      throw config_error(uneven_message("", *p.batch_dim, batch_size, parts, axis_name(*p.dim_axis[*p.batch_dim])));
    }
  }
  for (const auto& l : info) {
    for (std::size_t d = 0; d < l.shape.size() && d < p.dim_axis.size(); ++d) {
      if (!p.dim_axis[d] || d == p.batch_dim || l.kind == leaf_kind::scalar) continue;
      const std::size_t parts = m->axis_size(*p.dim_axis[d]);
      if (l.shape[d] % parts != 0) {
        throw config_error(uneven_message("leaf '" + l.path + "': ", d, l.shape[d], parts, axis_name(*p.dim_axis[d])));
      }
    }
  }
}

}  // namespace devicekit::detail
