#include "runtime/activation_offload.h"

#include <stdexcept>

#include "runtime/annotation.h"
#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {

// Streams become program order on the CPU: every copy is complete when copy_ returns, so every wait
// and record is already satisfied. Pinned memory is a CUDA notion; host buffers are plain memory.
class CpuStreamBackend : public StreamBackend {
 public:
  void bind(const StreamProtocol&) override {}
  at::Tensor allocate(MemoryKind, const at::Tensor& like) override { return at::empty_like(like, at::MemoryFormat::Contiguous); }
  void run_on(int, const std::function<void()>& work) override { work(); }
  void copy(at::Tensor& to, const at::Tensor& from, int, bool) override { to.copy_(from); }
  void wait_stream(int, int) override {}
  void record(const EventSlot&, int) override {}
  void wait_event(const EventSlot&, int) override {}
  void record_stream(const at::Tensor&, int) override {}
  void synchronize_stream(int) override {}
  void synchronize_event(const EventSlot&) override {}
  std::pair<double, double> take_copy_timing() override { return {0.0, 0.0}; }
};

// The caching allocator reports an exhausted device as c10::OutOfMemoryError (1.13 and 2.x,
// c10/cuda/CUDACachingAllocator.cpp); older paths throw a c10::Error whose text says so.
bool is_out_of_memory(const c10::Error& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) return true;
  return std::string(error.what()).find("out of memory") != std::string::npos;
}

int buffer_count(const ProtocolBuffer& buffer, int layers) { return buffer.count < 0 ? layers : buffer.count; }

}  // namespace

std::unique_ptr<StreamBackend> make_cpu_stream_backend() { return std::make_unique<CpuStreamBackend>(); }

std::unique_ptr<StreamBackend> make_stream_backend(c10::Device device, bool exact_pinned) {
  if (device.is_cpu()) return make_cpu_stream_backend();  // no pinned memory on the CPU path
#ifdef HOOKSTREAM_HAVE_CUDA
  if (device.is_cuda()) return make_cuda_stream_backend(device, exact_pinned);
#endif
  throw InputError("device " + device.str(), "this build runs offload protocols on the CPU" +
                                                 std::string(device.is_cuda() ? " only (LibTorch without CUDA)" : ""));
}

ActivationOffload::ActivationOffload(StreamProtocol protocol, int layers, std::unique_ptr<StreamBackend> backend,
                                     bool inject_reload_oom)
    : layers_(layers), backend_(std::move(backend)), inject_reload_oom_(inject_reload_oom) {
  if (protocol.current_stream() < 0) throw InputError(protocol.source, "the protocol has no current stream");
  bind(std::move(protocol));
}

void ActivationOffload::bind(StreamProtocol protocol) {
  protocol_ = std::move(protocol);
  backend_->bind(protocol_);
  buffers_.clear();
  device_buffer_shape_.clear();
  stats_.reload_buffers = 0;
  for (const ProtocolBuffer& buffer : protocol_.buffers) {
    // Per-layer device buffers (count: layers) are freed after each use by the built-in
    // protocols that have them: one at a time.
    if (buffer.memory == MemoryKind::Device) stats_.reload_buffers += buffer.count < 0 ? 1 : buffer.count;
  }
}

void ActivationOffload::begin_micro_step() {
  forward_counter_ = 0;
  backward_counter_ = 0;
}

OffloadStats ActivationOffload::take_stats() {
  const auto [copy_ms, exposed_ms] = backend_->take_copy_timing();
  stats_.copy_ms += copy_ms;
  stats_.exposed_copy_ms += exposed_ms;
  OffloadStats result = stats_;
  for (const auto& [slot, tensor] : buffers_) {
    if (slot.buffer >= 0 && tensor.defined() && protocol_.buffers[slot.buffer].memory == MemoryKind::PinnedHost) {
      result.pinned_slot_bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
    }
  }
  stats_ = OffloadStats();
  stats_.reload_buffers = result.reload_buffers;
  return result;
}

void ActivationOffload::ensure_device_buffers(const at::Tensor& like) {
  if (device_buffer_shape_ == like.sizes().vec()) return;
  device_buffer_shape_ = like.sizes().vec();
  for (size_t b = 0; b < protocol_.buffers.size(); ++b) {
    const ProtocolBuffer& buffer = protocol_.buffers[b];
    if (buffer.memory != MemoryKind::Device || buffer.count < 0) continue;
    for (int slot = 0; slot < buffer.count; ++slot) {
      try {
        if (slot >= 1 && inject_reload_oom_) {
          throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                      "CUDA out of memory (injected: inject_reload_oom)");
        }
        at::Tensor tensor;
        backend_->run_on(protocol_.current_stream(), [&] { tensor = backend_->allocate(MemoryKind::Device, like); });
        buffers_[Slot{static_cast<int>(b), slot}] = tensor;
      } catch (const c10::Error& error) {
        if (slot < 1 || !is_out_of_memory(error)) throw;
        // The allocations happen before any step of this micro-step ran, so nothing has been
        // offloaded under the old protocol: the fallback starts clean.
        stats_.warnings.push_back("activation offload: allocating " + buffer.name + "[" + std::to_string(slot) +
                                  "] of protocol " + protocol_.name +
                                  " ran out of device memory; continuing with one reload buffer (single_buffer)");
        inject_reload_oom_ = false;
        const OffloadStats kept = stats_;
        bind(load_stream_protocol("single_buffer"));
        stats_.warnings = kept.warnings;
        stats_.offloaded_bytes = kept.offloaded_bytes;
        stats_.reloaded_bytes = kept.reloaded_bytes;
        ensure_device_buffers(like);
        return;
      }
    }
  }
}

