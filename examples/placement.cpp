// placement: a Hana struct of shaped arrays placed on the default device, sharded over the devices
// with each uneven-batch policy, and a stream of batches prefetched while "training".
//
// Build: cmake --preset default && cmake --build --preset default --target placement
// Run:   ./build/examples/placement          (a GPU if there is one, else the CPU)
#include <devicekit/devicekit.hpp>

#include <boost/hana/define_struct.hpp>

#include <iostream>
#include <ranges>
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

batch make_batch(std::size_t n, int step) {
  batch b{images_t(images_t::extents_type(n)), labels_t(dk::md::dextents<std::size_t, 1>(n)), 0.01f};
  for (std::size_t i = 0; i < n; ++i) {
    b.labels(i) = static_cast<std::int32_t>((i + static_cast<std::size_t>(step)) % 10);
    b.images(i, 14, 14) = static_cast<float>(step) + static_cast<float>(i) / 100.f;
  }
  return b;
}

int main() try {
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

  // 2. Shard 10 rows over three devices (the GPUs, or the CPU three times), with each policy.
  std::vector<dk::device> three;
  for (std::size_t i = 0; i < 3; ++i) three.push_back(dm.devices()[i % dm.devices().size()]);
  try {
    (void)dk::shard(b, three, 0, dk::uneven::error);
  } catch (const dk::config_error& e) {
    std::cout << "uneven::error  -> " << e.what() << "\n";
  }
  const auto padded = dk::shard(b, three, 0, dk::uneven::pad);
  std::cout << "uneven::pad    -> " << padded.size() << " shards of " << padded[0].get<"images">().extent(0)
            << " rows, " << padded.pad << " padding row(s); real rows per shard:";
  for (auto v : padded.valid) std::cout << " " << v;
  const auto ragged = dk::shard(b, three, 0, dk::uneven::ragged);
  std::cout << "\nuneven::ragged -> rows per shard:";
  for (const auto& s : ragged) std::cout << " " << s.get<"labels">().extent(0);
  std::cout << "\n";

  // The mesh form: 1 x 3 mesh, batch over "data".
  const dk::mesh m(three, "data");
  const auto by_mesh = dk::shard(b, m, dk::partition_spec{"data"}, dk::uneven::ragged);
  std::cout << "mesh " << m.str() << " -> first shard's first label " << dk::to_host(by_mesh[0]).get<"labels">()(0)
            << "\n\n";

  // 3. Prefetch a stream of batches (generated lazily), two ahead of the loop.
  auto stream_of_batches =
      std::views::iota(1, 7) | std::views::transform([](int step) { return make_batch(32, step); });
  double checksum = 0;
  int steps = 0;
  for (auto& placed : dm.prefetch(stream_of_batches, 2)) {
    const batch host = dk::to_host(placed);  // a real program would launch kernels on `placed`
    checksum += host.images(0, 14, 14);
    ++steps;
  }
  std::cout << "prefetched " << steps << " batches onto " << dev << ", checksum " << checksum << "\n";
  return steps == 6 ? 0 : 1;
} catch (const dk::error& e) {
  std::cerr << "placement: " << e.what() << "\n";
  return 2;
}
