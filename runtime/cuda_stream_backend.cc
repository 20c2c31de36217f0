// The CUDA StreamBackend (runtime/activation_offload.h): the protocol's streams, events and copies
// as c10 CUDA streams, at::cuda::CUDAEvent and non-blocking copies, with the APIs common to LibTorch
// 1.13 and 2.x. Compiled only when LibTorch has CUDA (HOOKSTREAM_HAVE_CUDA, runtime/CMakeLists.txt).
#ifdef HOOKSTREAM_HAVE_CUDA

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "runtime/activation_offload.h"

namespace hookstream {

namespace {

class CudaStreamBackend : public StreamBackend {
 public:
  CudaStreamBackend(c10::Device device, bool exact_pinned) : device_(device), exact_pinned_(exact_pinned) {}

  void bind(const StreamProtocol& protocol) override {
    streams_.clear();
    events_.clear();
    const c10::DeviceIndex index = device_.index() < 0 ? c10::cuda::current_device() : device_.index();
    current_ = protocol.current_stream();
    for (size_t s = 0; s < protocol.streams.size(); ++s) {
      const ProtocolStream& spec = protocol.streams[s];
      if (static_cast<int>(s) == current_) {
        streams_.push_back(c10::cuda::getCurrentCUDAStream(index));
      } else if (spec.legacy_default) {
        streams_.push_back(c10::cuda::getDefaultCUDAStream(index));
      } else {
        // torch.cuda.Stream() takes a stream from the pool; pool streams are created with
        // cudaStreamNonBlocking (c10/cuda/CUDAStream.cpp), as the protocol's streams default to.
        streams_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index));
      }
    }
  }

  at::Tensor allocate(MemoryKind memory, const at::Tensor& like) override {
    if (memory == MemoryKind::Device) return at::empty(like.sizes(), like.options().device(device_));
    // Pinned slots are allocated once per slot and reused (the caller keeps them), so the pinned
    // allocator's cost is paid once.
    const bool pinned = memory == MemoryKind::PinnedHost;
    if (pinned && exact_pinned_) return exact_pinned(like);
    return at::empty(like.sizes(), like.options().device(at::kCPU).pinned_memory(pinned));
  }

  // `hookstream.pinned_slots: exact`: one cudaHostAlloc of the slot's own size. PyTorch's pinned
  // caching allocator rounds every block up to a power of two (CachingHostAllocator.h), so a 2.5 GiB
  // slot (320K tokens x 4096 x bf16) takes 4 GiB and 32 of them no longer fit a 128 GiB host. The
  // memory is page-locked and mapped as cudaHostAlloc's default, so a non_blocking copy from or to
  // it is asynchronous as from the caching allocator's blocks; the tensor frees it with cudaFreeHost.
  at::Tensor exact_pinned(const at::Tensor& like) {
    const size_t bytes = static_cast<size_t>(like.numel()) * like.element_size();
    void* data = nullptr;
    const cudaError_t status = cudaHostAlloc(&data, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // clear it: the failure is reported here, not by a later call
      throw std::runtime_error("pinned host memory: cudaHostAlloc of " + std::to_string(bytes) +
                               " bytes for an offload slot failed: " + cudaGetErrorString(status));
    }
    return at::from_blob(data, like.sizes(), [](void* p) { cudaFreeHost(p); },
                         like.options().device(at::kCPU));
  }

  void run_on(int stream, const std::function<void()>& work) override {
    c10::cuda::CUDAStreamGuard guard(streams_[stream]);
    work();
  }

  void copy(at::Tensor& to, const at::Tensor& from, int stream, bool blocking) override {
    c10::cuda::CUDAStreamGuard guard(streams_[stream]);
    Timed timed{std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault), std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault)};
    timed.start->record(streams_[stream]);
    to.copy_(from, /*non_blocking=*/!blocking);
    timed.end->record(streams_[stream]);
    copies_.push_back(std::move(timed));
  }

  // Stream.wait_stream (torch/cuda/streams.py): record an event on the waitee, wait on it. When the
  // current (compute) stream waits, two timing events bracket the wait on it: the first completes
  // when compute's earlier work is done, the second when the wait is satisfied too, so their
  // distance approximates the time compute stalled for the copy (exact when compute had nothing
  // else queued in between, which the host order guarantees: nothing is issued between them).
  void wait_stream(int waiter, int waitee) override {
    at::cuda::CUDAEvent event;
    event.record(streams_[waitee]);
    block(event, waiter);
  }

  void record(const EventSlot& slot, int stream) override { event(slot).record(streams_[stream]); }

  void wait_event(const EventSlot& slot, int stream) override {
    // Waiting on an event never recorded is a no-op in CUDA and in CUDAEvent::block.
    block(event(slot), stream);
  }

  void record_stream(const at::Tensor& tensor, int stream) override { tensor.record_stream(streams_[stream].unwrap()); }

  void synchronize_stream(int stream) override { streams_[stream].synchronize(); }
  void synchronize_event(const EventSlot& slot) override { event(slot).synchronize(); }

  std::pair<double, double> take_copy_timing() override {
    double copy_ms = 0, exposed_ms = 0;
    for (Timed& t : copies_) {
      t.end->synchronize();
      copy_ms += t.start->elapsed_time(*t.end);
    }
    for (Timed& t : waits_) {
      t.end->synchronize();
      exposed_ms += t.start->elapsed_time(*t.end);
    }
    copies_.clear();
    waits_.clear();
    return {copy_ms, exposed_ms};
  }

 private:
  struct Timed {
    std::unique_ptr<at::cuda::CUDAEvent> start, end;
  };

  at::cuda::CUDAEvent& event(const EventSlot& slot) {
    auto it = events_.find(slot);
    if (it == events_.end()) it = events_.emplace(slot, std::make_unique<at::cuda::CUDAEvent>()).first;
    return *it->second;
  }

  void block(at::cuda::CUDAEvent& event, int waiter) {
    if (waiter != current_) {
      event.block(streams_[waiter]);
      return;
    }
    Timed timed{std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault), std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault)};
    timed.start->record(streams_[waiter]);
    event.block(streams_[waiter]);
    timed.end->record(streams_[waiter]);
    waits_.push_back(std::move(timed));
  }

  c10::Device device_;
  int current_ = 0;
  std::vector<c10::cuda::CUDAStream> streams_;
  std::map<EventSlot, std::unique_ptr<at::cuda::CUDAEvent>> events_;
  std::vector<Timed> copies_, waits_;
  bool exact_pinned_ = false;
};

}  // namespace

std::unique_ptr<StreamBackend> make_cuda_stream_backend(c10::Device device, bool exact_pinned) {
  return std::make_unique<CudaStreamBackend>(device, exact_pinned);
}

}  // namespace hookstream

#endif  // HOOKSTREAM_HAVE_CUDA
