#include "sim/sync/fsdp2/fsdp2_units.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>

#include "sim/inputs/architectures/architecture.h"
#include "sim/inputs/architectures/vision_tower.h"
#include "sim/inputs/input_error.h"

namespace hookstream {

namespace {

std::string normalized(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c != '_' && c != '-') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// transformers names a model's classes after its modeling file: LlamaDecoderLayer, Qwen3MoeMLP,
// Llama4TextDecoderLayer, Qwen3_5DecoderLayer. Compared without case and underscores against the
// model_type (with or without a "_text" part) and the architecture's prefix (LlamaForCausalLM).
std::vector<std::string> class_prefixes(const Plan& plan) {
  std::vector<std::string> out;
  const std::string type = normalized(plan.model.model_type.empty() ? "llama" : plan.model.model_type);
  out.push_back(type);
  if (ends_with(type, "text")) out.push_back(type.substr(0, type.size() - 4));
  else out.push_back(type + "text");
  const std::string arch = plan.model.architecture;
  for (const char* suffix : {"ForCausalLM", "ForConditionalGeneration"}) {
    if (ends_with(arch, suffix)) out.push_back(normalized(arch.substr(0, arch.size() - std::string(suffix).size())));
  }
  // A described vision-language model builds its language model with AutoModel.from_config(text_config)
  // (LlavaModel.__init__): the decoder layers are the text type's only (LLaVA: LlamaDecoderLayer; there
  // is no LlavaDecoderLayer for accelerate's get_module_class_from_name to find).
  if (find_vision_language(plan.model.model_type) != nullptr) {
    const std::string text = normalized(plan.model.decoder_type);
    out = {text};
    if (ends_with(text, "text")) out.push_back(text.substr(0, text.size() - 4));
  }
  return out;
}

bool is_class(const std::vector<std::string>& prefixes, const std::string& name, const std::string& suffix) {
  if (!ends_with(name, suffix)) return false;
  const std::string prefix = normalized(name.substr(0, name.size() - suffix.size()));
  return std::find(prefixes.begin(), prefixes.end(), prefix) != prefixes.end();
}

std::string camel(const std::string& model_type) {
  std::string out;
  bool upper = true;
  for (char c : model_type) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

bool under(const std::string& path, const std::string& unit) {
  if (unit.empty()) return true;
  return path == unit || (path.size() > unit.size() && path.compare(0, unit.size(), unit) == 0 && path[unit.size()] == '.');
}

}  // namespace

// The table's class name where the layer is not <Model>DecoderLayer (GPT2Block, GPTNeoXLayer, ...).
std::string table_layer_class(const Plan& plan) {
  const ArchitectureSpec* spec = find_architecture(plan.model.decoder_type);
  return spec != nullptr ? spec->layer_class : "";
}

std::string fsdp2_decoder_layer_class(const Plan& plan) {
  if (const std::string named = table_layer_class(plan); !named.empty()) return named;
  if (find_vision_language(plan.model.model_type) != nullptr) {
    std::string text = plan.model.decoder_type;  // gemma3_text: Gemma3DecoderLayer
    if (ends_with(text, "_text")) text.resize(text.size() - 5);
    return camel(text) + "DecoderLayer";
  }
  const std::string arch = plan.model.architecture;
  for (const char* suffix : {"ForCausalLM", "ForConditionalGeneration"}) {
    if (ends_with(arch, suffix)) return arch.substr(0, arch.size() - std::string(suffix).size()) + "DecoderLayer";
  }
  return camel(plan.model.model_type.empty() ? "llama" : plan.model.model_type) + "DecoderLayer";
}

int Fsdp2Units::find(const std::string& path) const {
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i].path == path) return static_cast<int>(i);
  }
  return -1;
}

bool fsdp2_adapter_units(const Plan& plan) {
  const bool lora_linears = plan.adapter != Adapter::None && (!plan.lora_target_modules.empty() || plan.lora_target_linear);
  return lora_linears && plan.engine.fsdp.auto_wrap_policy != "NO_WRAP" && plan.lora_target_parameters.empty();
}

