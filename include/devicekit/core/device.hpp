#pragma once
/// \file
/// `device`: a device kind (cpu or cuda) and an ordinal, printed and parsed as `cuda:1`.
#include <devicekit/core/config_error.hpp>

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace devicekit {

/// The kinds of device devicekit places data on. The CPU is a real device kind: every facility
/// works on it.
enum class device_kind : std::uint8_t { cpu, cuda };

[[nodiscard]] constexpr std::string_view to_string(device_kind k) noexcept {
  return k == device_kind::cuda ? "cuda" : "cpu";
}

/// A device: kind plus ordinal. Ordinals of cuda devices are CUDA runtime ordinals (after
/// CUDA_VISIBLE_DEVICES); the host is `cpu:0`.
class device {
 public:
  constexpr device() noexcept = default;
  constexpr device(device_kind kind, int ordinal) noexcept : kind_(kind), ordinal_(ordinal) {}

  [[nodiscard]] static constexpr device cpu(int ordinal = 0) noexcept { return {device_kind::cpu, ordinal}; }
  [[nodiscard]] static constexpr device cuda(int ordinal = 0) noexcept { return {device_kind::cuda, ordinal}; }

  /// Parses `cpu`, `cpu:0`, `cuda`, `cuda:3` (also `gpu:3`, as JAX writes it). Anything else is a
  /// config_error that quotes the text and shows the accepted forms.
  [[nodiscard]] static device parse(std::string_view text);

  [[nodiscard]] constexpr device_kind kind() const noexcept { return kind_; }
  [[nodiscard]] constexpr int ordinal() const noexcept { return ordinal_; }
  [[nodiscard]] constexpr bool is_cpu() const noexcept { return kind_ == device_kind::cpu; }
  [[nodiscard]] constexpr bool is_cuda() const noexcept { return kind_ == device_kind::cuda; }

  [[nodiscard]] std::string str() const { return std::string(to_string(kind_)) + ":" + std::to_string(ordinal_); }

  // == is defaulted explicitly: nvcc does not synthesise it from a defaulted <=> on a friend.
  friend constexpr bool operator==(const device&, const device&) noexcept = default;
  friend constexpr auto operator<=>(const device&, const device&) noexcept = default;
  friend std::ostream& operator<<(std::ostream& os, const device& d) { return os << d.str(); }

 private:
  device_kind kind_ = device_kind::cpu;
  int ordinal_ = 0;
};

}  // namespace devicekit

template <>
struct std::hash<devicekit::device> {
  std::size_t operator()(const devicekit::device& d) const noexcept {
    return std::hash<int>{}(d.ordinal() * 2 + (d.is_cuda() ? 1 : 0));
  }
};

#if DEVICEKIT_DEFINE_IMPL
#  include <devicekit/core/device.ipp>
#endif
