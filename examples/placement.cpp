// placement: a Hana struct of shaped arrays placed on the default device, sharded over the devices
// with each uneven-batch policy, and a stream of batches prefetched while "training". Every value
// that comes back from a device is compared with the batch generator's; any difference is printed
// and makes the program exit with status 1.
//
// Build: cmake --preset default && cmake --build --preset default --target placement
// Run:   ./build/examples/placement          (a GPU if there is one, else the CPU)
#include <devicekit/devicekit.hpp>

#include <boost/hana/define_struct.hpp>

#include <iostream>
#include <ranges>
#include <sstream>
#include <string>
#include <vector>

#if !DEVICEKIT_HAS_MDSPAN  // tests/CMakeLists.txt leaves this example out of such a build
#  error "this example's shaped arrays need an mdspan: CCCL's headers (scripts/lib.sh fetches them) or <mdspan>"
#endif

namespace dk = devicekit;

using images_t = dk::shaped_array<float, dk::md::extents<std::size_t, dk::md::dynamic_extent, 28, 28>>;
using labels_t = dk::shaped_array<std::int32_t, dk::md::dextents<std::size_t, 1>>;

struct batch {
  BOOST_HANA_DEFINE_STRUCT(batch, (images_t, images), (labels_t, labels), (float, learning_rate));
};

/// Row i of batch `step`: label (i + step) % 10; one lit pixel, step + i / 100; the rest 0.
std::int32_t label_of(std::size_t i, int step) {
  return static_cast<std::int32_t>((i + static_cast<std::size_t>(step)) % 10);
}
float pixel_of(std::size_t i, int step) { return static_cast<float>(step) + static_cast<float>(i) / 100.f; }

batch make_batch(std::size_t n, int step) {
  batch b{images_t(images_t::extents_type(n)), labels_t(dk::md::dextents<std::size_t, 1>(n)), 0.01f};
  for (std::size_t i = 0; i < n; ++i) {
    b.labels(i) = label_of(i, step);
    b.images(i, 14, 14) = pixel_of(i, step);
  }
  return b;
}

/// The first element where `got` differs from `want` ("images[3,14,14] = 0, expected 3.03"), or ""
/// when every element matches.
std::string first_difference(const batch& got, const batch& want) {
  std::ostringstream out;
  if (got.images.extent(0) != want.images.extent(0) || got.labels.extent(0) != want.labels.extent(0)) {
    out << got.images.extent(0) << " rows, expected " << want.images.extent(0);
    return out.str();
  }
  for (std::size_t i = 0; i < want.labels.extent(0); ++i) {
    if (got.labels(i) != want.labels(i)) {
      out << "labels[" << i << "] = " << got.labels(i) << ", expected " << want.labels(i);
      return out.str();
    }
    for (std::size_t y = 0; y < 28; ++y) {
      for (std::size_t x = 0; x < 28; ++x) {
        if (got.images(i, y, x) != want.images(i, y, x)) {
          out << "images[" << i << "," << y << "," << x << "] = " << got.images(i, y, x) << ", expected "
              << want.images(i, y, x);
          return out.str();
        }
      }
    }
  }
  if (got.learning_rate != want.learning_rate) {
    out << "learning_rate = " << got.learning_rate << ", expected " << want.learning_rate;
  }
  return out.str();
}

