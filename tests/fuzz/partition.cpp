// The mesh and partition spec of shard's mesh form (place/mesh.hpp), and the row counts of a
// custom split: what a user gives shard before any memory is touched. The input builds a mesh
// (devices, shape, axis names), a partition spec, leaves' shapes, an uneven policy and row
// counts; shard's plan (place/detail/shard_plan.hpp, steps 1-3) then accepts them or throws
// config_error. An accepted mesh holds exactly its shape's devices on distinct, named axes; an
// accepted plan gives every device a part of every leaf inside the leaf, and the parts of a split
// dimension cover it once, in order.
#include "fuzz_check.hpp"

#include <devicekit/place/detail/shard_plan.hpp>
#include <devicekit/place/mesh.hpp>
#include <devicekit/place/split.hpp>

#include <fuzzer/FuzzedDataProvider.h>

#include <vector>

namespace {

namespace dk = devicekit;
namespace detail = devicekit::detail;

/// What became of an input, printed only in a build with -DFUZZ_DESCRIBE (how the seeds in
/// corpus/partition/ were sorted into good and bad ones and named).
inline void outcome([[maybe_unused]] const char* what) {
#if defined(FUZZ_DESCRIBE)
  std::fprintf(stderr, "outcome: %s\n", what);
#endif
}

/// A count: small (what a real mesh or batch has), a small negative number converted to size_t
/// (what `n - 1` gives for n = 0, or -1 read into a size_t), or any 64-bit value.
std::size_t count(FuzzedDataProvider& in, std::size_t small) {
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: return in.ConsumeIntegralInRange<std::size_t>(0, small);
    case 1: return std::size_t{0} - in.ConsumeIntegralInRange<std::size_t>(1, small);
    default: return in.ConsumeIntegral<std::size_t>();
  }
}

std::optional<dk::mesh> make_mesh(FuzzedDataProvider& in) {
  std::vector<dk::device> devices(in.ConsumeIntegralInRange<std::size_t>(0, 8));
  for (auto& d : devices) {
    d = dk::device(in.ConsumeBool() ? dk::device_kind::cuda : dk::device_kind::cpu,
                   in.ConsumeIntegralInRange<int>(0, 7));
  }
  const bool two_d = in.ConsumeBool();
  std::string row = in.ConsumeRandomLengthString(8);
  if (!two_d) {
    auto m = fuzz::value_or_config_error([&] { return dk::mesh(devices, row); }, "mesh: ");
    const bool valid = !devices.empty() && !row.empty();
    fuzz::check(m.has_value() == valid,
                m ? "mesh accepted an empty mesh or an unnamed axis" : "mesh refused a 1-D mesh");
    return m;
  }
  const std::size_t rows = count(in, 8);
  const std::size_t cols = count(in, 8);
  std::string col = in.ConsumeRandomLengthString(8);
  auto m = fuzz::value_or_config_error([&] { return dk::mesh(devices, rows, cols, row, col); }, "mesh: ");
  const bool valid = !devices.empty() && !row.empty() && !col.empty() && row != col &&
                     static_cast<unsigned __int128>(rows) * cols == devices.size();
  fuzz::check(m.has_value() == valid, m ? "mesh accepted a shape that does not hold its devices, or bad axis names"
                                        : "mesh refused a valid 2-D mesh");
  return m;
}

dk::partition_spec make_spec(FuzzedDataProvider& in, const dk::mesh& m) {
  std::vector<std::optional<std::string>> dims(in.ConsumeIntegralInRange<std::size_t>(0, 4));
  for (auto& d : dims) {
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
      case 0: break;  // not split
      case 1: d = m.axis_name(in.ConsumeIntegralInRange<std::size_t>(0, m.rank() - 1)); break;
      default: d = in.ConsumeRandomLengthString(8); break;
    }
  }
  return dk::partition_spec(std::move(dims));
}

/// Step 1's rule, written out: every named axis is the mesh's, and no axis is named twice.
bool spec_valid(const dk::mesh& m, const dk::partition_spec& spec) {
  std::vector<std::size_t> used;
  for (std::size_t d = 0; d < spec.size(); ++d) {
    if (!spec[d]) continue;
    const auto a = m.axis_index(*spec[d]);
    if (!a) return false;
    for (const auto u : used) {
      if (u == *a) return false;
    }
    used.push_back(*a);
  }
  return true;
}

