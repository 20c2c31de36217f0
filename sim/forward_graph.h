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

#include "sim/autograd_engine.h"
#include "sim/model_structure.h"
#include "sim/plan.h"

namespace hookstream {

struct ForwardContext {
  const Plan* plan = nullptr;
  const ModelStructure* structure = nullptr;
  int rank = 0;
  int iteration = 0;
  int micro_step = -1;  // -1: without micro_step_overrides
  // Called when code outside AccumulateGrad adds to a parameter's .grad (the grad-then-backward
  // tiled strategy writes the summed chunk gradients itself).
  std::function<void(int parameter)> on_manual_accumulate;
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
