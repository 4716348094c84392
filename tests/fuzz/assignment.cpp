// device_assignment::parse, the compact replica x computation table "RxC:dev,dev,..." (such as
// "2x1:cuda:0,cuda:1"). Accepted only when R x C devices are listed, each as device::parse reads
// it; every cell of an accepted table is then readable with at(), and serialize() reads back.
#include "fuzz_check.hpp"

#include <devicekit/distribute/assignment.hpp>

namespace dk = devicekit;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::text_of(data, size);
  // "cannot parse device assignment ...", "device_assignment: R replicas x C computations need
  // ...", or a device's "cannot parse device ...": all name what was wrong.
  const auto got = fuzz::value_or_config_error([&] { return dk::device_assignment::parse(text); });
  if (!got) return 0;
  const unsigned __int128 cells =
      static_cast<unsigned __int128>(got->replica_count()) * static_cast<unsigned __int128>(got->computation_count());
  fuzz::check(cells == got->devices().size(),
              "device_assignment::parse accepted a table whose replicas x computations is not the number of devices",
              text);
  // (With no cells, one count may be huge: nothing to read, and no loop over it.)
  for (std::size_t r = 0; cells != 0 && r < got->replica_count(); ++r) {
    for (std::size_t c = 0; c < got->computation_count(); ++c) {
      fuzz::check(got->at(r, c) == got->devices()[r * got->computation_count() + c], "at(r, c) is not the cell", text);
    }
  }
  const auto outside = fuzz::value_or_config_error([&] { return got->at(got->replica_count(), 0); });
  fuzz::check(!outside, "at() read a replica past the last", text);
  const std::string written = got->serialize();
  const auto back = fuzz::value_or_config_error([&] { return dk::device_assignment::parse(written); });
  fuzz::check(back && *back == *got, "parse(serialize(a)) is not a", written);
  return 0;
}