int64_t ActivationOffload::prepare(const at::Tensor& like, const std::vector<int>& layers) {
  ensure_device_buffers(like);
  int64_t pinned = 0;
  const int saved = counter_;
  // The slots run_step's copies will pick: forward() runs the protocol once per offloaded layer,
  // the i-th with counter i (begin_micro_step resets the counter each micro-step).
  for (size_t i = 0; i < layers.size(); ++i) {
    counter_ = static_cast<int>(i);
    for (const ProtocolStep& step : protocol_.forward) {
      if (step.kind != StepKind::Copy || step.to.name == kHiddenBuffer) continue;
      const Slot slot = slot_of(step.to, layers[i]);
      if (protocol_.buffers[slot.buffer].memory != MemoryKind::PinnedHost) continue;
      at::Tensor& to = buffers_[slot];
      if (to.defined() && to.sizes() == like.sizes() && to.scalar_type() == like.scalar_type()) continue;
      backend_->run_on(stream_of(step.stream), [&] { to = backend_->allocate(MemoryKind::PinnedHost, like); });
      pinned += to.numel() * static_cast<int64_t>(to.element_size());
    }
  }
  counter_ = saved;
  return pinned;
}

at::Tensor ActivationOffload::forward(int layer, const at::Tensor& hidden, const OffloadedLayer& compute) {
  ensure_device_buffers(hidden);
  buffers_[Slot{-1, layer}] = hidden;
  counter_ = forward_counter_;
  run_steps(protocol_.forward, layer, "forward", compute);
  ++forward_counter_;
  auto next = buffers_.find(Slot{-1, layer + 1});
  if (next == buffers_.end() || !next->second.defined()) {
    throw InputError(protocol_.source, "forward: no compute step writes hidden[next]: layer " + std::to_string(layer) +
                                           " produced no output");
  }
  at::Tensor output = next->second;
  buffers_.erase(next);  // the next layer's input belongs to the caller from here on
  return output;
}

void ActivationOffload::backward(int layer, const OffloadedLayer& compute) {
  counter_ = backward_counter_;
  run_steps(protocol_.backward, layer, "backward", compute);
  ++backward_counter_;
  buffers_.erase(Slot{-1, layer});
}

void ActivationOffload::run_steps(const std::vector<ProtocolStep>& steps, int layer, const char* phase,
                                  const OffloadedLayer& compute) {
  for (const ProtocolStep& step : steps) {
    ScopedAnnotation range(step_name(step, phase, layer));
    run_step(step, layer, phase, compute);
  }
}

ActivationOffload::Slot ActivationOffload::slot_of(const BufferRef& ref, int layer) const {
  if (ref.name == kHiddenBuffer) return Slot{-1, layer + (ref.next ? 1 : 0)};
  const int b = protocol_.find_buffer(ref.name);
  const ProtocolBuffer& buffer = protocol_.buffers[b];
  // The expansion's choice (StepExpander::buffer): the selection's slot, modulo the slot count.
  return Slot{b, buffer.select.slot(layer, counter_) % buffer_count(buffer, layers_)};
}

EventSlot ActivationOffload::event_of(const std::string& name, int layer) const {
  const int e = protocol_.find_event(name);
  const ProtocolEvent& event = protocol_.events[e];
  // per_buffer events were given their buffer's count and selection by the parser.
  const int count = event.count < 0 ? layers_ : event.count;
  return {e, event.select.slot(layer, counter_) % count};
}

int ActivationOffload::stream_of(const std::string& name) const {
  return name.empty() ? protocol_.current_stream() : protocol_.find_stream(name);
}

at::Tensor& ActivationOffload::tensor_of(const Slot& slot, int layer, const char* phase, const std::string& what) {
  auto it = buffers_.find(slot);
  if (it == buffers_.end() || !it->second.defined()) {
    const std::string name = slot.buffer < 0 ? "hidden" : protocol_.buffers[slot.buffer].name;
    throw InputError(protocol_.source, std::string(phase) + " of layer " + std::to_string(layer) + ": " + what + " " +
                                           name + "[" + std::to_string(slot.index) +
                                           "], which holds nothing (never written, or freed)");
  }
  return it->second;
}

