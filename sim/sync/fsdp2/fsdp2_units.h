// Which modules are FSDP2 units (fully_shard calls) for a plan: what accelerate's
// fsdp2_prepare_model (accelerate/utils/fsdp_utils.py) does with fsdp_config: fully_shard on every
// module whose class is in transformer_layer_cls_to_wrap (TRANSFORMER_BASED_WRAP; empty list: the
// model's _no_split_modules, i.e. the decoder layer), nothing but the root for NO_WRAP, then on the
// root; with LoRA, axolotl's replacement of it also shards each lora_A and lora_B on its own. Each
// parameter belongs to the innermost unit above it.
#pragma once

#include <string>
#include <vector>

#include "sim/inputs/model_structure.h"
#include "sim/inputs/plan.h"

namespace hookstream {

struct Fsdp2Unit {
  std::string path;   // "" for the root, "model.layers.3", "model.layers.3.mlp"
  int layer = -1;     // decoder layer, -1 for the root
  bool mlp = false;   // an MLP wrapped on its own (an FSDP unit inside a tiled function)
  std::vector<int> parameters;  // indices into ModelStructure::parameters it owns
};

struct Fsdp2Units {
  std::vector<Fsdp2Unit> units;    // [0] is the root
  std::vector<int> unit_of;        // per parameter: index into units
  bool reshard_after_forward = true;  // fully_shard's default; fsdp_config.reshard_after_forward
  std::vector<std::string> notes;  // settings read but not modelled (SIZE_BASED_WRAP, vision classes)
  int find(const std::string& path) const;  // -1 when the module is no unit
};

// Throws InputError (one line, exit 2) when transformer_layer_cls_to_wrap names a class the model
// lacks.
Fsdp2Units fsdp2_units(const Plan& plan, const ModelStructure& structure);

// Whether each lora_A and lora_B of a lora.Linear is an FSDP2 unit of its own (axolotl 0.18's
// fsdp2_prepare_model; fsdp2_units.cc says when).
bool fsdp2_adapter_units(const Plan& plan);

// "LlamaDecoderLayer" for a llama model: the class names accepted for the decoder layer.
std::string fsdp2_decoder_layer_class(const Plan& plan);

}  // namespace hookstream
