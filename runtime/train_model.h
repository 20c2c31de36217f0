// The model `hookstream run` trains: a Llama-style decoder (RMSNorm, RoPE, grouped-query attention
// through the fused scaled-dot-product-attention kernels, SwiGLU MLP, tied or untied head; Qwen3's
// per-head q/k norms when the structure has them), optional LoRA adapters over a frozen base, built
// with exactly the parameters, names and DDP order of the plan's ModelStructure
// (sim/inputs/model_structure.h), so that what the verifier checked is what runs.
//
// The plan decides how each decoder layer runs: plain, checkpointed (reentrant or non-reentrant,
// possibly twice), offloaded (the plan's stream protocol, interpreted by
// runtime/activation_offload.h), and the tiled MLP with the plan's backward strategy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"
#include "sim/streams/stream_protocol.h"

namespace hookstream {

struct TrainModelOptions {
  c10::Device device = c10::kCPU;
  // Base weights' dtype (LoRA adapters stay float32, as PEFT keeps them). CPU: float32 unless the
  // plan says bf16: true; GPU: bfloat16 unless the plan says bf16: false.
  c10::ScalarType dtype = c10::kFloat;
  uint64_t seed = 42;             // random initialisation; the same in every rank
  std::string weights_path;       // safetensors file; empty: random initialisation
  // The offload protocol the plan names (loaded by the caller with load_stream_protocol); used for
  // the checkpointed layers when plan.activation_offloading.
  StreamProtocol protocol;
  // Test hook (runtime tests, `hookstream run --inject-fault reload_oom`): the second GPU reload
  // buffer's allocation fails as if the device were out of memory.
  bool inject_reload_oom = false;
};

// Where in the run a forward happens: picks the plan's per-rank/per-iteration overrides.
struct TrainPosition {
  int rank = 0;
  int iteration = 0;   // optimizer step, 0-based
  int micro_step = 0;  // within gradient accumulation
};

// What the offload protocol did during the last micro-steps (take_offload_stats resets it).
struct OffloadStats {
  int64_t offloaded_bytes = 0;   // D2H bytes copied to pinned slots
  int64_t reloaded_bytes = 0;    // H2D bytes copied into reload buffers
  double copy_ms = 0;            // GPU time of the protocol's copies (CUDA events; 0 on CPU)
  double exposed_copy_ms = 0;    // copy time the compute stream spent waiting (CUDA events; 0 on CPU)
  int reload_buffers = 0;        // GPU reload buffers in use (1 after an OOM fallback)
  int64_t pinned_slot_bytes = 0; // pinned host slots held now (ActivationOffload::prepare's and any later)
  std::vector<std::string> warnings;  // e.g. the OOM fallback, once
};

class TrainModel {
 public:
  // Throws InputError (sim/inputs/input_error.h) for what the runtime cannot run (a vision tower
  // the plan uses that is not a Qwen-VL one, a config that is not decoder-only, a safetensors file
  // with missing or mis-shaped tensors), naming the file and the key/tensor.
  TrainModel(const Plan& plan, const TrainModelOptions& options);
  ~TrainModel();
  TrainModel(const TrainModel&) = delete;
  TrainModel& operator=(const TrainModel&) = delete;

  const ModelStructure& structure() const;
  // DDP's parameter list: the trainable parameters in ModelStructure's ddp_index order, and their
  // PyTorch names. These are the tensors the optimizer updates.
  std::vector<at::Tensor> ddp_parameters() const;
  std::vector<std::string> ddp_parameter_names() const;
  // Every parameter (frozen ones too) by its ModelStructure name, for checkpoints.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;

  // One micro-step's forward: mean cross-entropy over the labels that are not -100 (labels are the
  // inputs shifted by the caller), chunked over tokens when plan.chunked_cross_entropy (the full
  // logits sliced, as axolotl does, or with hookstream.chunked_loss: recompute_lm_head the lm_head
  // run per chunk and recomputed in backward), divided by
  // gradient_accumulation_steps as HF Trainer does. A float32 scalar that requires grad.
  // input_ids, labels: [micro_batch_size, sequence_len] int64 on the model's device.
  at::Tensor loss(const at::Tensor& input_ids, const at::Tensor& labels, const TrainPosition& position);

  OffloadStats take_offload_stats();
  // Before the first step: the offload protocol's device buffers and the pinned host slot of every
  // offloaded layer, for layer inputs of [micro_batch, sequence_len, hidden_size]
  // (ActivationOffload::prepare). Returns the pinned bytes; 0 when no layer is offloaded.
  int64_t prepare_offload(int64_t micro_batch, int64_t sequence_len);

  // Where the model's work last was, for the report of a failure (an out-of-memory error names the
  // layer): "layer 17 forward", "layer 17 backward" (its recomputation included), "loss head",
  // "embedding"; empty before the first forward.
  std::string position_text() const;

  // Called with position_text()'s new value each time the work moves on (on the caller's thread in
  // forward, on the autograd engine's device thread in backward), so that a rank can attribute
  // what it measures to the part of the model that ran (the trainer's per-phase peak memory).
  void set_position_listener(std::function<void(const std::string&)> listener);

  // Test hook (`hookstream run --inject-fault oom-rank=R@step=S`): the next backward of a decoder
  // layer (the last layer's, the first to run) throws c10::OutOfMemoryError, as the caching
  // allocator does, once.
  void inject_out_of_memory_in_next_backward();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hookstream
