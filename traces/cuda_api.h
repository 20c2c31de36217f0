// What a CUDA runtime or driver API call means for ordering, decided by its name. Both importers
// classify calls here so that nsys and Kineto traces of the same program produce the same ops.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hookstream {

enum class ApiRole {
  Other,        // launches, allocations, queries: host work with no ordering effect we model
  EventRecord,  // cudaEventRecord / cuEventRecord (and *WithFlags)
  StreamWait,   // cudaStreamWaitEvent / cuStreamWaitEvent: the stream waits, the host does not
  EventSync,    // cudaEventSynchronize / cuEventSynchronize: the host waits
  StreamSync,   // cudaStreamSynchronize / cuStreamSynchronize: the host waits
  DeviceSync,   // cudaDeviceSynchronize / cudaThreadSynchronize / cuCtxSynchronize
  SyncCopy,     // cudaMemcpy, cudaMemcpy2D, cuMemcpyHtoD, ...: returns when the copy is done
  AsyncCopy,    // cudaMemcpyAsync, cuMemcpyHtoDAsync, ...
  SyncMemset,   // cudaMemset, cuMemsetD8, ...
  AsyncMemset,  // cudaMemsetAsync, cuMemsetD8Async, ...
};

// nsys stores versioned names ("cudaLaunchKernel_v7000", "cudaGetDeviceProperties_v2_v12000");
// Kineto stores the plain name. Drops one trailing "_v<digits>".
std::string_view strip_api_version(std::string_view name);

// `name` with or without a version suffix.
ApiRole classify_api(std::string_view name);

// True for roles whose call does not return until GPU work is done.
bool blocks_host(ApiRole role);

// True for the four roles a sync record stands for (nsys SYNCHRONIZATION rows, Kineto "cuda_sync"
// events): StreamWait, EventSync, StreamSync, DeviceSync. CUPTI also writes records for calls
// that order nothing (cudaEventQuery, cudaStreamQuery): both importers skip those.
bool is_sync_role(ApiRole role);

// NCCL kernels ("ncclKernel_AllReduce_RING_LL_Sum_float", "ncclDevKernel_...") are the
// collectives of a DDP step; every other kernel is compute.
bool is_collective_kernel(std::string_view kernel_name);

// An op's name as a line of the text report shows it. A demangled kernel signature ("void
// at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>(int, ...)",
// as both nsys's demangledName and Kineto write it) loses its return type and its parameter list,
// which repeat what the template arguments say, so the part that tells kernels apart comes first
// (cutting the whole signature at 40 characters left "void at::native::vectorized_elementwi..."
// for every elementwise kernel). Anything still longer than `limit` (>= 4) is cut to end in "...",
// never inside a UTF-8 sequence. The JSON report and the timeline keep the full name.
std::string display_op_name(std::string_view name, size_t limit);

}  // namespace hookstream
