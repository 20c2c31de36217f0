// Records, on the AutogradEngine, what one forward pass of the plan's model puts on the autograd
// tape for one rank and micro-step: the HF decoder (transformers' modeling_llama / qwen2 / qwen3 /
// qwen3_vl op order), PEFT LoRA layers, reentrant checkpoints (torch/utils/checkpoint.py
// CheckpointFunction, Unsloth's offloaded checkpointer: same autograd shape), non-reentrant
// checkpoints, and tiled MLPs (DeepSpeed/ALST TiledMLP) with their backward strategy. Custom
// Functions carry the backward program that starts nested graph tasks.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "sim/engine/autograd_engine.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

// An nn.Module call as Module.__call__ runs it, with its forward pre- and post-hooks: what a
// gradient-sync engine attaches to (FSDP2's fully_shard state, FSDP1's unit hooks, ZeRO-3's
// parameter fetch/release). Reentrant checkpoints and tiled MLPs call the module's forward again
// inside backward, so its hooks fire again there (torch/nn/modules/module.py _call_impl), with
// `in_backward` set (torch._C._current_graph_task_id() != -1).
// Adapter: a PEFT LoRA layer's lora_A / lora_B Linear (peft/tuners/lora/layer.py Linear.forward
// calls lora_B(lora_A(dropout(x)))), called inside its lora.Linear (kind Linear); `path` is the
// module, e.g. "base_model.model.model.layers.3.mlp.up_proj.lora_A.default".
// Leaf: the module owning a weight, called as a module around its own op: a norm, the token
// embedding, an untied head, a Linear's own module (for a lora.Linear its base_layer: PEFT's
// Linear.forward calls self.base_layer(x)); `path` is the weight's module. Only FSDP1 under PEFT's
// wrap policy has units there (a trainable leaf, e.g. from unfrozen_parameters); the other engines
// ignore these calls.
enum class ModuleKind { Root, DecoderLayer, Mlp, Linear, VisionBlock, Adapter, Leaf };

struct ModuleCall {
  ModuleKind kind = ModuleKind::Root;
  std::string path;   // "" for the root (the whole model), "model.layers.3", "model.layers.3.mlp", ...
  int layer = -1;     // decoder layer (or vision block) index, -1 for the root
  bool in_backward = false;
};

// Forward hooks of the engine (null: none, as under DDP, which wraps only the root's output).
class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  // Forward pre-hook: may wrap the input (FSDP2 RegisterPostBackwardFunction on the inputs).
  virtual SimTensor pre_forward(AutogradEngine& engine, const ModuleCall& call, SimTensor input) {
    (void)engine;
    (void)call;
    return input;
  }
  // Forward post-hook: may wrap the output (FSDP pre-backward hooks on the output tensors).
  virtual SimTensor post_forward(AutogradEngine& engine, const ModuleCall& call, SimTensor output) {
    (void)engine;
    (void)call;
    return output;
  }
  // A tiled MLP is about to run chunk `chunk` (0-based) of `chunks` in its backward; DeepSpeed's
  // TiledMLP sets param.ds_grad_is_ready = (chunk == chunks - 1) on its compute params here
  // (deepspeed/runtime/sequence_parallel/ulysses_sp.py TiledMLP.backward).
  virtual void tiled_chunk(const ModuleCall& mlp, int chunk, int chunks) {
    (void)mlp;
    (void)chunk;
    (void)chunks;
  }
};

struct ForwardContext {
  const Plan* plan = nullptr;
  const ModelStructure* structure = nullptr;
  int rank = 0;
  int iteration = 0;
  int micro_step = -1;  // -1: without micro_step_overrides
  // Called when code outside AccumulateGrad adds to a parameter's .grad (the grad-then-backward
  // tiled strategy writes the summed chunk gradients itself).
  std::function<void(int parameter)> on_manual_accumulate;
  ModuleHooks* hooks = nullptr;  // the sync engine's module hooks (not owned)
};

struct ForwardOutputs {
  SimTensor logits;  // what DDP's prepare_for_backward receives as the module output
  std::shared_ptr<void> keep_alive;  // owns what the recorded Functions' backward programs use
};

ForwardOutputs record_forward(AutogradEngine& engine, const ForwardContext& context);

// Whether `module_path` (with or without PEFT's "base_model.model." prefix) is switched off by an
// entry of the plan's unused_modules for this rank and iteration.
bool module_unused(const std::vector<std::string>& unused, const std::string& module_path);

}  // namespace hookstream
