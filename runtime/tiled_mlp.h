// A tiled MLP in the style of DeepSpeed/Arctic Long Sequence Training's TiledMLP
// (an autograd.Function that runs the MLP shard by shard along the sequence, under no_grad, and
// recomputes each shard in backward). How it produces the weights' gradients decides which graph
// tasks fire DDP's hooks (sim/inputs/plan.h TiledBackward).
#pragma once

#include <string>
#include <vector>

#include "runtime/hook_recorder.h"
#include "runtime/layer_function.h"
#include "runtime/model_step.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct TiledMlpSpec {
  LayerFunction mlp;           // reads its weights from `weights_table` (always the real tensors:
                               // ALST recomputes through ctx.self, the module, not saved tensors)
  ParameterTable weights_table;
  std::vector<int> weights;    // trainable MLP parameters (indices into the table)
  int shards = 1;
  TiledBackward strategy = TiledBackward::BackwardPerChunk;
  // The Function receives the weights as inputs (`inputs_table[weights]`, possibly recomputation
  // copies). Forced on for FunctionReturnsGrads, which needs inputs to return gradients to.
  bool weights_as_inputs = false;
  HookRecorder* recorder = nullptr;
  int layer = -1;
};

// The spec of decoder layer `layer`'s tiled MLP under `plan` at `step`: its trainable weights in
// `weights_table`, the step's shards, the plan's backward strategy; `mlp` computes one shard. The
// trainer and the DDP oracle both build theirs here.
TiledMlpSpec tiled_mlp_spec(const Plan& plan, const ModelStructure& structure, const DecoderLayerUse& layer,
                            const ModelStepView& step, const ParameterTable& weights_table, LayerFunction mlp);

// `inputs_table` supplies the tensors passed as the Function's weight inputs.
at::Tensor tiled_mlp(const at::Tensor& hidden, const TiledMlpSpec& spec, const ParameterTable& inputs_table);

}  // namespace hookstream
