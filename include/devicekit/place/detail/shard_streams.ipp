#pragma once
/// \file
/// The definitions behind place/detail/shard_streams.hpp: the fork streams, the fork and join, the
/// capture checks and one device's fill.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/detail/shard_streams.hpp>

#if DEVICEKIT_HAS_CUDA
#  include <devicekit/core/capture.hpp>
#  include <devicekit/core/error.hpp>
#  include <devicekit/transfer/detail/copy.hpp>
#  include <devicekit/transfer/detail/device_to_device.hpp>
#  include <devicekit/transfer/detail/host_to_device.hpp>
#  include <devicekit/transfer/detail/streams.hpp>

#  include <algorithm>
#  include <atomic>
#  include <map>

namespace devicekit::detail {

DEVICEKIT_DECL const stream& fork_stream(device dev) {
  thread_local std::map<int, stream> streams;
  auto it = streams.find(dev.ordinal());
  if (it == streams.end()) it = streams.emplace(dev.ordinal(), stream(dev)).first;
  return it->second;
}

DEVICEKIT_DECL stream_fork::stream_fork(stream_ref origin, const std::vector<device>& devices) : origin_(origin) {
  for (const device d : devices) {
    if (!d.is_cuda() || std::any_of(forks_.begin(), forks_.end(), [&](const auto& f) { return f.first == d; })) {
      continue;
    }
    if (origin_.get_device() == d) {
      forks_.emplace_back(d, origin_.native_handle());
      continue;
    }
    const native_stream_handle fork = fork_stream(d).native_handle();
    {
      // The event is recorded on the origin (its device current) and waited for by the fork.
      scoped_device on(origin_.get_device().ordinal());
      stream_waits_for(fork, origin_.native_handle());
    }
    forks_.emplace_back(d, fork);
  }
}

DEVICEKIT_DECL stream_fork::~stream_fork() {
  if (joined_) return;
  // An exception left forks queued: join them anyway, so that the origin is not left behind
  // them (and a capture is not left with a fork that never rejoins).
  for (const auto& [d, h] : forks_) {
    if (h == origin_.native_handle()) continue;
    scoped_device on(d.ordinal(), std::nothrow);
    cudaEvent_t ev = nullptr;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) continue;
    if (cudaEventRecord(ev, h) == cudaSuccess) (void)cudaStreamWaitEvent(origin_.native_handle(), ev, 0);
    (void)cudaEventDestroy(ev);
  }
}

DEVICEKIT_DECL native_stream_handle stream_fork::on(device dev) const {
  for (const auto& [d, h] : forks_) {
    if (d == dev) return h;
  }
  throw config_error("stream_fork: " + dev.str() + " was not forked onto");
}

DEVICEKIT_DECL void stream_fork::join() {
  joined_ = true;
  for (const auto& [d, h] : forks_) {
    if (h == origin_.native_handle()) continue;
    scoped_device on(d.ordinal());
    stream_waits_for(origin_.native_handle(), h);
  }
}

DEVICEKIT_DECL void check_capturable(const std::string& operation, std::span<const device_fill> fills) {
  // The cpu destinations first: no choice of devices with peer access would make those capturable.
  for (const device_fill& f : fills) {
    if (f.dev.is_cpu()) {
      refuse_in_capture(operation, "a destination is on " + f.dev.str() + ", whose copy the host makes at call time",
                        "leave cpu devices out of the devices the graph writes, or make this call outside the capture");
    }
  }
  for (const device_fill& f : fills) {
    for (const copy_run& r : f.runs) {
      if (r.bytes == 0) continue;
      if (r.src_device.is_cpu() && !is_pinned_host(r.src)) {
        refuse_in_capture(operation,
                          "the source lies in pageable host memory, which the copy engine reads only through "
                          "staging the host does at call time",
                          "place the source on a GPU (or in pinned memory: memory_kind::pinned_host) before the "
                          "capture, and write each step's data into it");
      }
      if (r.src_device.is_cuda() && r.src_device != f.dev &&
          !ensure_peer_access(f.dev.ordinal(), r.src_device.ordinal())) {
        refuse_in_capture(operation,
                          r.src_device.str() + " and " + f.dev.str() +
                              " have no peer access, so the bytes would pass through pinned staging on the host",
                          "shard or replicate outside the capture (eagerly, or with the stream-less call), or "
                          "only over devices with peer access to the source (can_access_peer)");
      }
    }
  }
}

DEVICEKIT_DECL void queue_fill(const device_fill& fill, native_stream_handle s) {
  scoped_device on(fill.dev.ordinal());
  for (const auto& [p, bytes] : fill.zero) {
    if (bytes == 0) continue;
    DEVICEKIT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s));
    stats().device_memsets.fetch_add(1, std::memory_order_relaxed);
  }
  copy_runs(fill.runs, fill.dev, s);
}

}  // namespace devicekit::detail

#endif  // DEVICEKIT_HAS_CUDA
