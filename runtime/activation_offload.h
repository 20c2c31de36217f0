// Offloaded activation checkpointing, by interpreting the plan's stream protocol
// (sim/streams/stream_protocol.h, protocols/*.yaml): the very steps the simulator expanded and verified
// (sim/streams/stream_expansion.cc, StepExpander::run_steps), in the same host order, with the same slot
// and event selection, executed for real.
//
// Per checkpointed decoder layer i, forward runs protocol.forward (e.g. copy hidden[i] into a
// pinned CPU slot on the copy stream, compute the layer on the current stream under no_grad, make
// compute wait for copy, free hidden[i]); backward runs protocol.backward (wait for the reload
// buffer's event, H2D copy of the CPU slot into a GPU reload buffer, make compute wait for copy,
// recompute the layer from the reload buffer, backward, record the event).
//
// The streams, events and copies go through a StreamBackend: on the CPU, streams become ordered
// execution (copies are plain copies, waits and records no-ops, pinned memory ordinary memory); on
// CUDA (runtime/cuda_stream_backend.cc, built when LibTorch has CUDA) they are c10 CUDA streams from
// the pool, at::cuda::CUDAEvent, tensor.record_stream and pinned host memory.
//
// Prefetch: the host issues the protocol's steps asynchronously, so layer i-1's reload copy is
// enqueued on the copy stream as soon as layer i's backward kernels are enqueued on compute (the
// autograd engine goes straight from layer i's node to layer i-1's) and waits on the GPU only for
// what the protocol makes it wait for (double_buffer_events: the event of the buffer it overwrites,
// recorded after layer i+1's backward). That is the earliest the verified protocol allows. Issuing
// layer i-1's copy-stream steps before layer i's recompute would be a different host order from the
// one sim/streams/stream_expansion.cc expands (one layer's steps after the other), which the race checker has
// not verified, so the interpreter does not do it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "runtime/train_model.h"
#include "sim/streams/stream_protocol.h"

namespace hookstream {

// An event instance: (index into StreamProtocol::events, slot).
using EventSlot = std::pair<int, int>;

// What the protocol's streams, events and copies are on one device. Streams are indices into the
// bound protocol's `streams`.
class StreamBackend {
 public:
  virtual ~StreamBackend() = default;
  // (Re)binds the protocol's streams: the current one is the device's current stream, the legacy
  // default one the default stream, every other a new stream (PyTorch: torch.cuda.Stream()).
  virtual void bind(const StreamProtocol& protocol) = 0;
  // A buffer shaped like `like`: device memory, pinned host memory or pageable host memory.
  virtual at::Tensor allocate(MemoryKind memory, const at::Tensor& like) = 0;
  // Runs `work` with `stream` as the current stream (c10::cuda::CUDAStreamGuard).
  virtual void run_on(int stream, const std::function<void()>& work) = 0;
  // to.copy_(from, non_blocking=!blocking) on `stream`; returns nothing, timing is the backend's.
  virtual void copy(at::Tensor& to, const at::Tensor& from, int stream, bool blocking) = 0;
  virtual void wait_stream(int waiter, int waitee) = 0;
  virtual void record(const EventSlot& event, int stream) = 0;
  virtual void wait_event(const EventSlot& event, int stream) = 0;
  virtual void record_stream(const at::Tensor& tensor, int stream) = 0;
  virtual void synchronize_stream(int stream) = 0;
  virtual void synchronize_event(const EventSlot& event) = 0;
  // GPU time of the copies issued since the last call, and the time the current stream spent
  // waiting for other streams (see the CUDA backend for how it is measured). CPU: zeros.
  virtual std::pair<double, double> take_copy_timing() = 0;
};

std::unique_ptr<StreamBackend> make_cpu_stream_backend();
#ifdef HOOKSTREAM_HAVE_CUDA
// exact_pinned: pinned slots of their own size (cudaHostAlloc), not the caching allocator's
// power-of-two blocks (Plan::pinned_slots_exact).
std::unique_ptr<StreamBackend> make_cuda_stream_backend(c10::Device device, bool exact_pinned = false);
#endif
// The backend for `device`: CPU, or CUDA when built with it (InputError otherwise).
std::unique_ptr<StreamBackend> make_stream_backend(c10::Device device, bool exact_pinned = false);

// The callbacks a protocol's compute steps call.
struct OffloadedLayer {
  // compute {what: layer}: the layer's forward (no graph kept) from its input.
  std::function<at::Tensor(const at::Tensor& input)> forward;
  // compute {what: recompute}: rebuild the layer's graph from the reloaded input.
  std::function<void(const at::Tensor& reloaded)> recompute;
  // compute {what: backward}: run backward through the recomputed graph.
  std::function<void()> backward;
};

class ActivationOffload {
 public:
  ActivationOffload(StreamProtocol protocol, int layers, std::unique_ptr<StreamBackend> backend,
                    bool inject_reload_oom);

