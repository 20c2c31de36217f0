// What DeepSpeed's ZeRO optimizers share (stages 1/2: zero_model.cc, stage 3: zero3_model.cc): the
// settings as DeepSpeed ends up with them after HF's Trainer filled "auto", and the parameters
// DeepSpeed's TiledMLP marks ds_grad_is_ready.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

// zero_optimization.reduce_bucket_size in elements: the number; "auto": hidden_size * hidden_size
// (transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_finalize, the
// HF Trainer axolotl and accelerate-launched scripts run); absent: DeepSpeedZeroConfig's 5e8.
int64_t zero_reduce_bucket_size(const Plan& plan);

// ZeRO-3's param_persistence_threshold in elements: the number; "auto" under
// stage3_param_persistence_threshold: 10 * hidden_size (trainer_config_finalize); absent, or "auto"
// under the alias (DeepSpeed drops "auto" values, config_utils.py): DeepSpeedZeroConfig's 1e5.
int64_t zero_persistence_threshold(const Plan& plan);

// The trainable parameters of decoder layer `layer`'s MLP (gate/up/down weights, biases, LoRA
// pairs): DeepSpeed's TiledMLP compute_params (deepspeed/runtime/sequence_parallel/ulysses_sp.py
// TiledMLP.backward sets param.ds_grad_is_ready on them), and a ZeRO-3 leaf MLP's parameters.
std::vector<int> mlp_parameters(const ModelStructure& structure, int layer);

}  // namespace hookstream
