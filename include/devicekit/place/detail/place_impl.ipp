#pragma once
/// \file
/// The definitions behind place/detail/place_impl.hpp: the stream check.
/// Inline in a header-only build; compiled once under DEVICEKIT_SEPARATE_COMPILATION (core/config.hpp).
#include <devicekit/place/detail/place_impl.hpp>

#include <devicekit/core/detail/device_exists.hpp>
#include <devicekit/core/error.hpp>

#include <string>

namespace devicekit::detail {

DEVICEKIT_DECL void check_stream(stream_ref s, device dev, const char* operation) {
  const device sd = s.get_device();
  if (sd == dev || (sd.is_cpu() && dev.is_cpu())) return;
  // A stream_ref made for a device this process does not have is that error, not a mismatch (the
  // target device was checked where the call took it).
  check_device_exists(sd, operation);
  throw device_mismatch(std::string(operation) + ": the stream is on " + sd.str() + " but the target device is " +
                            dev.str() + "; pass a stream of " + dev.str() + " (or none)",
                        dev, sd);
}

}  // namespace devicekit::detail
