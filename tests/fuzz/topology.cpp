// device_topology::deserialize, the JSON reader of what processes exchange to build a global
// device list (core/topology.hpp): the text comes from another process, a file, or a user. Any
// text is either a topology whose device list is valid (process index in [0, count), ids and
// devices unique) or a config_error; an accepted topology writes text that reads back the same.
#include "fuzz_check.hpp"

#include <devicekit/core/topology.hpp>

#include <set>

namespace dk = devicekit;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::text_of(data, size);
  // The two messages it has: the parser's ("cannot parse device topology at character N") and
  // the device list's ("process index ... is invalid", "device_list: ..."), and device::parse's.
  const auto got = fuzz::value_or_config_error([&] { return dk::device_topology::deserialize(text); });
  if (!got) return 0;
  const dk::device_list& list = got->devices;
  fuzz::check(list.process_count() >= 1 && list.current_process() >= 0 && list.current_process() < list.process_count(),
              "deserialize accepted a process index outside [0, process count)", text);
  std::set<int> ids;
  for (const auto& d : list) {
    fuzz::check(d.process_index >= 0 && d.process_index < list.process_count(),
                "deserialize accepted a device of a process outside [0, process count)", text);
    fuzz::check(ids.insert(d.id).second, "deserialize accepted a global id twice", text);
    fuzz::check(d.local.ordinal() >= 0, "deserialize accepted a negative ordinal", text);
  }
  // serialize drops control characters from strings, so the first round may shorten them; from
  // then on the text is stable.
  const std::string once = got->serialize();
  const auto again = fuzz::value_or_config_error([&] { return dk::device_topology::deserialize(once); });
  fuzz::check(again.has_value(), "deserialize refused what serialize wrote", once);
  fuzz::check(again->serialize() == once, "serialize(deserialize(text)) changed on the second round", once);
  return 0;
}
