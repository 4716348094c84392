// RMM's own memory-resource test suites (third_party/rmm/tests/mr, unchanged from RMM's source at
// the release of the librmm wheel devicekit is tested with), run against devicekit's resources:
// every typed suite RMM instantiates for its device resources (CcclMrRefTest, its allocation and
// multithreaded suites), with one fixture per way devicekit meets RMM:
//   DevicekitPool        a pool of devicekit's own as RMM's resource (rmm_resource, shared owner)
//   DevicekitProcessPool the process's pool of the device (default_memory), borrowed
//   DevicekitOverRmm     a devicekit pool whose upstream is RMM's cuda_memory_resource
//                        (rmm_upstream), itself RMM's resource: both ways at once
// Run on simulated GPUs (label sim) and on a GPU when there is one.
#include "mr/cccl_mr_ref_test_allocation.hpp"
#include "mr/cccl_mr_ref_test_basic.hpp"
#include "mr/cccl_mr_ref_test_mt.hpp"

#include <devicekit/memory/pool.hpp>
#include <devicekit/memory/registry.hpp>
#include <devicekit/rmm/resource.hpp>

#include <rmm/cuda_device.hpp>
#include <rmm/cuda_stream.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>

#include <memory>

namespace dk = devicekit;

namespace rmm::test {

namespace {
int current_ordinal() { return rmm::get_current_cuda_device().value(); }
}  // namespace

struct DevicekitPool : public ::testing::Test {
  dk::rmm_resource mr{
      std::make_shared<dk::memory_pool<dk::cuda_device_resource>>(dk::cuda_device_resource(current_ordinal()))};
  rmm::device_async_resource_ref ref{mr};
  rmm::cuda_stream stream{};
};

struct DevicekitProcessPool : public ::testing::Test {
  dk::rmm_resource mr{dk::default_memory(dk::device::cuda(current_ordinal()))};
  rmm::device_async_resource_ref ref{mr};
  rmm::cuda_stream stream{};
};

struct DevicekitOverRmm : public ::testing::Test {
  rmm::mr::cuda_memory_resource upstream{};
  dk::rmm_resource mr{std::make_shared<dk::memory_pool<dk::rmm_upstream>>(
      dk::rmm_upstream(rmm::device_async_resource_ref{upstream}, current_ordinal()))};
  rmm::device_async_resource_ref ref{mr};
  rmm::cuda_stream stream{};
};

INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitPool, CcclMrRefTest, DevicekitPool);
INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitPool, CcclMrRefAllocationTest, DevicekitPool);
INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitPool, CcclMrRefTestMT, DevicekitPool);
INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitProcessPool, CcclMrRefTest, DevicekitProcessPool);
INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitProcessPool, CcclMrRefAllocationTest, DevicekitProcessPool);
INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitProcessPool, CcclMrRefTestMT, DevicekitProcessPool);
INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitOverRmm, CcclMrRefTest, DevicekitOverRmm);
INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitOverRmm, CcclMrRefAllocationTest, DevicekitOverRmm);
INSTANTIATE_TYPED_TEST_SUITE_P(DevicekitOverRmm, CcclMrRefTestMT, DevicekitOverRmm);

}  // namespace rmm::test
