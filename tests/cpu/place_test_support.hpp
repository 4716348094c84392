#pragma once
// Shared by the host tests of place/: a Hana struct of a shaped batch, labels
// and a scalar, and a placement resource that counts what it is asked for.
#include <devicekit/place/place.hpp>
#include <devicekit/tree/hana.hpp>

#include <boost/hana/define_struct.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#if DEVICEKIT_HAS_MDSPAN
namespace place_test {
using images_t =
    devicekit::shaped_array<float, devicekit::md::extents<std::size_t, devicekit::md::dynamic_extent, 2, 3>>;
struct batch {
  BOOST_HANA_DEFINE_STRUCT(batch, (images_t, images), (std::vector<std::int32_t>, labels), (double, lr));
};

/// A batch of `n` rows whose values all derive from `seed`: images seed * 1000
/// + i, labels seed * 100 + i, lr 0.5 * seed.
inline batch make_batch(std::size_t n, int seed = 1) {
  batch b{images_t(images_t::extents_type(n)), std::vector<std::int32_t>(n), 0.5 * seed};
  for (std::size_t i = 0; i < b.images.size(); ++i)
    b.images.data()[i] = static_cast<float>(seed * 1000 + static_cast<int>(i));
  for (std::size_t i = 0; i < n; ++i) b.labels[i] = static_cast<std::int32_t>(seed * 100 + static_cast<int>(i));
  return b;
}
}  // namespace place_test
#endif

namespace place_test {
/// Counts what placement asks of it; memory from the heap.
struct counting_resource {
  std::atomic<int> allocations{0};
  std::atomic<int> deallocations{0};
  std::atomic<std::size_t> live_bytes{0};
  std::size_t last_alignment = 0;
  void* allocate(std::size_t bytes, std::size_t alignment) {
    ++allocations;
    live_bytes += bytes;
    last_alignment = alignment;
    return ::operator new (bytes, std::align_val_t{alignment});
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment) {
    ++deallocations;
    live_bytes -= bytes;
    ::operator delete (p, std::align_val_t{alignment});
  }
};
}  // namespace place_test