void ActivationOffload::run_step(const ProtocolStep& step, int layer, const char* phase, const OffloadedLayer& compute) {
  const int on = stream_of(step.stream);
  switch (step.kind) {
    case StepKind::WaitStream:
      backend_->wait_stream(on, stream_of(step.other_stream));
      break;
    case StepKind::Record:
      backend_->record(event_of(step.event, layer), on);
      break;
    case StepKind::WaitEvent:
      backend_->wait_event(event_of(step.event, layer), on);
      break;
    case StepKind::Copy: {
      const at::Tensor from = tensor_of(slot_of(step.from, layer), layer, phase, "copy reads");
      const Slot to_slot = slot_of(step.to, layer);
      at::Tensor& to = buffers_[to_slot];
      const MemoryKind memory = to_slot.buffer < 0 ? MemoryKind::Device : protocol_.buffers[to_slot.buffer].memory;
      if (!to.defined() || to.sizes() != from.sizes() || to.scalar_type() != from.scalar_type()) {
        // A buffer is allocated at its first write, on the writing stream (as `.to(device)` on the
        // copy stream allocates there), then reused: pinned slots and reload buffers live on.
        backend_->run_on(on, [&] { to = backend_->allocate(memory, from); });
      }
      const MemoryKind source = step.from.name == kHiddenBuffer ? MemoryKind::Device
                                                                 : protocol_.buffers[protocol_.find_buffer(step.from.name)].memory;
      // cudaMemcpyAsync with pageable memory returns only when done (CUDA runtime API, "API
      // synchronization behavior"): the copy blocks the host as the expansion assumes.
      const bool blocking = step.blocking || memory == MemoryKind::PageableHost || source == MemoryKind::PageableHost;
      backend_->copy(to, from, on, blocking);
      const int64_t bytes = from.numel() * static_cast<int64_t>(from.element_size());
      if (step.copy == CopyKind::DeviceToHost) stats_.offloaded_bytes += bytes;
      if (step.copy == CopyKind::HostToDevice) stats_.reloaded_bytes += bytes;
      break;
    }
    case StepKind::Compute: {
      at::Tensor input;
      if (!step.reads.empty()) input = tensor_of(slot_of(step.reads.front(), layer), layer, phase, "compute reads");
      if (step.what == "layer") {
        if (!input.defined()) throw InputError(protocol_.source, "compute {what: layer} reads no buffer: the layer has no input");
        at::Tensor output;
        backend_->run_on(on, [&] { output = compute.forward(input); });
        for (const BufferRef& ref : step.writes) buffers_[slot_of(ref, layer)] = output;
      } else if (step.what == "recompute") {
        if (!input.defined()) throw InputError(protocol_.source, "compute {what: recompute} reads no buffer: nothing to recompute from");
        backend_->run_on(on, [&] { compute.recompute(input); });
      } else {
        backend_->run_on(on, [&] { compute.backward(); });
      }
      break;
    }
    case StepKind::Free:
      // The tensor dies: the caching allocator takes its block back for the freeing stream.
      buffers_.erase(slot_of(step.buffer, layer));
      break;
    case StepKind::RecordStream:
      backend_->record_stream(tensor_of(slot_of(step.buffer, layer), layer, phase, "record_stream of"), on);
      break;
    case StepKind::HostSync:
      if (!step.event.empty()) {
        backend_->synchronize_event(event_of(step.event, layer));
      } else {
        backend_->synchronize_stream(stream_of(step.other_stream));
      }
      break;
  }
}

std::string ActivationOffload::slot_text(const BufferRef& ref, int layer) const {
  const Slot slot = slot_of(ref, layer);
  return ref.name + "[" + std::to_string(slot.index) + "]";
}

// hookstream:{phase}:L{layer}:{kind}:{stream}[:r=..][:w=..][:e=..][:s=..][:what=..]
std::string ActivationOffload::step_name(const ProtocolStep& step, const char* phase, int layer) const {
  std::string name = std::string("hookstream:") + phase + ":L" + std::to_string(layer) + ":" + to_string(step.kind) + ":" +
                     protocol_.streams[stream_of(step.stream)].name;
  auto list = [&](const char* key, const std::vector<BufferRef>& refs) {
    if (refs.empty()) return;
    name += std::string(":") + key + "=";
    for (size_t i = 0; i < refs.size(); ++i) name += (i ? "," : "") + slot_text(refs[i], layer);
  };
  std::vector<BufferRef> reads, writes;
  switch (step.kind) {
    case StepKind::Copy: reads = {step.from}; writes = {step.to}; break;
    case StepKind::Compute: reads = step.reads; writes = step.writes; break;
    case StepKind::Free: writes = {step.buffer}; break;  // the block's next owner writes it
    case StepKind::RecordStream: reads = {step.buffer}; break;
    default: break;
  }
  list("r", reads);
  list("w", writes);
  if (!step.event.empty()) {
    const EventSlot event = event_of(step.event, layer);
    name += ":e=" + step.event + "[" + std::to_string(event.second) + "]";
  }
  if (!step.other_stream.empty()) name += ":s=" + step.other_stream;
  if (step.kind == StepKind::Compute) name += ":what=" + step.what;
  return name;
}

}  // namespace hookstream
