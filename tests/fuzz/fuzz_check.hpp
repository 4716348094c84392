#pragma once
// What every fuzz target here holds a parser to. For any input, a parser of user input either
// returns a value inside its documented range or throws its documented exception (config_error)
// with a message that says what was wrong. A crash, a hang, a leak, undefined behaviour, another
// exception type, or a value outside the documented range is a finding: `fail` prints what broke
// and aborts, which libFuzzer reports as a crash and saves the input that caused it
// (https://llvm.org/docs/LibFuzzer.html, "Output"). Another exception escapes the target, and
// std::terminate aborts the same way.
#include <devicekit/core/error.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace fuzz {

/// The input as text: parsers take a string_view, and every byte (NUL included) is input.
inline std::string_view text_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void fail(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "fuzz check failed: %s\n  detail: %.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

inline void check(bool ok, const char* what, std::string_view detail = {}) {
  if (!ok) fail(what, detail);
}

/// Runs `parse`: its value, or nullopt when it threw config_error. The message must not be empty
/// and must contain `must_mention` (the name of the setting, or the text given), so that a user
/// can tell which value was wrong.
template <class Parse>
auto value_or_config_error(Parse&& parse, std::string_view must_mention = {}) -> std::optional<decltype(parse())> {
  try {
    return parse();
  } catch (const devicekit::config_error& e) {
    const std::string_view message = e.what();
    check(!message.empty(), "config_error with an empty message");
    check(message.find(must_mention) != std::string_view::npos, "the config_error does not name what was wrong",
          message);
    return std::nullopt;
  }
}

}  // namespace fuzz
