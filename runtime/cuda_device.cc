#include "runtime/cuda_device.h"

#include <cstdlib>
#include <stdexcept>

#ifdef HOOKSTREAM_HAVE_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/version.h>
#endif

namespace hookstream {

std::map<std::string, std::string> nccl_multicast_off_environment() {
  return {{"NCCL_NVLS_ENABLE", "0"}, {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"}, {"NVSHMEM_DISABLE_NVLS", "1"}};
}

void set_nccl_multicast_off() {
  for (const auto& [key, value] : nccl_multicast_off_environment()) setenv(key.c_str(), value.c_str(), 1);
}

#ifdef HOOKSTREAM_HAVE_CUDA

int cuda_device_count() { return static_cast<int>(c10::cuda::device_count()); }

void cuda_synchronize(c10::Device device) { c10::cuda::device_synchronize(); }

void cuda_reset_peak_memory(c10::Device device) { c10::cuda::CUDACachingAllocator::resetPeakStats(device.index()); }

int64_t cuda_peak_memory_bytes(c10::Device device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

int64_t cuda_total_memory_bytes(c10::Device device) {
  const c10::cuda::CUDAGuard guard(device);
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return static_cast<int64_t>(total);
}

at::Tensor cuda_rng_state(c10::Device device) {
  return at::cuda::detail::getDefaultCUDAGenerator(device.index()).get_state();
}

void set_cuda_rng_state(c10::Device device, const at::Tensor& state) {
  at::Generator generator = at::cuda::detail::getDefaultCUDAGenerator(device.index());
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_process_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                                int rank, int world_size,
                                                                std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
#if TORCH_VERSION_MAJOR == 1
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
#else
  // torch/distributed/distributed_c10d.py _new_process_group_helper: the NCCL backend registered
  // for CUDA tensors on a ProcessGroup whose default backend it is.
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
  group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, backend);
  return group;
#endif
}

void shutdown_nccl_process_group(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
#if TORCH_VERSION_MAJOR >= 2
  group->shutdown();
#else
  (void)group;
#endif
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error("this build of hookstream has no CUDA (LibTorch without c10_cuda): use --device cpu");
}
}  // namespace

int cuda_device_count() { return 0; }
void cuda_synchronize(c10::Device) { no_cuda(); }
void cuda_reset_peak_memory(c10::Device) { no_cuda(); }
int64_t cuda_peak_memory_bytes(c10::Device) { no_cuda(); }
int64_t cuda_total_memory_bytes(c10::Device) { no_cuda(); }
at::Tensor cuda_rng_state(c10::Device) { no_cuda(); }
void set_cuda_rng_state(c10::Device, const at::Tensor&) { no_cuda(); }
c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_process_group(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                                std::chrono::milliseconds) {
  no_cuda();
}
void shutdown_nccl_process_group(const c10::intrusive_ptr<c10d::ProcessGroup>&) { no_cuda(); }

#endif

}  // namespace hookstream
