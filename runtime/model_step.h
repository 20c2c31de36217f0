// What the plan says one forward of the model does at (rank, iteration), shared by the trainer
// (runtime/train_model.cc) and the DDP oracle (runtime/oracle_model.cc) so that both skip the same
// modules and hand a tiled MLP the same weights: the modules the forward leaves out
// (hookstream.unused_modules, matched by the simulator's rule, sim/engine/forward_graph.h module_unused),
// the tiled-MLP shards, and the trainable parameters a projection or an MLP reads.
#pragma once

#include <string>
#include <vector>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct ModelStepView {
  std::vector<std::string> unused;
  int shards = 1;
  bool skipped(const std::string& path) const;
};

// `micro_step` -1: without hookstream.micro_step_overrides.
ModelStepView model_step_view(const Plan& plan, int rank, int iteration, int micro_step = -1);

// The projection's module path without PEFT's ".base_layer" (what unused_modules names).
std::string linear_module_path(const ModelStructure& structure, const LinearUse& use);

// PEFT's LoRA branch scale * B(A(x)) (peft/tuners/lora/layer.py Linear.forward) runs only with
// both adapters: a skipped lora_A or lora_B drops the branch, and with it both weights.
bool lora_active(const ModelStructure& structure, const LinearUse& use, const ModelStepView& step);

// Trainable parameters a projection reads in this step (weight, bias, LoRA A and B), appended.
void append_linear_trainable_weights(const ModelStructure& structure, const LinearUse& use, const ModelStepView& step,
                                     std::vector<int>& out);

// The same for gate, up and down: the weights a tiled MLP recomputes with.
std::vector<int> mlp_trainable_weights(const ModelStructure& structure, const DecoderLayerUse& layer,
                                       const ModelStepView& step);

}  // namespace hookstream
