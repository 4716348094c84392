// runtime_fraction_range::parse, XLA's memory fraction notation: "0.8" (a cap, no preallocation)
// or "start-cap" such as "0.75-0.90", split at the first '-' after the first character, each
// part a decimal number as std::from_chars reads it (no '+', no spaces, no hexadecimal). Accepted
// only with 0 <= start <= cap <= 1 and cap > 0, both finite.
#include "fuzz_check.hpp"

#include <devicekit/memory/strategy.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace {

namespace dk = devicekit;

/// A number as the C++ grammar for std::from_chars (chars_format::general) writes it: an optional
/// minus, then digits with an optional point (at least one digit), an optional exponent; or inf,
/// infinity or nan(...) in any case. Its value comes from strtod, which reads the same grammar;
/// where strtod reports ERANGE (an overflow, or an underflow to a subnormal or zero), whether
/// from_chars calls it out of range is the standard library's choice, so the reference leaves such
/// a part undecided (`std::nullopt` inside).
std::optional<std::optional<double>> number(std::string_view part) {
  std::string_view rest = part;
  if (!rest.empty() && rest.front() == '-') rest.remove_prefix(1);
  std::string lower;
  for (const char c : rest) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  bool special = lower == "inf" || lower == "infinity" || lower == "nan";
  if (lower.size() > 4 && lower.starts_with("nan(") && lower.back() == ')') {
    special = true;
    for (const char c : std::string_view(lower).substr(4, lower.size() - 5)) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') special = false;
    }
  }
  if (!special) {
    std::size_t i = 0;
    std::size_t digits = 0;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i, ++digits;
    if (i < rest.size() && rest[i] == '.') {
      ++i;
      while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i, ++digits;
    }
    if (digits == 0) return std::nullopt;
    if (i < rest.size() && (rest[i] == 'e' || rest[i] == 'E')) {
      ++i;
      if (i < rest.size() && (rest[i] == '+' || rest[i] == '-')) ++i;
      std::size_t exp_digits = 0;
      while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i, ++exp_digits;
      if (exp_digits == 0) return std::nullopt;
    }
    if (i != rest.size()) return std::nullopt;
  }
  const std::string copy(part);
  errno = 0;
  const double v = std::strtod(copy.c_str(), nullptr);
  if (errno == ERANGE) return std::optional<double>{};
  return std::optional<double>{v};
}

struct range {
  double start;
  double cap;
};

/// The range the text documents, nullopt for a text to refuse, or `undecided` (a part that
/// strtod reports out of range).
struct expectation {
  bool undecided = false;
  std::optional<range> value;
};

expectation reference(std::string_view text) {
  const auto dash = text.find('-', 1);
  std::optional<std::optional<double>> start = std::optional<double>{0.0};
  std::optional<std::optional<double>> cap;
  if (dash == std::string_view::npos) {
    cap = number(text);
  } else {
    start = number(text.substr(0, dash));
    cap = number(text.substr(dash + 1));
  }
  if (!start || !cap) return {};
  if (!*start || !*cap) return {true, std::nullopt};
  const double s = **start;
  const double c = **cap;
  if (!std::isfinite(c) || !(c > 0.0) || c > 1.0) return {};
  if (!std::isfinite(s) || s < 0.0 || s > c) return {};
  return {false, range{s, c}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::text_of(data, size);
  const auto got =
      fuzz::value_or_config_error([&] { return dk::runtime_fraction_range::parse(text); }, "memory fraction");
  const expectation want = reference(text);
  fuzz::check(want.undecided || got.has_value() == want.value.has_value(),
              got ? "runtime_fraction_range::parse accepted a text outside the documented form or range"
                  : "runtime_fraction_range::parse refused a documented range",
              text);
  if (!got) return 0;
  const double start = got->start_fraction();
  const double cap = got->fraction();
  fuzz::check(std::isfinite(start) && std::isfinite(cap) && start >= 0.0 && start <= cap && cap > 0.0 && cap <= 1.0,
              "runtime_fraction_range::parse returned a range outside 0 <= start <= cap <= 1, cap > 0", text);
  if (!want.undecided) {
    fuzz::check(start == want.value->start && cap == want.value->cap,
                "runtime_fraction_range::parse read other numbers", text);
  }
  return 0;
}
