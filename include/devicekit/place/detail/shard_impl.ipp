#pragma once
/// \file
/// The definitions behind place/detail/shard_impl.hpp: waiting for the placement streams of a shard's devices.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/detail/shard_impl.hpp>

#include <devicekit/transfer/detail/streams.hpp>

#include <algorithm>

namespace devicekit::detail {

DEVICEKIT_DECL void finish_on(const std::vector<device>& devices) {
#if DEVICEKIT_HAS_CUDA
  std::vector<device> done;
  for (const device d : devices) {
    if (d.is_cuda() && std::find(done.begin(), done.end(), d) == done.end()) {
      host_wait(placement_stream(d));
      done.push_back(d);
    }
  }
#else
  (void)devices;
#endif
}

}  // namespace devicekit::detail
