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

// A ROCm Kineto trace names HIP calls (hip_runtime_api.h); PyTorch's ROCm build copies with
// hipMemcpyWithStream where the CUDA build makes cudaMemcpyAsync + cudaStreamSynchronize.
TEST_CASE("HIP runtime calls are classified like their CUDA twins", "[traces][cuda_api]") {
  CHECK(classify_api("hipDeviceSynchronize") == ApiRole::DeviceSync);
  CHECK(classify_api("hipCtxSynchronize") == ApiRole::DeviceSync);
  CHECK(classify_api("hipStreamSynchronize") == ApiRole::StreamSync);
  CHECK(classify_api("hipEventSynchronize") == ApiRole::EventSync);
  CHECK(classify_api("hipStreamWaitEvent") == ApiRole::StreamWait);
  CHECK(classify_api("hipEventRecord") == ApiRole::EventRecord);
  CHECK(classify_api("hipMemcpyWithStream") == ApiRole::SyncCopy);
  CHECK(classify_api("hipMemcpy") == ApiRole::SyncCopy);
  CHECK(classify_api("hipMemcpyDtoH") == ApiRole::SyncCopy);
  CHECK(classify_api("hipMemcpyAsync") == ApiRole::AsyncCopy);
  CHECK(classify_api("hipMemcpyHtoDAsync") == ApiRole::AsyncCopy);
  CHECK(classify_api("hipMemsetAsync") == ApiRole::AsyncMemset);
  CHECK(classify_api("hipMemsetD32") == ApiRole::SyncMemset);
  CHECK(classify_api("hipLaunchKernel") == ApiRole::Other);
  CHECK(classify_api("hipExtModuleLaunchKernel") == ApiRole::Other);
  CHECK(classify_api("hipEventQuery") == ApiRole::Other);  // returns at once
  CHECK(classify_api("hipStreamQuery") == ApiRole::Other);
  // Library calls that start like the driver API are not CUDA calls.
  CHECK(classify_api("cudnnConvolutionForward") == ApiRole::Other);
  CHECK(classify_api("cublasSgemm_v2") == ApiRole::Other);
  CHECK(classify_api("hipblasSgemm") == ApiRole::Other);
}

TEST_CASE("the text report names a kernel by what tells it apart", "[traces][cuda_api]") {
  // Names as the a100 rank-3 Kineto trace and nsys demangledName write them.
  CHECK(display_op_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
                        200) ==
        "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >");
  // Parentheses inside the template arguments are counted, not taken for the parameter list.
  CHECK(display_op_name("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<long, at::native::func_wrapper_t<long, "
                        "at::native::sum_functor<long, long, long>::operator()(at::TensorIterator&)::{lambda(long, long)#1}>, "
                        "unsigned int, long, 4> >(at::native::ReduceOp<long, long, 4>)",
                        60) == "at::native::reduce_kernel<512, 1, at::native::ReduceOp<lo...");
  CHECK(display_op_name("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_"
                        "s1688gemm_128x128_32x3_nn_align4::Params)",
                        80) == "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>");
  // Not a kernel signature: only cut to the limit.
  CHECK(display_op_name("Memcpy DtoH (Device -> Pageable)", 60) == "Memcpy DtoH (Device -> Pageable)");
  CHECK(display_op_name("Memcpy DtoH (Device -> Pageable)", 12) == "Memcpy Dt...");
  CHECK(display_op_name("ampere_sgemm_128x64_nn", 60) == "ampere_sgemm_128x64_nn");
  // Unbalanced or empty parameter lists leave the signature as it is.
  CHECK(display_op_name("void k)", 60) == "void k)");
  CHECK(display_op_name("void ()", 60) == "void ()");
  // A cut never splits a UTF-8 sequence ("é" is two bytes; the cut would fall between them).
  CHECK(display_op_name("abcd\xC3\xA9xyz", 8) == "abcd...");
}