int main() try {
  int failures = 0;
  const auto fail = [&](const std::string& what) {
    std::cout << "placement: " << what << "\n";
    ++failures;
  };

  dk::device_manager<> dm;
  const dk::device dev = dm.default_device();
  std::cout << "devices:";
  for (const auto& d : dm.devices()) std::cout << " " << d;
  std::cout << (dm.has_gpu() ? "" : "  (no GPU: " + dm.fallback_reason() + ")") << "\n\n";

  // 1. Place a whole batch: one block, one staged transfer.
  const batch b = make_batch(10, 0);
  for (const auto& leaf : dk::leaves(b, "batch")) {
    std::cout << "  " << leaf.path << ": " << leaf.element_type << " x " << leaf.size << " (" << leaf.bytes << " B)\n";
  }
  // Shaped leaves keep their type when placed, so the placed tree is a `batch` too (its arrays now
  // on the device); a member that changes type would make it a dk::mapped_struct<batch, ...>.
  const batch on_dev = dm.place(b);
  std::cout << "placed " << dk::total_bytes(b) << " bytes on " << *dk::device_of(on_dev)
            << "; images extent 0 = " << on_dev.images.extent(0) << "\n";
  const batch back = dk::to_host(on_dev);
  std::cout << "round trip: label[3] = " << back.labels(3) << ", pixel = " << back.images(3, 14, 14) << "\n\n";
  if (const auto diff = first_difference(back, b); !diff.empty()) fail("round trip read back as " + diff);

  // 2. Shard 10 rows over three devices (the GPUs, or the CPU three times), with each policy.
  // Each shard holds consecutive rows of b: shard s starts where shard s - 1's real rows end.
  std::vector<dk::device> three;
  for (std::size_t i = 0; i < 3; ++i) three.push_back(dm.devices()[i % dm.devices().size()]);
  const auto check_rows = [&](const std::string& policy, const auto& shards,
                              const std::vector<std::size_t>& real_rows) {
    std::size_t first = 0;
    for (std::size_t s = 0; s < shards.size(); ++s) {
      const auto labels = dk::to_host(shards[s]).template get<"labels">();
      for (std::size_t i = 0; i < real_rows[s]; ++i) {
        if (labels(i) != label_of(first + i, 0)) {
          fail(policy + ": shard " + std::to_string(s) + " label[" + std::to_string(i) + "] read back as " +
               std::to_string(labels(i)) + ", expected " + std::to_string(label_of(first + i, 0)));
          break;
        }
      }
      first += real_rows[s];
    }
    if (first != 10) fail(policy + ": the shards hold " + std::to_string(first) + " real rows, expected 10");
  };
  try {
    (void)dk::shard(b, three, 0, dk::uneven::error);
    fail("uneven::error accepted 10 rows over 3 devices");
  } catch (const dk::config_error& e) {
    std::cout << "uneven::error  -> " << e.what() << "\n";
  }
  const auto padded = dk::shard(b, three, 0, dk::uneven::pad);
  std::cout << "uneven::pad    -> " << padded.size() << " shards of " << padded[0].get<"images">().extent(0)
            << " rows, " << padded.pad << " padding row(s); real rows per shard:";
  for (auto v : padded.valid) std::cout << " " << v;
  check_rows("uneven::pad", padded, padded.valid);
  const auto ragged = dk::shard(b, three, 0, dk::uneven::ragged);
  std::cout << "\nuneven::ragged -> rows per shard:";
  std::vector<std::size_t> ragged_rows;
  for (const auto& s : ragged) ragged_rows.push_back(s.get<"labels">().extent(0));
  for (auto v : ragged_rows) std::cout << " " << v;
  std::cout << "\n";
  check_rows("uneven::ragged", ragged, ragged_rows);

  // The mesh form: 1 x 3 mesh, batch over "data".
  const dk::mesh m(three, "data");
  const auto by_mesh = dk::shard(b, m, dk::partition_spec{"data"}, dk::uneven::ragged);
  std::cout << "mesh " << m.str() << " -> first shard's first label " << dk::to_host(by_mesh[0]).get<"labels">()(0)
            << "\n\n";
  std::vector<std::size_t> mesh_rows;
  for (const auto& s : by_mesh) mesh_rows.push_back(s.get<"labels">().extent(0));
  check_rows("mesh", by_mesh, mesh_rows);

  // 3. Prefetch a stream of batches (generated lazily), two ahead of the loop. Each one read back
  // must be exactly the batch the generator made for its step.
  auto stream_of_batches =
      std::views::iota(1, 7) | std::views::transform([](int step) { return make_batch(32, step); });
  double checksum = 0, expected_checksum = 0;
  int steps = 0;
  for (auto& placed : dm.prefetch(stream_of_batches, 2)) {
    ++steps;
    const batch host = dk::to_host(placed);  // a real program would launch kernels on `placed`
    checksum += host.images(0, 14, 14);
    expected_checksum += pixel_of(0, steps);
    if (const auto diff = first_difference(host, make_batch(32, steps)); !diff.empty()) {
      fail("prefetched batch " + std::to_string(steps) + " read back as " + diff);
    }
  }
  std::cout << "prefetched " << steps << " batches onto " << dev << ", checksum " << checksum << " (expected "
            << expected_checksum << ")\n";
  if (steps != 6) fail("prefetched " + std::to_string(steps) + " batches, expected 6");
  if (failures > 0) {
    std::cout << "placement: FAILED (" << failures << " wrong result(s))\n";
    return 1;
  }
  return 0;
} catch (const dk::error& e) {
  std::cerr << "placement: " << e.what() << "\n";
  return 2;
}
