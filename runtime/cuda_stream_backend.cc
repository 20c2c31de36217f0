// The CUDA StreamBackend (runtime/activation_offload.h): the protocol's streams, events and copies
// as c10 CUDA streams, at::cuda::CUDAEvent and non-blocking copies, with the APIs common to LibTorch
// 1.13 and 2.x. Compiled only when LibTorch has CUDA (HOOKSTREAM_HAVE_CUDA, runtime/CMakeLists.txt).
#ifdef HOOKSTREAM_HAVE_CUDA

#include <map>
#include <memory>
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
  explicit CudaStreamBackend(c10::Device device) : device_(device) {}

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
    return at::empty(like.sizes(), like.options().device(at::kCPU).pinned_memory(pinned));
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
};

}  // namespace

std::unique_ptr<StreamBackend> make_cuda_stream_backend(c10::Device device) {
  return std::make_unique<CudaStreamBackend>(device);
}

}  // namespace hookstream

#endif  // HOOKSTREAM_HAVE_CUDA