void check_plan(const detail::shard_plan& plan, const dk::mesh& m) {
  for (std::size_t i = 0; i < m.size(); ++i) {
    const std::vector<std::size_t> at = m.coords(i);
    for (std::size_t a = 0; a < m.rank(); ++a) fuzz::check(at[a] < m.axis_size(a), "mesh::coords outside the shape");
  }
  for (std::size_t l = 0; l < plan.info.size(); ++l) {
    const auto& shape = plan.info[l].shape;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const bool split = d < plan.axes.dim_axis.size() && plan.axes.dim_axis[d].has_value();
      const std::size_t axis = split ? *plan.axes.dim_axis[d] : 0;
      // Walk the devices along the axis (the other coordinates at 0): their parts tile the dimension.
      const std::size_t parts = split ? m.axis_size(axis) : 1;
      std::size_t next = 0;
      for (std::size_t p = 0; p < parts; ++p) {
        std::vector<std::size_t> at(m.rank(), 0);
        if (split) at[axis] = p;
        const detail::part_range r = plan.split(l, at).dim(d, shape[d]);
        fuzz::check(r.begin == next, "a part does not start where the previous one ended");
        fuzz::check(r.valid <= shape[d] - r.begin, "a part reaches past its leaf");
        fuzz::check(r.size >= r.valid, "a part is smaller than its rows");
        if (plan.policy == dk::uneven::error) fuzz::check(r.size == r.valid, "uneven::error padded a part");
        next = r.begin + r.valid;
      }
      fuzz::check(next == shape[d], "the parts do not cover the dimension");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const auto m = make_mesh(in);
  if (!m) return outcome("bad-mesh"), 0;
  const dk::partition_spec spec = make_spec(in, *m);

  // Leaves: a scalar, or an array of rank 1-3 with small dimensions (they are allocated nowhere).
  std::vector<dk::leaf_info> leaves(in.ConsumeIntegralInRange<std::size_t>(0, 3));
  for (auto& l : leaves) {
    l.path = "leaf";
    const std::size_t rank = in.ConsumeIntegralInRange<std::size_t>(0, 3);
    l.kind = rank == 0 ? dk::leaf_kind::scalar : dk::leaf_kind::shaped;
    for (std::size_t d = 0; d < rank; ++d) l.shape.push_back(in.ConsumeIntegralInRange<std::size_t>(0, 64));
  }
  const auto policy = static_cast<dk::uneven>(in.ConsumeIntegralInRange<int>(0, 2));
  std::vector<std::size_t> counts;
  if (in.ConsumeBool()) {
    counts.resize(in.ConsumeIntegralInRange<std::size_t>(0, 8));
    for (auto& c : counts) c = count(in, 64);
  }

  // shard_plan::make's steps on leaves given directly (make itself reads them from a tree).
  detail::shard_plan plan;
  plan.m = &*m;
  plan.policy = policy;
  plan.batch_counts = counts;
  const bool planned = fuzz::value_or_config_error([&] {
                         plan.axes = detail::shard_plan::plan_axes(*m, spec);
                         plan.info = leaves;
                         plan.batch_size = plan.agreed_batch_size(std::nullopt);
                         plan.check_split(spec);
                         return true;
                       }).has_value();
  if (!spec_valid(*m, spec)) {
    fuzz::check(!planned, "shard's plan accepted a spec naming an unknown axis or one axis twice");
    return outcome("bad-spec"), 0;
  }
  if (!planned) return outcome(counts.empty() ? "bad-split" : "bad-counts"), 0;
  if (!counts.empty() && plan.axes.batch_dim) {
    // Accepted row counts: one per part of the batch axis, summing to the batch, without overflow.
    unsigned __int128 sum = 0;
    for (const auto c : counts) sum += c;
    fuzz::check(counts.size() == m->axis_size(*plan.axes.dim_axis[*plan.axes.batch_dim]) && sum == plan.batch_size,
                "shard's plan accepted row counts that are not one per device summing to the batch");
  }
  check_plan(plan, *m);
  outcome(!plan.axes.batch_dim ? "good-unsplit" : counts.empty() ? "good-split" : "good-counts");
  return 0;
}
