// Built against devicekit::nccl: devicekit's NCCL backend compiles with the nccl.h that the
// package config found, and the libnccl it links is the same release as that header.
#include <devicekit/distribute/nccl.hpp>

#include <nccl.h>

#include <cstdio>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) {
    std::puts("consumer: ncclGetVersion failed");
    return 1;
  }
  std::printf("consumer: nccl.h %d, libnccl %d\n", NCCL_VERSION_CODE, version);
  return version == NCCL_VERSION_CODE ? 0 : 1;
}
