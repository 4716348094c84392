// Must NOT compile: no_plan has a name() but no plan(), so it is not a distribution scheme. The
// check (tests/CMakeLists.txt) requires the one-line message of device_manager's static_assert.
#include <devicekit/manager.hpp>

#include <string_view>

struct no_plan {
  static constexpr std::string_view name() noexcept { return "no_plan"; }
};

int main() {
  devicekit::device_manager<devicekit::cpu_detector, devicekit::balanced, no_plan> dm{devicekit::settings{}};
  return dm.device_count();
}
