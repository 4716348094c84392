// device::parse, the parser behind DEVICEKIT_DEVICE and the device names of an assignment or a
// topology: `cpu`, `cpu:N`, `cuda`, `cuda:N`, `gpu`, `gpu:N` with 0 <= N <= INT_MAX.
#include "fuzz_check.hpp"

#include <devicekit/core/device.hpp>

#include <climits>

namespace {

namespace dk = devicekit;

/// The accepted forms, written out without device::parse's code. A "-0" ordinal is zero, which
/// std::from_chars reads as such (it takes a minus sign for signed types), so it is accepted too.
std::optional<dk::device> reference(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  dk::device_kind k{};
  if (kind == "cpu") {
    k = dk::device_kind::cpu;
  } else if (kind == "cuda" || kind == "gpu") {
    k = dk::device_kind::cuda;
  } else {
    return std::nullopt;
  }
  if (colon == std::string_view::npos) return dk::device(k, 0);
  std::string_view digits = text.substr(colon + 1);
  bool negative = false;
  if (!digits.empty() && digits.front() == '-') {
    negative = true;
    digits.remove_prefix(1);
  }
  if (digits.empty()) return std::nullopt;
  long long n = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
    if (n > INT_MAX) return std::nullopt;
  }
  if (negative && n != 0) return std::nullopt;
  return dk::device(k, static_cast<int>(n));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::text_of(data, size);
  const auto got = fuzz::value_or_config_error([&] { return dk::device::parse(text); }, "cannot parse device");
  const auto want = reference(text);
  fuzz::check(got.has_value() == want.has_value(),
              got ? "device::parse accepted a text outside the documented forms"
                  : "device::parse refused a text of the documented forms",
              text);
  if (!got) return 0;
  fuzz::check(*got == *want, "device::parse read another device than the text names", text);
  fuzz::check(got->ordinal() >= 0, "device::parse accepted a negative ordinal", text);
  // What str() writes, parse reads back: the form devicekit-info and the report print.
  fuzz::check(dk::device::parse(got->str()) == *got, "device::parse(d.str()) is not d", got->str());
  return 0;
}
