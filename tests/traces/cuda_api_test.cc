// API-name classification shared by both importers: nsys names carry version suffixes, Kineto's
// do not, and both must give the same ops.
#include <catch2/catch.hpp>

#include "traces/cuda_api.h"

using namespace hookstream;

TEST_CASE("API names with and without nsys version suffixes", "[traces][cuda_api]") {
  CHECK(strip_api_version("cudaLaunchKernel_v7000") == "cudaLaunchKernel");
  CHECK(strip_api_version("cudaGetDeviceProperties_v2_v12000") == "cudaGetDeviceProperties_v2");
  CHECK(strip_api_version("cuInit") == "cuInit");
  CHECK(strip_api_version("cudaFoo_v") == "cudaFoo_v");
  CHECK(classify_api("cudaDeviceSynchronize_v3020") == ApiRole::DeviceSync);
  CHECK(classify_api("cuCtxSynchronize") == ApiRole::DeviceSync);
  CHECK(classify_api("cudaStreamSynchronize") == ApiRole::StreamSync);
  CHECK(classify_api("cuStreamWaitEvent") == ApiRole::StreamWait);
  CHECK(classify_api("cudaEventSynchronize_v3020") == ApiRole::EventSync);
  CHECK(classify_api("cudaEventRecordWithFlags_v11010") == ApiRole::EventRecord);
  CHECK(classify_api("cudaEventQuery") == ApiRole::Other);  // returns at once
  CHECK(classify_api("cudaMemcpy_v3020") == ApiRole::SyncCopy);
  CHECK(classify_api("cuMemcpyHtoD_v2") == ApiRole::SyncCopy);
  CHECK(classify_api("cudaMemcpyAsync_v3020") == ApiRole::AsyncCopy);
  CHECK(classify_api("cuMemcpyHtoDAsync_v2") == ApiRole::AsyncCopy);
  CHECK(classify_api("cudaMemsetAsync") == ApiRole::AsyncMemset);
  CHECK(blocks_host(ApiRole::SyncCopy));
  CHECK_FALSE(blocks_host(ApiRole::StreamWait));
  CHECK(is_collective_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"));
  CHECK(is_collective_kernel("void NCCLKernel()"));
  CHECK_FALSE(is_collective_kernel("ampere_sgemm_128x64_nn"));
}
