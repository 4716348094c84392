#include <devicekit/devicekit.hpp>

#include <iostream>

int main() {
  devicekit::device_manager<> dm{devicekit::settings{}};
  std::cout << "consumer: default device " << dm.default_device() << "\n";
  devicekit::print_device_info(dm);
  return 0;
}
