// A tiny LibTorch model with exactly the parameters of a plan's model structure
// (sim/inputs/model_structure.h), run the way the plan says: checkpointed layers, tiled MLP, unused
// modules, vision inputs. Its numbers are meaningless; its autograd graph (which parameters are
// used, where, in which graph task) is the plan's.
//
// Every parameter is a float32 CPU tensor, whatever the plan's dtype (bf16 on CPU would only add
// rounding noise to the gradient comparisons; DDP's hooks and buckets depend on the parameter list
// and sizes, not on the dtype, except that buckets are per dtype and a plan has one dtype).
// Quantized base weights are plain frozen float tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/hook_recorder.h"
#include "runtime/layer_function.h"
#include "runtime/model_step.h"
#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct StepPosition {
  int rank = 0;
  int iteration = 0;
  int micro_step = 0;
};

struct Batch {
  at::Tensor input_ids;  // [micro_batch_size, sequence_len] int64
  at::Tensor labels;     // same shape
  at::Tensor pixels;     // [patches, channels*temporal*patch*patch]; undefined without vision inputs
};

class OracleModel {
 public:
  // Deterministic: the same plan and seed give the same parameters in every process.
  OracleModel(const Plan& plan, uint64_t seed);

  const ModelStructure& structure() const { return structure_; }
  const ParameterTable& parameters() const { return parameters_; }
  std::vector<at::Tensor> ddp_parameters() const;
  std::vector<std::string> ddp_parameter_names() const;

  // Different data per rank, iteration and micro-step (seed + position), the same in every run.
  Batch make_batch(const StepPosition& position) const;

  // The model's forward for one micro-step; returns the loss (divided by
  // gradient_accumulation_steps, as HF Trainer does). `recorder` labels nested graph tasks.
  at::Tensor forward(const Batch& batch, const StepPosition& position, HookRecorder* recorder) const;

 private:
  using StepView = ModelStepView;  // what the plan says for one position (runtime/model_step.h)

  at::Tensor linear(const at::Tensor& x, const LinearUse& use, const ParameterTable& p, const StepView& step) const;
  at::Tensor rms_norm(const at::Tensor& x, int weight, const ParameterTable& p) const;
  at::Tensor decoder_layer(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p,
                           const ParameterTable& inputs_table, const StepView& step,
                           HookRecorder* recorder) const;
  at::Tensor attention(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p,
                       const StepView& step) const;
  at::Tensor mlp(const at::Tensor& x, const DecoderLayerUse& layer, const ParameterTable& p, const StepView& step) const;
  // Returns the merged image tokens; `deepstack` receives the DeepStack features (Qwen3-VL), one per
  // listed vision block, added after decoder layers 0, 1, ...
  at::Tensor vision(const at::Tensor& pixels, const ParameterTable& p, const StepView& step,
                    std::vector<at::Tensor>& deepstack) const;

  Plan plan_;
  uint64_t seed_;
  ModelStructure structure_;
  ParameterTable parameters_;
};

// True when `module_path` (as ModelStructure spells it) is listed in `unused`: an entry names the
// module or one of its ancestors, with or without PEFT's "base_model.model." prefix, or is a
// dotted suffix of it (a leaf name such as "lm_head").

}  // namespace hookstream
