// Runner of the GPU tests. Without a usable CUDA device it prints why and exits 77, which CTest
// reports as *skipped* (SKIP_RETURN_CODE), never as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <devicekit/devicekit.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  const devicekit::capabilities caps = devicekit::cuda_detector{}.detect(devicekit::settings{});
  if (caps.gpu_count == 0) {
    std::printf("SKIPPED: no CUDA device: %s\n", caps.fallback_reason.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