  const StreamProtocol& protocol() const { return protocol_; }
  // Before each micro-step's forward: the per-device slot counters restart (the expansion resets
  // them at the start of each phase of each micro-step, and backward follows its own forward).
  void begin_micro_step();
  // Layer `layer`'s protocol.forward with `hidden` as hidden[layer]; returns hidden[layer + 1].
  at::Tensor forward(int layer, const at::Tensor& hidden, const OffloadedLayer& compute);
  // Layer `layer`'s protocol.backward.
  void backward(int layer, const OffloadedLayer& compute);
  // Before the first step: allocates the device buffers and every pinned host slot that the
  // forward protocol will write for `layers` (the offloaded layers, in the order forward() runs
  // them), each shaped like `like` (a layer input). Returns the pinned bytes allocated. Pinning is
  // slow (cudaHostAlloc: 2.1 GiB/s on the H200 host, bench/first_step_costs.py), and at its first
  // write it stalls the host inside step 1; allocated here it is paid, and can fail, before it.
  int64_t prepare(const at::Tensor& like, const std::vector<int>& layers);

  OffloadStats take_stats();

  // The profiler range name of one step (docs/stream-protocols.md, "Runtime annotations").
  std::string step_name(const ProtocolStep& step, const char* phase, int layer) const;

 private:
  struct Slot {
    int buffer = -1;  // index into protocol_.buffers; -1: the built-in hidden buffer
    int index = 0;    // slot (hidden: the layer index)
    bool operator<(const Slot& o) const { return std::tie(buffer, index) < std::tie(o.buffer, o.index); }
  };

  void run_steps(const std::vector<ProtocolStep>& steps, int layer, const char* phase, const OffloadedLayer& compute);
  void run_step(const ProtocolStep& step, int layer, const char* phase, const OffloadedLayer& compute);
  Slot slot_of(const BufferRef& ref, int layer) const;
  EventSlot event_of(const std::string& name, int layer) const;
  int stream_of(const std::string& name) const;
  at::Tensor& tensor_of(const Slot& slot, int layer, const char* phase, const std::string& what);
  std::string slot_text(const BufferRef& ref, int layer) const;
  // Allocates every fixed-count device buffer once for `like`'s shape; the fallback to
  // single_buffer when the second one does not fit.
  void ensure_device_buffers(const at::Tensor& like);
  void bind(StreamProtocol protocol);

  StreamProtocol protocol_;
  int layers_ = 0;
  std::unique_ptr<StreamBackend> backend_;
  bool inject_reload_oom_ = false;
  std::map<Slot, at::Tensor> buffers_;
  std::vector<int64_t> device_buffer_shape_;  // shape the fixed device buffers were allocated for
  int forward_counter_ = 0, backward_counter_ = 0;
  int counter_ = 0;  // the running phase's counter (SlotSelection's `counter`)
  OffloadStats stats_;
};

}  // namespace hookstream