Fsdp2Units fsdp2_units(const Plan& plan, const ModelStructure& structure) {
  const FsdpSettings& fsdp = plan.engine.fsdp;
  Fsdp2Units out;
  if (fsdp.reshard_after_forward) out.reshard_after_forward = *fsdp.reshard_after_forward;
  bool wrap_layers = false, wrap_mlps = false;
  const std::string policy = fsdp.auto_wrap_policy;
  if (policy == "NO_WRAP") {
    // root only
  } else if (fsdp.transformer_layer_cls_to_wrap.empty()) {
    // accelerate: TRANSFORMER_BASED_WRAP without a class list uses model._no_split_modules.
    wrap_layers = true;
    if (policy == "SIZE_BASED_WRAP") {
      out.notes.push_back("fsdp_config.auto_wrap_policy: SIZE_BASED_WRAP is modelled as one unit per decoder layer");
    }
  } else {
    const std::vector<std::string> prefixes = class_prefixes(plan);
    const auto at = fsdp.where.find("transformer_layer_cls_to_wrap");
    const std::string where = at != fsdp.where.end() ? at->second : plan.source + ": fsdp_config.transformer_layer_cls_to_wrap";
    for (const std::string& name : fsdp.transformer_layer_cls_to_wrap) {
      // A layer class the table names is the only one (GPT-2 has GPT2Block, no GPT2DecoderLayer:
      // accelerate's get_module_class_from_name finds nothing and fails).
      const std::string named = table_layer_class(plan);
      if (named.empty() ? is_class(prefixes, name, "DecoderLayer") : name == named) {
        wrap_layers = true;
      } else if (is_class(prefixes, name, "MLP")) {
        wrap_mlps = true;
      } else if (!structure.vision_blocks.empty() &&
                 (ends_with(name, "VisionBlock") || ends_with(name, "Block") || name == structure.vision_block_class)) {
        out.notes.push_back(fmt::format("fsdp_config.transformer_layer_cls_to_wrap: {} (vision) is not modelled as its own unit", name));
      } else {
        throw InputError(where, fmt::format("transformer_layer_cls_to_wrap names '{}', a class {} does not have "
                                            "(expected its decoder layer {} or its MLP class)",
                                            name, plan.model.model_type.empty() ? "the model" : plan.model.model_type,
                                            fsdp2_decoder_layer_class(plan)));
      }
    }
  }
  out.units.push_back(Fsdp2Unit{});
  for (const DecoderLayerUse& layer : structure.layers) {
    if (wrap_layers) out.units.push_back(Fsdp2Unit{layer.path, layer.index, false, {}});
    if (wrap_mlps) out.units.push_back(Fsdp2Unit{layer.path + "." + layer.mlp_module, layer.index, true, {}});
  }
  // axolotl 0.18 replaces accelerate's fsdp2_prepare_model (monkeypatch/accelerate/fsdp2.py): walking
  // the modules bottom-up it calls fully_shard on lora_A[adapter] and lora_B[adapter] of every
  // LoraLayer before the layer policy, whatever the policy (not on NO_WRAP, where it walks nothing).
  // A lora.Linear's A and B are called as modules (sim/engine/forward_graph.cc adapter_call), so
  // each is a unit with its own all-gather, reduce-scatter and post-backward; PEFT's ParamWrapper
  // (lora_target_parameters) is skipped there and its A and B stay in their layer's unit.
  const bool lora_linears = plan.adapter != Adapter::None && (!plan.lora_target_modules.empty() || plan.lora_target_linear);
  if (plan.adapter != Adapter::None && (plan.load_in_4bit || plan.load_in_8bit)) {
    // QLoRA as axolotl runs it under FSDP2: bitsandbytes' Params4bit / Int8Params are frozen (no
    // AccumulateGrad, no reduce-scatter), so the hook schedule is LoRA's over frozen base weights;
    // their shards and all-gathers are costed in the quantized storage (sim/cost/engine_cost.cc).
    // No oracle has run it: bitsandbytes does not run on the CPU oracle (docs/engines/fsdp2.md).
    out.notes.push_back(std::string("adapter over bitsandbytes-quantized base weights (") + (plan.load_in_4bit ? "load_in_4bit" : "load_in_8bit") +
                        ") under FSDP2: modelled as LoRA over frozen base weights (they get no gradient and no "
                        "reduce-scatter); not checked against real fully_shard, which the CPU oracle cannot run with bitsandbytes");
  }
  if (lora_linears && policy != "NO_WRAP" && !plan.lora_target_parameters.empty()) {
    out.notes.push_back("adapter with lora_target_parameters under FSDP2: axolotl shards the lora_A and lora_B of "
                        "each lora.Linear as units of their own (not a ParamWrapper's); hookstream keeps all of them "
                        "in their decoder layer's unit here (their own all-gathers, reduce-scatters and "
                        "post-backward hooks are not modelled)");
  } else if (fsdp2_adapter_units(plan)) {
    for (const Parameter& p : structure.parameters) {
      if (!p.adapter || (!ends_with(p.module, ".lora_A.default") && !ends_with(p.module, ".lora_B.default"))) continue;
      out.units.push_back(Fsdp2Unit{p.module, p.layer, false, {}});
    }
  }
  out.unit_of.assign(structure.parameters.size(), 0);
  for (size_t p = 0; p < structure.parameters.size(); ++p) {
    const std::string& module = structure.parameters[p].module;
    size_t best = 0;
    for (size_t u = 1; u < out.units.size(); ++u) {
      const bool inside = module == out.units[u].path || under(module, out.units[u].path);
      if (inside && out.units[u].path.size() > out.units[best].path.size()) best = u;
    }
    out.unit_of[p] = static_cast<int>(best);
    out.units[best].parameters.push_back(static_cast<int>(p));
  }
  return out;
}

}  // namespace hookstream
