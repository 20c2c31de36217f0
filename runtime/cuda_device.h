// What `hookstream run` needs from CUDA, behind one header so the rest of the runtime builds
// without it: device count, synchronisation, the caching allocator's peak, the CUDA generator's
// state (checkpoints) and the NCCL process group. The bodies exist only when LibTorch has CUDA
// (HOOKSTREAM_HAVE_CUDA, runtime/CMakeLists.txt); otherwise every call but cuda_device_count()
// throws.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

namespace hookstream {

// 0 when this build has no CUDA or no GPU is visible.
int cuda_device_count();
void cuda_synchronize(c10::Device device);
void cuda_reset_peak_memory(c10::Device device);
// The caching allocator's peak of allocated bytes since the last reset (torch.cuda.max_memory_allocated).
int64_t cuda_peak_memory_bytes(c10::Device device);
// The device's memory (cudaMemGetInfo's total), what an out-of-memory report compares with.
int64_t cuda_total_memory_bytes(c10::Device device);
at::Tensor cuda_rng_state(c10::Device device);
void set_cuda_rng_state(c10::Device device, const at::Tensor& state);

// ProcessGroupNCCL over `store` (in 2.x a c10d::Backend wrapped in a c10d::ProcessGroup, as
// torch.distributed.init_process_group does). Call set_nccl_multicast_off() first.
c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_process_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                                int rank, int world_size,
                                                                std::chrono::milliseconds timeout);

// Shuts an NCCL group down once its last collective has finished, as destroy_process_group() does
// (torch/distributed/distributed_c10d.py: pg.shutdown()): without it LibTorch 2.x warns at every
// rank's exit that destroy_process_group() was not called. Nothing to do with LibTorch 1.x.
void shutdown_nccl_process_group(const c10::intrusive_ptr<c10d::ProcessGroup>& group);

// NVLink multicast (NVLS) stays off on the project's GPU machines (../shared/docs/runtime-notes.md):
// the variables to put in every rank's environment.
std::map<std::string, std::string> nccl_multicast_off_environment();
// setenv()s them in this process (before NCCL reads them at communicator creation).
void set_nccl_multicast_off();

}  // namespace hookstream
