#include "sim/inputs/model_structure.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <regex>
#include <map>
#include <set>

#include "sim/inputs/architectures/architecture.h"
#include "sim/inputs/architectures/per_expert_layout.h"
#include "sim/inputs/architectures/vision_tower.h"
#include "sim/inputs/input_error.h"
#include "sim/inputs/data_files.h"

namespace hookstream {

int64_t Parameter::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Parameter::bytes() const {
  // bitsandbytes' Linear4bit packs two 4-bit values per byte; Linear8bitLt stores int8.
  if (quantized) return dtype_bytes(dtype) == 1 ? numel() : (numel() + 1) / 2;
  return numel() * dtype_bytes(dtype);
}

namespace {

// A module of the base model as PEFT sees it while matching target_modules: its name in
// model.named_modules() (no PEFT prefix) and whether LoRA can wrap it.
enum class ModuleType { Linear, Conv, Embedding, Other };
struct ModuleEntry {
  std::string name;
  ModuleType type = ModuleType::Other;
};

// The table entry a config is built with. A ModelConfig built in code (not parsed: no `values`)
// names its type in model_type only.
const ArchitectureSpec* architecture_of(const ModelConfig& m) {
  const ArchitectureSpec* spec = nullptr;
  if (m.values.empty() && !m.model_type.empty()) spec = find_architecture(m.model_type);
  return spec != nullptr ? spec : find_architecture(m.decoder_type);
}

// What the table's expressions are evaluated against: the config's keys, with the ModelConfig
// fields (authoritative, and all a config built in code has) over them.
std::map<std::string, double> structure_values(const ModelConfig& m) {
  std::map<std::string, double> values = m.values;
  // A parsed config already has the class defaults, less the keys it wrote null.
  const ArchitectureSpec* spec = architecture_of(m);
  if (spec != nullptr && m.values.empty()) {
    for (const auto& [key, value] : spec->defaults) values.emplace(key, value);
  }
  values["hidden_size"] = m.hidden_size;
  values["intermediate_size"] = m.intermediate_size;
  values["num_hidden_layers"] = m.num_hidden_layers;
  values["num_attention_heads"] = m.num_attention_heads;
  values["num_key_value_heads"] = m.num_key_value_heads;
  values["head_dim"] = m.head_dim;
  values["vocab_size"] = m.vocab_size;
  if (m.attention_bias) values["attention_bias"] = 1;
  if (m.qk_norm) values["qk_norm"] = 1;
  return values;
}

// PEFT 0.21 rewrites target_modules written for transformers v4 MoE layers (per-expert nn.Linear
// w1/w2/w3 or gate_proj/up_proj/down_proj, and an nn.Linear router `gate`) into target_parameters
// on the fused v5 tensors, for the model types transformers converts checkpoints of
// (peft/utils/transformers_weight_conversion.py _MOE_TARGET_MODULE_MAPPING, _MOE_FUSED_TARGETS,
// _convert_peft_config_moe). Each mapping is in PEFT's order: the first old name that matches wins.
struct MoeConversion {
  std::vector<std::pair<std::string, std::string>> mapping;  // v4 leaf -> v5 parameter
  std::string fused;                                         // v5 parameter several v4 leaves fuse into
  std::vector<std::string> fused_from;
};

const MoeConversion* moe_conversion(const std::string& name) {
  static const MoeConversion mixtral{
      {{"gate", "gate.weight"}, {"w1", "gate_up_proj"}, {"w3", "gate_up_proj"}, {"w2", "down_proj"}},
      "gate_up_proj",
      {"w1", "w3"}};
  static const MoeConversion qwen2_moe{
      {{"gate", "gate.weight"}, {"gate_proj", "gate_up_proj"}, {"up_proj", "gate_up_proj"}, {"down_proj", "down_proj"}},
      "gate_up_proj",
      {"gate_proj", "up_proj"}};
  if (name == "mixtral") return &mixtral;
  if (name == "qwen2_moe") return &qwen2_moe;
  return nullptr;
}

bool suffix_match(const std::string& name, const std::string& target) {
  return name == target || (name.size() > target.size() &&
                            name.compare(name.size() - target.size(), target.size(), target) == 0 &&
                            name[name.size() - target.size() - 1] == '.');
}

std::string leaf_of(const std::string& name) { return name.substr(name.rfind('.') + 1); }

// The pieces of `text` between any of `delims` (the factors of a shape expression).
std::vector<std::string> split_any(const std::string& text, const char* delims) {
  std::vector<std::string> pieces(1);
  for (char c : text) {
    if (std::strchr(delims, c) != nullptr) pieces.emplace_back();
    else pieces.back() += c;
  }
  return pieces;
}

// Which modules and parameters get a LoRA adapter, by PEFT 0.21's rules (peft/tuners/tuners_utils.py):
// check_target_module_exists - a string target_modules is re.fullmatch'ed against the module name,
// a list matches a name equal to an entry or ending in "." + entry; "all-linear"
// (_maybe_include_all_linear_layers) is every nn.Linear but the output embedding. axolotl's
// lora_target_linear adds the leaf names of every Linear but the head (axolotl
// src/axolotl/loaders/adapter.py find_all_linear_names) to the list. target_parameters
// (BaseTuner._inject_parameters) match "<module>.<parameter>" the list way and wrap the parameter in
// a lora.ParamWrapper. A match on a module LoRA cannot wrap is PEFT's ValueError
// (peft/tuners/lora/model.py _create_new_module); no match at all is its "Target modules ... not
// found in the base model" (BaseTuner.inject_adapter).
// The output head's module path: the decoder's (lm_head), or where a vision-language model keeps its
// text model's (Llama 4: language_model.lm_head).
std::string head_module_of(const ModelConfig& model, const ArchitectureSpec* spec) {
  if (const VisionLanguageSpec* vl = find_vision_language(model.model_type); vl != nullptr && !vl->head.empty()) return vl->head;
  return spec != nullptr ? spec->head : "lm_head";
}

class TargetMatcher {
 public:
  TargetMatcher(const Plan& plan, const std::vector<ModuleEntry>& modules, const std::vector<std::string>& params,
                const ArchitectureSpec* spec) {
    if (plan.adapter == Adapter::None) return;
    const std::string head = head_module_of(plan.model, spec);
    where_ = plan.source + ": key lora_target_modules";
    std::vector<std::string> names = plan.lora_target_modules;
    bool regex = plan.lora_target_modules_regex && !names.empty();
    std::vector<std::string> parameters = plan.lora_target_parameters;
    std::map<std::string, int> rank_factor;  // PEFT's rank_pattern from the MoE conversion
    auto all_linear = [&]() {
      std::vector<std::string> out;
      for (const ModuleEntry& m : modules) {
        if (m.type == ModuleType::Linear && m.name != head) out.push_back(m.name);
      }
      return out;
    };
    if (plan.lora_target_linear) {
      // axolotl's load_lora: a string lora_target_modules becomes one entry of the list, so it is
      // then matched as a name, not as a regular expression.
      regex = false;
      for (const std::string& name : all_linear()) {
        const std::string leaf = leaf_of(name);
        if (std::find(names.begin(), names.end(), leaf) == names.end()) names.push_back(leaf);
      }
    }
    std::optional<std::regex> pattern;
    if (regex) {
      try {
        pattern.emplace(names[0], std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw InputError(where_, "expected a regular expression, got \"" + names[0] + "\" (" + e.what() + ")");
      }
    }
    // The conversion maps v4 names onto v5's fused tensors; a model built with per-expert modules
    // keeps the v4 names, which target_modules then match as they are.
    const bool fused = spec != nullptr && choose_expert_layout(*spec, plan.model, plan.transformers_version,
                                                               plan.trust_remote_code).layout == ExpertLayout::Fused;
    // PEFT keys the conversion on model.config.model_type (peft/utils/transformers_weight_conversion.py
    // _convert_peft_config_moe: _MODEL_TO_CONVERSION_PATTERN.get(model_type)), the composite's for a
    // vision-language model. Of the described vision-language types with an MoE decoder, transformers
    // 5.17's table names glm4v_moe (qwen2_moe, its decoder's pattern too); kimi_k25 (a DeepSeek-V3
    // decoder) and aria (llava: no MoE target mapping) none, so their targets are not converted.
    const bool composite_unconverted = find_vision_language(plan.model.model_type) != nullptr && plan.model.model_type != "glm4v_moe";
    const MoeConversion* conversion = fused && !composite_unconverted ? moe_conversion(spec->peft_moe_conversion) : nullptr;
    if (conversion != nullptr && (regex || !names.empty())) {
      // _resolve_string_target_modules: a string becomes the leaf names it reaches.
      if (regex) {
        std::vector<std::string> resolved;
        auto add_leaf = [&](const std::string& leaf) {
          if (std::find(resolved.begin(), resolved.end(), leaf) == resolved.end()) resolved.push_back(leaf);
        };
        if (lowercase(names[0]) == "all-linear") {
          for (const std::string& name : all_linear()) add_leaf(leaf_of(name));
          for (const auto& entry : conversion->mapping) add_leaf(entry.first);
        } else {
          for (const ModuleEntry& m : modules) {
            if (std::regex_match(m.name, *pattern)) add_leaf(leaf_of(m.name));
          }
          for (const std::string& name : params) {
            if (std::regex_match(name, *pattern)) add_leaf(leaf_of(name));
          }
          // A v4 name fused away (gate_proj inside gate_up_proj) is probed as "<container>.<old name>".
          for (const auto& [old_name, new_name] : conversion->mapping) {
            for (const std::string& name : params) {
              if (leaf_of(name) != new_name) continue;
              const std::string container = name.substr(0, name.rfind('.'));
              if (std::regex_match(container + "." + old_name, *pattern)) {
                add_leaf(old_name);
                break;
              }
            }
          }
        }
        if (!resolved.empty()) {
          names = resolved;
          regex = false;
          pattern.reset();
        }
      }
      if (!regex) {
        std::vector<std::string> remaining, fused_present;
        for (const std::string& target : names) {
          bool mapped = false;
          for (const auto& [old_name, new_name] : conversion->mapping) {
            if (!suffix_match(target, old_name)) continue;
            if (std::find(parameters.begin(), parameters.end(), new_name) == parameters.end()) parameters.push_back(new_name);
            if (new_name == conversion->fused) fused_present.push_back(old_name);
            mapped = true;
            break;
          }
          if (!mapped) remaining.push_back(target);
        }
        std::sort(fused_present.begin(), fused_present.end());
        fused_present.erase(std::unique(fused_present.begin(), fused_present.end()), fused_present.end());
        if (!fused_present.empty() && fused_present.size() < conversion->fused_from.size()) {
          std::vector<std::string> missing;
          for (const std::string& old_name : conversion->fused_from) {
            if (!std::binary_search(fused_present.begin(), fused_present.end(), old_name)) missing.push_back(old_name);
          }
          throw InputError(where_, "Cannot convert PEFT target(s) " + join(fused_present) + " without also targeting " +
                                       join(missing) + " because they are fused into " + conversion->fused +
                                       ". (PEFT 0.21 maps transformers v4 expert names onto v5's fused tensors)");
        }
        if (fused_present.size() > 1) rank_factor[conversion->fused] = static_cast<int>(fused_present.size());
        names = remaining;
      }
    }
    if (regex && lowercase(names[0]) == "all-linear") {
      regex = false;
      pattern.reset();
      names = all_linear();
    }
    for (const ModuleEntry& m : modules) {
      bool match = false;
      if (pattern) {
        match = std::regex_match(m.name, *pattern);
      } else {
        for (const std::string& t : names) match = match || suffix_match(m.name, t);
      }
      if (!match) continue;
      if (m.type == ModuleType::Other) {
        throw InputError(where_, "Target module " + m.name +
                                     " is not supported. Currently, only the following modules are supported: "
                                     "`torch.nn.Linear`, `torch.nn.Embedding`, `torch.nn.Conv1d`, `torch.nn.Conv2d`, "
                                     "`torch.nn.Conv3d`, `transformers.pytorch_utils.Conv1D`, `torch.nn.MultiheadAttention.`. "
                                     "(PEFT 0.21)");
      }
      if (m.type == ModuleType::Embedding) {
        throw InputError(where_, "LoRA on the embedding " + m.name + " (PEFT's lora.Embedding) is not modelled by hookstream yet");
      }
      targets_.insert(m.name);
    }
    for (const std::string& name : params) {
      for (const std::string& t : parameters) {
        if (!suffix_match(name, t)) continue;
        auto factor = rank_factor.find(leaf_of(name));
        parameter_ranks_[name] = plan.lora_r * (factor == rank_factor.end() ? 1 : factor->second);
      }
    }
    if (targets_.empty() && parameter_ranks_.empty()) {
      if (!parameters.empty() && names.empty() && !regex) {
        throw StartupError(plan.source + ": key lora_target_parameters",
                           "Target parameters " + python_set(parameters) + " not found in the base model.",
                           "lora_targets_not_found", "PEFT 0.21");
      }
      const std::string shown = regex ? names[0] : python_set(names);
      // A list holding "all-linear" ([all-linear] / - all-linear) is not the shorthand: axolotl passes
      // lora_target_modules to LoraConfig unchanged (src/axolotl/loaders/adapter.py
      // _build_peft_lora_config), and PEFT expands "all-linear" only when target_modules is that string
      // (peft/tuners/tuners_utils.py _maybe_include_all_linear_layers); as a list entry it is a module
      // name that matches nothing. Alongside other names it is ignored like any unmatched name.
      std::string hint;
      if (!regex) {
        for (const std::string& name : names) {
          if (lowercase(name) == "all-linear") {
            hint = " (in a list, \"all-linear\" is a module name; PEFT expands it only as the string: "
                   "expected lora_target_modules: all-linear)";
          }
        }
      }
      throw StartupError(where_, "Target modules " + shown +
                                     " not found in the base model. Please check the target modules and try again." + hint,
                         "lora_targets_not_found", "PEFT 0.21");
    }
  }

  bool targeted(const std::string& module) const { return targets_.count(module) > 0; }
  // The LoRA rank of a targeted parameter ("<module>.<name>"), 0 when it is not targeted.
  int parameter_rank(const std::string& parameter) const {
    auto it = parameter_ranks_.find(parameter);
    return it == parameter_ranks_.end() ? 0 : it->second;
  }
  const std::string& where() const { return where_; }

 private:
  static std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
  }
  // Python's repr of a set of strings (PEFT's message prints the set it was given).
  static std::string python_set(const std::vector<std::string>& items) {
    if (items.empty()) return "set()";
    std::string out;
    for (const std::string& item : items) out += (out.empty() ? "{'" : ", '") + item + "'";
    return out + "}";
  }

  std::string where_;
  std::set<std::string> targets_;
  std::map<std::string, int> parameter_ranks_;
};

// Accumulates parameters in named_parameters() order. The decoder follows the architecture table
// (sim/inputs/architectures/architecture.cc), which lists each layer's modules in registration order; the
// vision tower mirrors Qwen3VLVisionModel (Qwen3VLVisionBlock registers norm1, norm2, attn, mlp).
// With `catalog` set, the builder also lists every module for the LoRA target matcher.
class StructureBuilder {
 public:
  StructureBuilder(const Plan& plan, ModelStructure& out, const TargetMatcher* matcher,
                   std::vector<ModuleEntry>* catalog, std::vector<std::string>* param_catalog)
      : plan_(plan), out_(out), matcher_(matcher), catalog_(catalog), param_catalog_(param_catalog),
        values_(structure_values(plan.model)) {
    prefix_ = plan.adapter == Adapter::None ? "" : "base_model.model.";
    if (const ArchitectureSpec* spec = architecture_of(plan.model)) {
      for (std::string pattern : spec->keep_in_fp32_strict) {
        for (size_t star = pattern.find('*'); star != std::string::npos; star = pattern.find('*', star + 2)) {
          pattern.replace(star, 1, ".*");
        }
        keep_fp32_.emplace_back(pattern);
      }
    }
    for (const auto& pattern : plan.unfrozen_parameters) {
      try {
        unfrozen_.emplace_back(pattern);
      } catch (const std::regex_error& e) {
        throw InputError(plan.source + ": key unfrozen_parameters",
                         "expected a regular expression, got \"" + pattern + "\" (" + e.what() + ")");
      }
    }
  }

  int add(const std::string& module, const std::string& leaf, std::vector<int64_t> shape,
          bool trainable, int layer, const std::string& group, bool quantized = false) {
    note(module, ModuleType::Other);
    if (param_catalog_ != nullptr) param_catalog_->push_back(module + "." + leaf);
    Parameter p;
    p.module = prefix_ + module;
    p.name = p.module + "." + leaf;
    p.shape = std::move(shape);
    p.dtype = plan_.model.torch_dtype;
    if (p.dtype != DType::Float32) {
      // The plan is made before PEFT wraps anything: the name without PEFT's ".base_layer".
      std::string unprefixed = module + "." + leaf;
      for (size_t at = unprefixed.find(".base_layer"); at != std::string::npos; at = unprefixed.find(".base_layer")) {
        unprefixed.erase(at, 11);
      }
      for (const std::regex& re : keep_fp32_) {
        if (std::regex_search(unprefixed, re)) p.dtype = DType::Float32;
      }
    }
    p.quantized = quantized;
    p.layer = layer;
    p.group = group;
    // axolotl's unfrozen_parameters freezes everything else and unfreezes the matching names.
    if (!unfrozen_.empty() && !quantized) {
      trainable = trainable && plan_.adapter != Adapter::None;  // adapters stay trainable
      for (const auto& re : unfrozen_) {
        if (std::regex_search(p.name, re)) trainable = true;
      }
    }
    p.trainable = trainable && !quantized;
    out_.parameters.push_back(std::move(p));
    return static_cast<int>(out_.parameters.size()) - 1;
  }

  // Records a module (and its parent modules, which PEFT also tries to match) for the catalog.
  void note(const std::string& module, ModuleType type) {
    if (catalog_ == nullptr) return;
    for (size_t dot = module.find('.'); dot != std::string::npos; dot = module.find('.', dot + 1)) {
      const std::string parent = module.substr(0, dot);
      if (seen_.insert(parent).second) catalog_->push_back({parent, ModuleType::Other});
    }
    if (seen_.insert(module).second) {
      catalog_->push_back({module, type});
    } else if (type != ModuleType::Other) {
      for (ModuleEntry& entry : *catalog_) {
        if (entry.name == module) entry.type = type;
      }
    }
  }

  bool is_lora_target(const std::string& module) const {
    const bool targeted = plan_.adapter != Adapter::None && matcher_ != nullptr && matcher_->targeted(module);
    if (targeted) refuse_mamba_target(module);
    return targeted;
  }

  // PEFT refuses LoRA on a Mamba model's out_proj and conv1d, wherever they are
  // (peft/tuners/tuners_utils.py _check_lora_target_modules_mamba: model.config.model_type in
  // {falcon_h1, mamba, mamba2, falcon_mamba, nemotron_h}, the target's last name in {out_proj,
  // conv1d}); its message, word for word (the set as PEFT's source writes it).
  void refuse_mamba_target(const std::string& module) const {
    static const std::set<std::string> mamba_types = {"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"};
    const std::string leaf = module.substr(module.rfind('.') + 1);
    if (mamba_types.count(plan_.model.model_type) == 0 || (leaf != "out_proj" && leaf != "conv1d")) return;
    throw InputError(matcher_->where(), "[PEFT:PeftType.LORA] Module '" + leaf + "' is incompatible with Mamba-based models (model_type='" +
                                            plan_.model.model_type + "'). Incompatible modules: {'out_proj', 'conv1d'}. Please remove it "
                                            "from `target_modules` to avoid compatibility issues.");
  }

  // A Linear(in, out) at `module`, wrapped by PEFT's LoraLayer when targeted: base_layer.weight,
  // base_layer.bias, lora_A.default.weight [r, in], lora_B.default.weight [out, r]
  // (peft/tuners/lora/layer.py registers base_layer first, then lora_A, lora_B). A Conv3d (Qwen-VL's
  // patch embedding) gets lora_A with the conv's kernel and lora_B with a 1x1x1 kernel
  // (peft/tuners/lora/layer.py _ConvNd.update_layer).
  // `transposed`: transformers' Conv1D (GPT-2), whose weight is [in, out]; bitsandbytes turns it
  // into a Linear4bit/Linear8bitLt with the weight transposed to [out, in] first
  // (transformers/integrations/bitsandbytes.py replace_with_bnb_linear), and PEFT's lora_A/lora_B
  // take in/out from the transposed weight (peft/tuners/lora/layer.py).
  LinearUse linear(const std::string& module, const std::string& leaf, int64_t in, int64_t out,
                   bool bias, int layer, const std::string& group, bool full_trainable,
                   bool quantizable, const std::vector<int64_t>& conv_kernel = {}, bool transposed = false) {
    LinearUse use;
    use.name = leaf;
    const std::string path = module.empty() ? leaf : module + "." + leaf;
    note(path, conv_kernel.empty() ? ModuleType::Linear : ModuleType::Conv);
    const bool quantized = quantizable && (plan_.load_in_4bit || plan_.load_in_8bit);
    const bool adapter_on = plan_.adapter != Adapter::None;
    std::vector<int64_t> weight_shape{out, in};
    if (transposed && !quantized) weight_shape = {in, out};
    weight_shape.insert(weight_shape.end(), conv_kernel.begin(), conv_kernel.end());
    // target_parameters reaching an nn.Linear's weight (PEFT's v4 -> v5 MoE conversion maps "gate" to
    // "gate.weight", which names AFMoE's router.gate Linear): a lora.ParamWrapper, not a lora.Linear -
    // base_layer.weight, then lora_A [r, in] and lora_B [out, r] (peft/tuners/lora/layer.py ParamWrapper).
    const int parameter_rank = matcher_ != nullptr && conv_kernel.empty() ? matcher_->parameter_rank(path + ".weight") : 0;
    if (parameter_rank > 0 && !is_lora_target(path)) {
      use.weight = add(path + ".base_layer", "weight", weight_shape, false, layer, group, quantized);
      if (bias) use.bias = add(path + ".base_layer", "bias", {out}, false, layer, group);
      use.lora_a = add(path + ".lora_A.default", "weight", {parameter_rank, in}, true, layer, group);
      use.lora_b = add(path + ".lora_B.default", "weight", {out, parameter_rank}, true, layer, group);
      for (int index : {use.lora_a, use.lora_b}) {
        out_.parameters[static_cast<size_t>(index)].adapter = true;
        out_.parameters[static_cast<size_t>(index)].dtype = DType::Float32;
      }
    } else if (is_lora_target(path)) {
      std::vector<int64_t> a_shape{plan_.lora_r, in}, b_shape{out, plan_.lora_r};
      a_shape.insert(a_shape.end(), conv_kernel.begin(), conv_kernel.end());
      for (size_t i = 0; i < conv_kernel.size(); ++i) b_shape.push_back(1);
      use.weight = add(path + ".base_layer", "weight", weight_shape, false, layer, group, quantized);
      if (bias) use.bias = add(path + ".base_layer", "bias", {out}, false, layer, group);
      use.lora_a = add(path + ".lora_A.default", "weight", a_shape, true, layer, group);
      use.lora_b = add(path + ".lora_B.default", "weight", b_shape, true, layer, group);
      // PEFT creates adapter weights in float32 even on a bf16/fp16 base (LoraLayer.update_layer,
      // `autocast_adapter_dtype=True`, the default since PEFT 0.12): their gradients, and so DDP's
      // buckets (a bucket holds one dtype, reducer.cpp compute_bucket_assignment_by_size), are fp32.
      for (int index : {use.lora_a, use.lora_b}) {
        Parameter& adapter = out_.parameters[static_cast<size_t>(index)];
        adapter.adapter = true;
        if (!adapter.quantized) adapter.dtype = DType::Float32;
      }
    } else {
      const bool trainable = full_trainable && !adapter_on;
      use.weight = add(path, "weight", weight_shape, trainable, layer, group, quantized);
      if (bias) use.bias = add(path, "bias", {out}, trainable, layer, group);
    }
    return use;
  }

  // The decoder's module paths are written for *ForCausalLM ("model.layers"); a VLM nests the
  // same decoder under text_prefix ("model.language_model.layers").
  std::string text_path(const std::string& path) const {
    const std::string& text = plan_.model.text_prefix;
    if (text != "model" && path.compare(0, 6, "model.") == 0) return text + path.substr(5);
    return path;
  }

  // The values shapes are evaluated against: the config's, or while a decoder layer is built, that
  // layer's (its per_layer_config overrides and the architecture's layer rules over the config's).
  const std::map<std::string, double>& shape_values() const { return layer_values_ != nullptr ? *layer_values_ : values_; }

  int64_t dim(const std::string& expression) const {
    const std::vector<long long> dims = evaluate_shape(expression, shape_values(), plan_.model.source);
    return dims.at(0);
  }

  std::vector<int64_t> dims(const std::string& expressions) const {
    const std::vector<long long> d = evaluate_shape(expressions, shape_values(), plan_.model.source);
    return std::vector<int64_t>(d.begin(), d.end());
  }

  bool is_moe_layer(const ArchitectureSpec& spec, int i) const {
    const auto& values = values_;
    auto value = [&](const std::string& key, double fallback) {
      auto it = values.find(key);
      return it == values.end() ? fallback : it->second;
    };
    switch (spec.moe) {
      case MoeLayers::None: return false;
      // GraniteMoeHybrid builds no sparse block when num_local_experts is 0 (a dense model).
      case MoeLayers::All: return value(spec.experts_key, 1) > 0;
      case MoeLayers::FirstKDense: return i >= value("first_k_dense_replace", 0);
      case MoeLayers::Interval: {
        const int interval = static_cast<int>(value("moe_layer_interval", 1));
        const double end = value("moe_layer_end_index", -1);
        return interval > 0 && (i + 1) % interval == 0 && i >= value("moe_layer_start_index", 0) && (end < 0 || i <= end);
      }
      case MoeLayers::LayerTypes: {
        const auto& types = plan_.model.mlp_layer_types;
        if (i < static_cast<int>(types.size())) return types[static_cast<size_t>(i)] == "sparse";
        return i >= value("first_k_dense_replace", 0);
      }
      case MoeLayers::LayerList: {
        if (const auto& listed = plan_.model.moe_layers) return std::find(listed->begin(), listed->end(), i) != listed->end();
        const int step = static_cast<int>(value("interleave_moe_layer_step", 1));
        return step > 0 && i % step == step - 1;
      }
      case MoeLayers::LayerTypeMoe: return values.count("layer_types." + std::to_string(i) + "=moe") > 0;
      case MoeLayers::SparseStep: {
        // Qwen2MoeDecoderLayer: (layer_idx not in mlp_only_layers) and num_experts > 0 and
        // (layer_idx + 1) % decoder_sparse_step == 0.
        const auto& only = plan_.model.mlp_only_layers;
        if (std::find(only.begin(), only.end(), i) != only.end()) return false;
        const int step = static_cast<int>(value("decoder_sparse_step", 1));
        return value(spec.experts_key, 0) > 0 && step > 0 && (i + 1) % step == 0;
      }
    }
    return false;
  }

  // Puts a module's parameters in the slot its role gives it, in the sub-block it belongs to
  // (ModuleSpec::sublayer; build() made the layer's sublayers and shortcut).
  static void place_in(DecoderLayerUse& layer, const ModuleSpec& module, const LinearUse& use) {
    if (module.sublayer < 0) return place(layer.shortcut.at(0), module.role, use);
    if (module.sublayer > 0) return place(layer.sublayers.at(static_cast<size_t>(module.sublayer - 1)), module.role, use);
    place(layer, module.role, use);
  }

  // Puts a module's parameters in the slot its role gives it (see DecoderLayerUse).
  static void place(DecoderLayerUse& layer, ModuleRole role, const LinearUse& use) {
    auto fill = [&](LinearUse& slot) {
      if (slot.weight < 0 && slot.lora_a < 0) {
        slot = use;
      } else if (slot.bias < 0) {
        slot.bias = use.weight;  // a bare bias tensor of the same module (gpt-oss router, experts)
      }
    };
    switch (role) {
      case ModuleRole::Q: case ModuleRole::QKV: fill(layer.q); break;
      case ModuleRole::K: fill(layer.k); break;
      case ModuleRole::V: fill(layer.v); break;
      case ModuleRole::O: fill(layer.o); break;
      case ModuleRole::QNorm: layer.q_norm = use.weight; break;
      case ModuleRole::KNorm: layer.k_norm = use.weight; break;
      case ModuleRole::Gate: case ModuleRole::Router: fill(layer.gate); break;
      case ModuleRole::Up: case ModuleRole::GateUp: case ModuleRole::ExpertsGateUp: fill(layer.up); break;
      case ModuleRole::Down: case ModuleRole::ExpertsDown: fill(layer.down); break;
      case ModuleRole::InputNorm:
        layer.input_norm = use.weight;
        layer.input_norm_bias = use.bias;
        break;
      case ModuleRole::PostAttentionNorm:
        layer.post_attention_norm = use.weight;
        layer.post_attention_norm_bias = use.bias;
        break;
      case ModuleRole::AttentionOther: layer.attention_other.push_back(use); break;
      case ModuleRole::MixerIn: layer.mixer_in.push_back(use); break;
      case ModuleRole::MixerOther: layer.mixer_other.push_back(use); break;
      case ModuleRole::MixerOut: fill(layer.mixer_out); break;
      case ModuleRole::NoGrad: layer.no_grad.push_back(use); break;
      case ModuleRole::MlpOther: case ModuleRole::PreFeedforwardNorm: case ModuleRole::PostFeedforwardNorm:
      case ModuleRole::EmbedOther: case ModuleRole::FinalNorm:  // top-level roles; in a layer, "other"
        layer.mlp_other.push_back(use);
        break;
    }
  }

  // Bare nn.Parameters registered on `module` (in order). bitsandbytes replaces only nn.Linear, so
  // they are never quantized. Those PEFT's target_parameters reach are wrapped one ParamWrapper
  // each, the first registered innermost (BaseTuner._inject_parameters walks
  // named_parameters(recurse=False)): the tensors move under ".base_layer" once per wrapper, then each
  // wrapper's lora_A [r * E, in] and lora_B [out, r * E] follow, innermost first. A 3-D tensor
  // [E, out, in] has E experts (transposed [E, in, out] for gpt-oss); a 2-D one [out, in] one
  // (peft/tuners/lora/layer.py ParamWrapper.__init__ / update_layer).
  void tensors(DecoderLayerUse& layer, const ArchitectureSpec& spec, const std::string& module,
               const std::vector<const ModuleSpec*>& specs, int index) {
    const bool full_ft = plan_.adapter == Adapter::None;
    std::vector<int> ranks;
    int wrappers = 0;
    // Tensors of the module's children follow its own (ERNIE-4.5-MoE's gate.moe_statics): a
    // ParamWrapper around the module moves them under its base_layer too.
    const std::string first_parent = specs.front()->path.substr(0, specs.front()->path.rfind('.'));
    auto child_of = [&](const ModuleSpec* t) {
      return t->path.substr(0, t->path.rfind('.')).substr(first_parent.size());  // "" or ".moe_statics"
    };
    for (const ModuleSpec* t : specs) {
      const std::string leaf = t->path.substr(t->path.rfind('.') + 1);
      const std::string name = module + child_of(t) + "." + leaf;
      const int rank = matcher_ != nullptr ? matcher_->parameter_rank(name) : 0;
      if (rank > 0 && !child_of(t).empty()) {
        throw InputError(matcher_->where(), "lora_target_parameters reaches " + name +
                                                ", a parameter of a child of a wrapped module; hookstream does not model nested ParamWrappers");
      }
      ranks.push_back(rank);
      if (ranks.back() > 0) ++wrappers;
    }
    std::string base = module;
    for (int w = 0; w < wrappers; ++w) base += ".base_layer";
    std::vector<LinearUse> uses;
    for (const ModuleSpec* t : specs) {
      LinearUse use;
      use.name = t->path.substr(t->path.rfind('.') + 1);
      use.weight = add(base + child_of(t), use.name, dims(t->shape), full_ft && !t->frozen, index, "decoder");
      uses.push_back(use);
    }
    int wrapper = 0;
    for (size_t j = 0; j < specs.size(); ++j) {
      if (ranks[j] == 0) continue;
      ++wrapper;
      std::string at = module;
      for (int w = wrapper; w < wrappers; ++w) at += ".base_layer";
      const std::vector<int64_t> shape = out_.parameters[static_cast<size_t>(uses[j].weight)].shape;
      int64_t experts = 1, in = 0, out = 0;
      if (shape.size() == 3) {
        experts = shape[0];
        in = spec.experts_transposed ? shape[1] : shape[2];
        out = spec.experts_transposed ? shape[2] : shape[1];
      } else if (shape.size() == 2) {
        in = shape[1];
        out = shape[0];
      } else {
        throw InputError(matcher_->where(), "lora_target_parameters reaches " + module + "." + uses[j].name +
                                                ", a 1-D tensor; PEFT's ParamWrapper needs a 2-D or 3-D parameter");
      }
      const int64_t rank = int64_t(ranks[j]) * experts;
      uses[j].lora_a = add(at + ".lora_A.default", "weight", {rank, in}, true, index, "decoder");
      uses[j].lora_b = add(at + ".lora_B.default", "weight", {out, rank}, true, index, "decoder");
      for (int p : {uses[j].lora_a, uses[j].lora_b}) {
        out_.parameters[static_cast<size_t>(p)].adapter = true;
        out_.parameters[static_cast<size_t>(p)].dtype = DType::Float32;  // as lora.Linear (autocast_adapter_dtype)
      }
    }
    for (size_t j = 0; j < specs.size(); ++j) place_in(layer, *specs[j], uses[j]);
  }

  // A Linear, Conv1D, Norm or Embedding module of the table at `full` (a Tensor is built by tensors()).
  LinearUse module_of(const ModuleSpec& module, const std::string& full, int layer, const std::string& group) {
    const bool full_ft = plan_.adapter == Adapter::None;
    const size_t dot = full.rfind('.');
    const std::string parent = dot == std::string::npos ? "" : full.substr(0, dot);
    const std::string leaf = full.substr(dot + 1);
    const bool bias = evaluate_flag(module.bias, shape_values());
    LinearUse use;
    use.name = leaf;
    switch (module.kind) {
      case ModuleKind::Linear: case ModuleKind::Conv1D:
        return linear(parent, leaf, dim(module.in), dim(module.shape), bias, layer, group, true, true, {},
                      module.kind == ModuleKind::Conv1D);
      case ModuleKind::Conv: {
        // A recurrent mixer's depthwise nn.Conv1d (weight [C, 1, k]). bitsandbytes replaces only
        // nn.Linear, so it is never quantized; PEFT could wrap it as a lora.Conv1d (a target list
        // naming "conv1d"), which hookstream does not model: refused rather than built without it.
        if (is_lora_target(full)) {
          throw InputError(matcher_->where(), "reaches " + full + ", a depthwise nn.Conv1d (groups = channels) of a recurrent "
                                              "token mixer; LoRA on it (PEFT's lora.Conv1d) is not modelled by hookstream yet");
        }
        note(full, ModuleType::Conv);
        const std::vector<int64_t> out = dims(module.shape);
        std::vector<int64_t> weight{out.at(0), dim(module.in)};
        weight.insert(weight.end(), out.begin() + 1, out.end());
        use.weight = add(full, "weight", weight, full_ft, layer, group);
        if (bias) use.bias = add(full, "bias", {out.at(0)}, full_ft, layer, group);
        return use;
      }
      case ModuleKind::Embedding:
        note(full, ModuleType::Embedding);
        use.weight = add(full, "weight", dims(module.shape), full_ft, layer, group);
        return use;
      case ModuleKind::Norm: case ModuleKind::Tensor:
        use.weight = add(full, "weight", dims(module.shape), full_ft, layer, group);
        if (bias) use.bias = add(full, "bias", dims(module.shape), full_ft, layer, group);
        return use;
    }
    return use;
  }

  void build() {
    const ModelConfig& m = plan_.model;
    const ArchitectureSpec* spec = architecture_of(m);
    if (spec == nullptr) throw InputError(m.source, "model_type \"" + m.decoder_type + "\": not modelled");
    const bool full_ft = plan_.adapter == Adapter::None;
    const ExpertLayoutChoice layout = choose_expert_layout(*spec, m, plan_.transformers_version, plan_.trust_remote_code);
    if (!layout.refused.empty()) {
      throw InputError(m.source, "key \"hookstream.transformers_version\" (or --transformers-version): " + layout.refused);
    }
    out_.expert_layout = to_string(layout.layout);
    out_.expert_layout_decided_by = layout.decided_by;
    if (m.vision) {
      if (find_vision_tower(m.vision->model_type) != nullptr) build_described_vision(*m.vision);
      else build_vision(*m.vision);
    }

    const std::string embed = text_path(spec->embed);
    note(embed, ModuleType::Embedding);
    const int64_t embed_width = dim(spec->embed_width);
    out_.embed = add(embed, "weight", {m.vocab_size + spec->embed_extra_rows, embed_width}, full_ft, -1, "embed");
    out_.head_module = head_module_of(m, spec);
    for (const ModuleSpec& extra : spec->embed_extras) {
      if (!extra.when.empty() && !evaluate_flag(extra.when, values_)) continue;
      const LinearUse use = module_of(extra, text_path(extra.path), -1, extra.role == ModuleRole::FinalNorm ? "final_norm" : "embed");
      if (extra.role == ModuleRole::FinalNorm) {
        out_.final_norm = use.weight;
        out_.final_norm_bias = use.bias;
      } else {
        out_.embed_other.push_back(use);
      }
    }
    for (int i = 0; i < m.num_hidden_layers; ++i) {
      DecoderLayerUse layer;
      layer.index = i;
      const std::string path = text_path(spec->layers) + "." + std::to_string(i);
      layer.path = prefix_ + path;
      layer.moe = is_moe_layer(*spec, i);
      // Shared experts of width 0 are absent (GraniteMoeShared: shared_intermediate_size 0 -> no shared_mlp).
      bool shared = !spec->shared_expert_width.empty();
      for (const std::string& factor : split_any(spec->shared_expert_width, "*+")) {
        auto it = values_.find(factor);
        if (it != values_.end() && it->second == 0) shared = false;
      }
      // "moe" / "dense" are terms of a module's condition, true by this layer's MoE rule.
      std::map<std::string, double> layer_values = values_;
      layer_values["moe"] = layer.moe ? 1 : 0;
      layer_values["dense"] = layer.moe ? 0 : 1;
      // "last_layer": GPT-NeoX-Japanese gives only its last layer's attention a dense_bias
      // (GPTNeoXJapaneseLayer: use_bias=layer_number == num_hidden_layers - 1).
      layer_values["last_layer"] = i == m.num_hidden_layers - 1 ? 1 : 0;
      // "layer_type=<type>": this layer's entry of the config's layer_types.
      const std::string type_key = "layer_types." + std::to_string(i) + "=";
      for (auto it = values_.lower_bound(type_key); it != values_.end() && it->first.rfind(type_key, 0) == 0; ++it) {
        layer_values["layer_type=" + it->first.substr(type_key.size())] = 1;
      }
      // per_layer_config's overrides of this layer's keys, then the keys the modelling code
      // derives per layer (ArchitectureSpec::layer_rules).
      const std::string override_key = per_layer_key(i, "");
      for (auto it = values_.lower_bound(override_key); it != values_.end() && it->first.rfind(override_key, 0) == 0; ++it) {
        layer_values[it->first.substr(override_key.size())] = it->second;
      }
      if (spec->layer_rules != nullptr) spec->layer_rules(i, m.num_hidden_layers, layer_values);
      layer_values_ = &layer_values;
      // A layer of an all-MoE architecture without experts (GraniteMoeHybrid, num_local_experts 0)
      // keeps only its shared MLP.
      layer.mlp_width = layer.moe ? dim(spec->top_k_key) * dim(spec->expert_width) + (shared ? dim(spec->shared_expert_width) : 0)
                        : spec->moe == MoeLayers::All && shared ? dim(spec->shared_expert_width)
                                                                 : dim(spec->mlp_width.empty() ? "intermediate_size" : spec->mlp_width);
      // The layer's token mixer: the first of the architecture's mixer rules that holds, else attention.
      for (const MixerRule& rule : spec->mixers) {
        if (!evaluate_flag(rule.when, layer_values)) continue;
        layer.mixer = rule.mixer;
        layer.mixer_module = rule.module;
        auto size = [&](const std::string& expression) { return expression.empty() ? int64_t{0} : dim(expression); };
        layer.mixer_shape = RecurrentMixerShape{size(rule.heads), size(rule.key_dim), size(rule.value_dim),
                                                size(rule.chunk), size(rule.conv_channels), size(rule.conv_kernel)};
        break;
      }
      layer.mlp_module = spec->mlp_module;
      layer.mlp_gated = spec->mlp_gated;
      layer.has_mlp = !spec->one_block_per_layer || layer.mixer == TokenMixer::None;
      layer.parallel_attention = spec->parallel_mixer && layer.mixer != TokenMixer::Attention;
      // LongCat-Flash: the first sub-block is the layer's own slots; the others and the shortcut MoE
      // block are DecoderLayerUses of the same layer (path, index) with their own attributes.
      for (size_t s = 0; s < spec->sublayers.size(); ++s) {
        DecoderLayerUse& sub = s == 0 ? layer : layer.sublayers.emplace_back();
        if (s > 0) {
          sub.index = i;
          sub.path = layer.path;
          sub.mlp_width = dim(spec->mlp_width.empty() ? "intermediate_size" : spec->mlp_width);
        }
        sub.mixer_module = spec->sublayers[s].attention;
        sub.mlp_module = spec->sublayers[s].mlp;
      }
      if (!spec->shortcut_moe.empty()) {
        // The MoE block is the shortcut's; the layer's own MLP (mlps.0) is dense.
        layer.moe = false;
        layer.mlp_width = dim(spec->mlp_width.empty() ? "intermediate_size" : spec->mlp_width);
        DecoderLayerUse& moe = layer.shortcut.emplace_back();
        moe.index = i;
        moe.path = layer.path;
        moe.mlp_module = spec->shortcut_moe;
        moe.moe = true;
        moe.mlp_width = dim(spec->top_k_key) * dim(spec->expert_width);
      }
      std::vector<const ModuleSpec*> present;
      for (const ModuleSpec& module : spec->layer) {
        if (!module.when.empty() && !evaluate_flag(module.when, layer_values)) continue;
        present.push_back(&module);
      }
      bool experts_built = false;
      // A per-expert block registered right after a given module (PerExpertSpec::after): built
      // before the first module past that one's parameters.
      const auto within_after = [&](const ModuleSpec& m) {
        const std::string& after = layout.spec->after;
        return m.path == after || m.path.rfind(after + ".", 0) == 0;
      };
      const bool placed_after = layout.layout == ExpertLayout::PerExpert && !layout.spec->after.empty();
      for (size_t k = 0; k < present.size(); ++k) {
        const ModuleSpec& module = *present[k];
        if (placed_after && !experts_built && k > 0 && within_after(*present[k - 1]) && !within_after(module)) {
          per_expert_block(layer, *spec, *layout.spec, path, i);
          experts_built = true;
        }
        if (layout.layout == ExpertLayout::PerExpert && is_fused_expert_role(module.role)) {
          // The router and fused expert tensors become the per-expert block, built once where the
          // first of them was registered.
          if (!experts_built) per_expert_block(layer, *spec, *layout.spec, path, i);
          experts_built = true;
          continue;
        }
        const std::string full = path + "." + module.path;
        const std::string parent = full.substr(0, full.rfind('.'));
        if (module.kind == ModuleKind::Tensor) {
          // Bare nn.Parameters of one module (the experts' tensors, a router's weight and bias) are
          // listed together: a ParamWrapper around any of them renames all of them.
          size_t end = k + 1;
          const std::string owner = module.path.substr(0, module.path.rfind('.'));
          while (end < present.size() && present[end]->kind == ModuleKind::Tensor) {
            const std::string next = present[end]->path.substr(0, present[end]->path.rfind('.'));
            if (next != owner && next.rfind(owner + ".", 0) != 0) break;  // the module's own, or its children's
            ++end;
          }
          tensors(layer, *spec, parent, std::vector<const ModuleSpec*>(present.begin() + k, present.begin() + end), i);
          k = end - 1;
          continue;
        }
        if (!module.repeat.empty()) {
          const size_t at = full.find("{i}");
          for (int64_t r = 0; r < dim(module.repeat); ++r) {
            const std::string copy = full.substr(0, at) + std::to_string(r) + full.substr(at + 3);
            place_in(layer, module, module_of(module, copy, i, "decoder"));
          }
          continue;
        }
        place_in(layer, module, module_of(module, full, i, "decoder"));
      }
      layer_values_ = nullptr;
      out_.layers.push_back(std::move(layer));
    }
    if (!spec->final_norm.empty()) {
      const std::string norm = text_path(spec->final_norm);
      out_.final_norm = add(norm, "weight", {m.hidden_size}, full_ft, -1, "final_norm");
      if (evaluate_flag(spec->final_norm_bias, values_)) {
        out_.final_norm_bias = add(norm, "bias", {m.hidden_size}, full_ft, -1, "final_norm");
      }
    }
    for (const ModuleSpec& extra : spec->after_norm) {
      if (!extra.when.empty() && !evaluate_flag(extra.when, values_)) continue;
      const std::string full = text_path(extra.path);
      if (extra.repeat.empty()) {
        out_.embed_other.push_back(module_of(extra, full, -1, "embed"));
        continue;
      }
      const size_t at = full.find("{i}");
      for (int64_t r = 0; r < dim(extra.repeat); ++r) {
        out_.embed_other.push_back(module_of(extra, full.substr(0, at) + std::to_string(r) + full.substr(at + 3), -1, "embed"));
      }
    }
    for (const ModuleSpec& extra : spec->after_layers) {
      if (!extra.when.empty() && !evaluate_flag(extra.when, values_)) continue;
      const std::string full = text_path(extra.path);
      if (extra.kind != ModuleKind::Tensor) {
        out_.after_layers.push_back(module_of(extra, full, -1, "final_norm"));
        continue;
      }
      // A bare nn.Parameter (DeepSeek-V4's hc_head.hc_fn, hc_base, hc_scale): named as registered,
      // without a ".weight".
      const size_t dot = full.rfind('.');
      LinearUse use;
      use.name = full.substr(dot + 1);
      use.weight = add(full.substr(0, dot), use.name, dims(extra.shape), full_ft, -1, "final_norm");
      out_.after_layers.push_back(use);
    }
    if (m.vision && find_vision_tower(m.vision->model_type) != nullptr) {
      const VisionLanguageSpec* described = find_vision_language(m.model_type);
      if (described != nullptr && described->projector_after_text) add_described_projector(*described);
    }
    const bool head_bias = evaluate_flag(spec->head_bias, values_);
    if (m.tie_word_embeddings) {
      // The same tensor: named_parameters() and DDP list it once, under the embedding's name. A
      // head bias (Phi) is the head's own parameter.
      note(out_.head_module, ModuleType::Linear);
      out_.lm_head = out_.embed;
      if (head_bias) out_.lm_head_bias = add(out_.head_module, "bias", {m.vocab_size}, full_ft, -1, "head");
    } else {
      // bitsandbytes keeps the output embedding in 16 bit (llm_int8_skip_modules), so never quantized.
      const LinearUse head = linear("", out_.head_module, embed_width, m.vocab_size, head_bias, -1, "head", true, false);
      out_.lm_head = head.weight;
      out_.lm_head_bias = head.bias;
    }
    const auto experts = values_.find(spec->experts_key);
    if (spec->moe != MoeLayers::None && !(experts != values_.end() && experts->second == 0)) {
      out_.num_experts = static_cast<int>(dim(spec->experts_key));
      out_.experts_per_token = static_cast<int>(dim(spec->top_k_key));
    }
  }

  static bool is_fused_expert_role(ModuleRole role) {
    return role == ModuleRole::Router || role == ModuleRole::ExpertsGateUp || role == ModuleRole::ExpertsDown;
  }

  // A sparse MoE block with one module per expert (per_expert_layout.h): the router `gate` and the
  // nn.ModuleList `experts`, in the spec's registration order. Each expert's Linears are ordinary
  // nn.Linear modules: quantized by bitsandbytes and matched by LoRA target_modules like any other.
  void per_expert_block(DecoderLayerUse& layer, const ArchitectureSpec& arch, const PerExpertSpec& spec,
                        const std::string& layer_path, int index) {
    const bool full_ft = plan_.adapter == Adapter::None;
    const std::string block = layer_path + "." + spec.block;
    layer.mlp_module = spec.block;
    const int64_t experts = dim(arch.experts_key);
    auto router = [&]() {
      if (spec.router_linear) {
        place(layer, ModuleRole::Router,
              linear(block, spec.router, dim("hidden_size"), experts, false, index, "decoder", true, true));
        return;
      }
      note(block + "." + spec.router, ModuleType::Other);
      LinearUse use;
      use.name = spec.router;
      use.weight = add(block + "." + spec.router, "weight", {experts, dim("hidden_size")}, full_ft, index, "decoder");
      place(layer, ModuleRole::Router, use);
      if (spec.router_correction_bias) {
        // Only shifts the top-k choice (no gradient path): listed, never in the forward graph.
        add(block + "." + spec.router, "e_score_correction_bias", {experts}, full_ft, index, "decoder");
      }
    };
    if (spec.router_first) router();
    for (int64_t e = 0; e < experts; ++e) {
      ExpertUse expert;
      expert.index = static_cast<int>(e);
      const std::string module = block + ".experts." + std::to_string(e);
      expert.path = prefix_ + module;
      for (const ExpertLinearSpec& l : spec.expert) {
        const LinearUse use = linear(module, l.leaf, dim(l.in), dim(l.out), false, index, "decoder", true, true);
        (l.role == ModuleRole::Gate ? expert.gate : l.role == ModuleRole::Up ? expert.up : expert.down) = use;
      }
      layer.experts.push_back(std::move(expert));
    }
    if (!spec.router_first) router();
  }

  // The Qwen-VL towers (VisionLayout): Qwen3VLVisionModel, Qwen2VisionTransformerPretrainedModel
  // (modeling_qwen2_vl.py) and Qwen2_5_VisionTransformerPretrainedModel (modeling_qwen2_5_vl.py).
  // Each registers patch_embed.proj (a Conv3d), [pos_embed], blocks (norm1, norm2, attn.qkv,
  // attn.proj, mlp), merger, [deepstack_merger_list].
  void build_vision(const VisionTowerConfig& v) {
    const bool trainable = plan_.vision_tower_trainable();
    const bool qwen3 = v.layout == VisionLayout::Qwen3VL;
    const bool rms = v.layout == VisionLayout::Qwen25VL;  // Qwen2_5_VLRMSNorm: weight only
    const std::string root = "model.visual";
    // Qwen3-VL's patch embedding is a Conv3d(in_channels, hidden, kernel [T, P, P]) with a bias,
    // Qwen2-VL's and Qwen2.5-VL's without (bias=False); a target list ending in "proj" reaches it
    // too (PEFT then wraps it as a LoRA Conv3d).
    const std::vector<int64_t> kernel{v.temporal_patch_size, v.patch_size, v.patch_size};
    const std::string patch = root + ".patch_embed.proj";
    if (is_lora_target(patch)) {
      out_.vision_patch_embed = linear(root + ".patch_embed", "proj", v.in_channels, v.hidden_size, qwen3, -1, "vision",
                                       trainable, false, kernel);
    } else {
      note(patch, ModuleType::Conv);
      out_.vision_patch_embed.weight = add(patch, "weight", {v.hidden_size, v.in_channels, kernel[0], kernel[1], kernel[2]},
                                           trainable, -1, "vision");
      if (qwen3) out_.vision_patch_embed.bias = add(patch, "bias", {v.hidden_size}, trainable, -1, "vision");
    }
    out_.vision_patch_embed.name = "patch_embed";
    if (v.num_position_embeddings > 0) {
      note(root + ".pos_embed", ModuleType::Embedding);
      // Qwen3VLVisionModel registers pos_embed (nn.Embedding) right after patch_embed.
      out_.vision_pos_embed =
          add(root + ".pos_embed", "weight", {v.num_position_embeddings, v.hidden_size}, trainable, -1, "vision");
    }
    auto norm = [&](const std::string& module, int64_t width, int& weight, int& bias) {
      weight = add(module, "weight", {width}, trainable, -1, "vision");
      if (!rms) bias = add(module, "bias", {width}, trainable, -1, "vision");
    };
    for (int i = 0; i < v.depth; ++i) {
      VisionBlockUse block;
      block.index = i;
      const std::string path = root + ".blocks." + std::to_string(i);
      block.path = prefix_ + path;
      norm(path + ".norm1", v.hidden_size, block.norm1_weight, block.norm1_bias);
      norm(path + ".norm2", v.hidden_size, block.norm2_weight, block.norm2_bias);
      block.qkv = vision_linear(path + ".attn", "qkv", v.hidden_size, 3 * int64_t(v.hidden_size), trainable);
      block.proj = vision_linear(path + ".attn", "proj", v.hidden_size, v.hidden_size, trainable);
      switch (v.layout) {
        case VisionLayout::Qwen3VL:  // Qwen3VLVisionMLP
          block.fc1 = vision_linear(path + ".mlp", "linear_fc1", v.hidden_size, v.intermediate_size, trainable);
          block.fc2 = vision_linear(path + ".mlp", "linear_fc2", v.intermediate_size, v.hidden_size, trainable);
          break;
        case VisionLayout::Qwen2VL:  // VisionMlp
          block.fc1 = vision_linear(path + ".mlp", "fc1", v.hidden_size, v.intermediate_size, trainable);
          block.fc2 = vision_linear(path + ".mlp", "fc2", v.intermediate_size, v.hidden_size, trainable);
          break;
        case VisionLayout::Qwen25VL:  // Qwen2_5_VLMLP(bias=True)
          block.gate = vision_linear(path + ".mlp", "gate_proj", v.hidden_size, v.intermediate_size, trainable);
          block.fc1 = vision_linear(path + ".mlp", "up_proj", v.hidden_size, v.intermediate_size, trainable);
          block.fc2 = vision_linear(path + ".mlp", "down_proj", v.intermediate_size, v.hidden_size, trainable);
          break;
        case VisionLayout::Clip: case VisionLayout::Siglip: case VisionLayout::Pixtral: case VisionLayout::InternVL:
          throw InputError(plan_.model.source, "vision tower " + v.model_type + ": built from its description, not here");
      }
      out_.vision_blocks.push_back(std::move(block));
    }
    const int64_t merged = int64_t(v.hidden_size) * v.spatial_merge_size * v.spatial_merge_size;
    const std::string merger = root + ".merger";
    const int64_t out_hidden = v.out_hidden_size > 0 ? v.out_hidden_size : plan_.model.hidden_size;
    if (qwen3) {  // Qwen3VLVisionPatchMerger: norm, linear_fc1, linear_fc2
      norm(merger + ".norm", v.hidden_size, out_.vision_merger_norm_weight, out_.vision_merger_norm_bias);
      out_.vision_merger_fc1 = vision_linear(merger, "linear_fc1", merged, merged, trainable);
      out_.vision_merger_fc2 = vision_linear(merger, "linear_fc2", merged, out_hidden, trainable);
    } else {  // PatchMerger / Qwen2_5_VLPatchMerger: ln_q, mlp = Sequential(Linear, GELU, Linear)
      norm(merger + ".ln_q", v.hidden_size, out_.vision_merger_norm_weight, out_.vision_merger_norm_bias);
      out_.vision_merger_fc1 = vision_linear(merger + ".mlp", "0", merged, merged, trainable);
      out_.vision_merger_fc2 = vision_linear(merger + ".mlp", "2", merged, out_hidden, trainable);
    }
    // deepstack_merger_list is registered last; its mergers use the post-shuffle norm, over
    // hidden_size * spatial_merge_size^2 (Qwen3VLVisionPatchMerger(use_postshuffle_norm=True)).
    for (size_t k = 0; k < v.deepstack_visual_indexes.size(); ++k) {
      VisionMergerUse ds;
      ds.path = root + ".deepstack_merger_list." + std::to_string(k);
      ds.block = v.deepstack_visual_indexes[k];
      ds.norm_weight = add(ds.path + ".norm", "weight", {merged}, trainable, -1, "vision");
      ds.norm_bias = add(ds.path + ".norm", "bias", {merged}, trainable, -1, "vision");
      ds.fc1 = vision_linear(ds.path, "linear_fc1", merged, merged, trainable);
      ds.fc2 = vision_linear(ds.path, "linear_fc2", merged, out_hidden, trainable);
      ds.path = prefix_ + ds.path;
      out_.vision_deepstack_mergers.push_back(std::move(ds));
    }
  }

  // A tower of the vision-tower table and its model's projector (sim/inputs/architectures/vision_tower.h):
  // the model's own parameters (image_newline), then vision_tower (embeddings, layers, post), then
  // multi_modal_projector, as the composite model registers them (LlavaModel.__init__: vision_tower,
  // multi_modal_projector, language_model). The projector's shapes read the text config's keys and the
  // vision config's as "vision_<key>"; the tower's read the vision config's own keys.
  void build_described_vision(const VisionTowerConfig& v) {
    const VisionLanguageSpec* model = find_vision_language(plan_.model.model_type);
    const VisionTowerSpec* tower = find_vision_tower(v.model_type);
    if (model == nullptr || tower == nullptr) {
      throw InputError(plan_.model.source, "key \"vision_config\": the tower \"" + v.model_type + "\" of model_type \"" +
                                               plan_.model.model_type + "\" is not modelled");
    }
    const bool trainable = plan_.vision_tower_trainable();
    for (const ModuleSpec& m : model->model_params) {
      if (m.when.empty() || evaluate_flag(m.when, values_)) described_newline_.push_back(vision_module(m, m.path, values_, trainable, true));
    }
    const std::string root = model->tower;
    for (const ModuleSpec& m : tower->embeddings) {
      if (!m.when.empty() && !evaluate_flag(m.when, v.values)) continue;
      const LinearUse use = vision_module(m, root + "." + m.path, v.values, trainable, quantizable(*tower, m.path));
      // The patch embedding: a Conv2d, or an nn.Linear over unfolded patches (Llama 4's
      // Llama4UnfoldConvolution), the embeddings' only projection.
      if (m.kind == ModuleKind::Conv || m.kind == ModuleKind::Linear) {
        out_.vision_patch_embed = use;
        out_.vision_patch_embed.name = "patch_embed";
      } else if (m.role == ModuleRole::FinalNorm) {
        // Registered with the embeddings, run after the layers (Llama4VisionModel: layernorm_post).
        out_.vision_final_norm.push_back(use);
      } else {
        out_.vision_embed_other.push_back(use);
      }
    }
    for (int i = 0; i < v.depth; ++i) {
      VisionBlockUse block;
      block.index = i;
      const std::string path = root + "." + tower->blocks + "." + std::to_string(i);
      block.path = prefix_ + path;
      for (const ModuleSpec& m : tower->block) {
        if (!m.when.empty() && !evaluate_flag(m.when, v.values)) continue;
        place_vision(block, m, vision_module(m, path + "." + m.path, v.values, trainable, true), *tower);
      }
      out_.vision_blocks.push_back(std::move(block));
    }
    // The second stack (MllamaVisionModel.global_transformer), run after the first: its blocks
    // continue the first's indices (the forward graph runs vision_blocks in order).
    const int global_depth = tower->global_blocks.empty() ? 0 : static_cast<int>(v.values.at(tower->global_depth_key));
    for (int i = 0; i < global_depth; ++i) {
      VisionBlockUse block;
      block.index = v.depth + i;
      const std::string path = root + "." + tower->global_blocks + "." + std::to_string(i);
      block.path = prefix_ + path;
      for (const ModuleSpec& m : tower->global_block) {
        if (!m.when.empty() && !evaluate_flag(m.when, v.values)) continue;
        place_vision(block, m, vision_module(m, path + "." + m.path, v.values, trainable, true), *tower);
      }
      out_.vision_blocks.push_back(std::move(block));
    }
    // After the layers: the final norm, the pooling head, and (GLM-4V) modules that run at the
    // embeddings (EmbedOther) or as the tower's own projector (MlpOther), by role.
    for (const ModuleSpec& m : tower->post) {
      if (!m.when.empty() && !evaluate_flag(m.when, v.values)) continue;
      const LinearUse use = vision_module(m, root + "." + m.path, v.values, trainable, quantizable(*tower, m.path));
      switch (m.role) {
        case ModuleRole::FinalNorm: out_.vision_final_norm.push_back(use); break;
        case ModuleRole::EmbedOther: out_.vision_embed_other.push_back(use); break;
        case ModuleRole::MlpOther: out_.vision_projector.push_back(use); break;
        default: out_.vision_head.push_back(use); break;
      }
    }
    if (!model->projector_after_text) add_described_projector(*model);
    out_.vision_block_class = tower->block_class;
  }

  // The projector's modules, then the forward-order sort of the tower's and projector's lists and
  // image_newline (run after the projector).
  void add_described_projector(const VisionLanguageSpec& spec) {
    const VisionLanguageSpec* model = &spec;
    const bool trainable = plan_.vision_tower_trainable();
    for (const ModuleSpec& m : model->projector) {
      if (!m.when.empty() && !evaluate_flag(m.when, values_)) continue;
      // nn.MultiheadAttention's out_proj (a projector module beside its in_proj_weight: Aria's
      // cross_attn.multihead_attn) is a NonDynamicallyQuantizableLinear, which bitsandbytes leaves
      // unquantized (replace_with_bnb_linear converts `type(module) is nn.Linear`), as SigLIP's head's.
      const std::string parent = m.path.substr(0, m.path.rfind('.'));
      const bool mha_out = m.path.size() > 9 && m.path.compare(m.path.size() - 9, 9, ".out_proj") == 0 &&
                           std::any_of(model->projector.begin(), model->projector.end(),
                                       [&](const ModuleSpec& o) { return o.path == parent + ".in_proj_weight"; });
      out_.vision_projector.push_back(vision_module(m, m.path, values_, trainable, !mha_out));
    }
    // The projector's own stack of layers (Idefics2PerceiverResampler.layers), then what follows it;
    // forward runs them in this order too.
    const int depth = model->projector_blocks.empty() ? 0 : static_cast<int>(dim(model->projector_depth_key));
    for (int i = 0; i < depth; ++i) {
      for (const ModuleSpec& m : model->projector_block) {
        if (!m.when.empty() && !evaluate_flag(m.when, values_)) continue;
        const std::string full = model->projector_blocks + "." + std::to_string(i) + "." + m.path;
        out_.vision_projector.push_back(vision_module(m, full, values_, trainable, true));
      }
    }
    for (const ModuleSpec& m : model->projector_post) {
      if (m.when.empty() || evaluate_flag(m.when, values_)) out_.vision_projector.push_back(vision_module(m, m.path, values_, trainable, true));
    }
    // Registration order is not always the order forward runs (Gemma3MultiModalProjector: the norm
    // before the matmul): the listed leaves move into forward_order's order, the rest keep theirs.
    auto forward_rank = [&](const LinearUse& use) {
      const auto& order = model->forward_order;
      const auto at = std::find(order.begin(), order.end(), use.name);
      return at == order.end() ? -1 : static_cast<int>(at - order.begin());
    };
    for (std::vector<LinearUse>* list : {&out_.vision_embed_other, &out_.vision_projector}) {
      std::vector<size_t> slots;
      std::vector<LinearUse> listed;
      for (size_t i = 0; i < list->size(); ++i) {
        if (forward_rank((*list)[i]) >= 0) {
          slots.push_back(i);
          listed.push_back((*list)[i]);
        }
      }
      std::stable_sort(listed.begin(), listed.end(),
                       [&](const LinearUse& a, const LinearUse& b) { return forward_rank(a) < forward_rank(b); });
      for (size_t k = 0; k < slots.size(); ++k) (*list)[slots[k]] = listed[k];
    }
    // image_newline joins the projected features (pack_image_features), after the projector.
    out_.vision_projector.insert(out_.vision_projector.end(), described_newline_.begin(), described_newline_.end());
  }

  // One module of a described tower's encoder layer, in the slot its role names.
  void place_vision(VisionBlockUse& block, const ModuleSpec& m, const LinearUse& use, const VisionTowerSpec& tower) const {
    switch (m.role) {
      case ModuleRole::Q: case ModuleRole::QKV: block.qkv = use; break;
      case ModuleRole::K: block.k = use; break;
      case ModuleRole::V: block.v = use; break;
      case ModuleRole::O: block.proj = use; break;
      case ModuleRole::InputNorm: block.norm1_weight = use.weight; block.norm1_bias = use.bias; break;
      case ModuleRole::PostAttentionNorm: block.norm2_weight = use.weight; block.norm2_bias = use.bias; break;
      case ModuleRole::Gate: block.gate = use; break;
      case ModuleRole::Up: block.fc1 = use; break;
      case ModuleRole::Down: block.fc2 = use; break;
      case ModuleRole::QNorm: case ModuleRole::KNorm: block.qk_norms.push_back(use); break;
      case ModuleRole::AttentionOther: block.attention_other.push_back(use); break;
      case ModuleRole::MlpOther: block.mlp_other.push_back(use); break;
      default:
        throw InputError(plan_.model.source, "vision tower " + tower.model_type + ": no slot for " + m.path);
    }
  }

  static bool quantizable(const VisionTowerSpec& tower, const std::string& path) {
    return std::find(tower.not_quantized.begin(), tower.not_quantized.end(), path) == tower.not_quantized.end();
  }

  // One module of a described tower or projector at `full` (its path in the model): an nn.Linear or
  // nn.Conv2d (wrapped by PEFT's LoRA when a target matches it: all-linear reaches every Linear of the
  // tower, the pooling head's MultiheadAttention.out_proj included, as PEFT 0.21 does), a norm, an
  // embedding or a bare parameter. With load_in_4bit/8bit, bitsandbytes quantizes every plain
  // nn.Linear of the tower and projector too: transformers 5.17 skips only tied, last and
  // output-embedding modules and _keep_in_fp32_modules (quantizers/base.py get_keys_to_not_convert;
  // none of these classes keeps any), never Conv layers or bare parameters.
  LinearUse vision_module(const ModuleSpec& module, const std::string& full, const std::map<std::string, double>& values,
                          bool trainable, bool quantizable_linear) {
    const size_t dot = full.rfind('.');
    const std::string parent = full.substr(0, dot);
    const std::string leaf = full.substr(dot + 1);
    const bool bias = evaluate_flag(module.bias, values);
    auto shape = [&](const std::string& expressions) {
      const std::vector<long long> d = evaluate_shape(expressions, values, plan_.model.source);
      return std::vector<int64_t>(d.begin(), d.end());
    };
    LinearUse use;
    use.name = leaf;
    switch (module.kind) {
      case ModuleKind::Linear: case ModuleKind::Conv: {
        std::vector<int64_t> out = shape(module.shape);
        const int64_t in = shape(module.in).at(0);
        const std::vector<int64_t> kernel(out.begin() + 1, out.end());
        const bool quantize = module.kind == ModuleKind::Linear && quantizable_linear;
        if (is_lora_target(full)) return linear(parent, leaf, in, out[0], bias, -1, "vision", trainable, quantize, kernel);
        note(full, module.kind == ModuleKind::Conv ? ModuleType::Conv : ModuleType::Linear);
        std::vector<int64_t> weight{out[0], in};
        weight.insert(weight.end(), kernel.begin(), kernel.end());
        use.weight = add(full, "weight", weight, trainable, -1, "vision", quantize && (plan_.load_in_4bit || plan_.load_in_8bit));
        if (bias) use.bias = add(full, "bias", {out[0]}, trainable, -1, "vision");
        return use;
      }
      case ModuleKind::Embedding:
        note(full, ModuleType::Embedding);
        use.weight = add(full, "weight", shape(module.shape), trainable, -1, "vision");
        return use;
      case ModuleKind::Norm:
        use.weight = add(full, "weight", shape(module.shape), trainable, -1, "vision");
        if (bias) use.bias = add(full, "bias", shape(module.shape), trainable, -1, "vision");
        return use;
      case ModuleKind::Tensor: case ModuleKind::Conv1D:
        use.weight = add(parent, leaf, shape(module.shape), trainable, -1, "vision");
        return use;
    }
    return use;
  }

  LinearUse vision_linear(const std::string& module, const std::string& leaf, int64_t in, int64_t out,
                          bool trainable) {
    // A LoRA target list naming vision leaves (qkv, proj, linear_fc1, ...) wraps them too, as PEFT
    // matches target_modules by module-name suffix.
    if (is_lora_target(module + "." + leaf)) return linear(module, leaf, in, out, true, -1, "vision", trainable, false);
    note(module + "." + leaf, ModuleType::Linear);
    LinearUse use;
    use.name = leaf;
    use.weight = add(module + "." + leaf, "weight", {out, in}, trainable, -1, "vision");
    use.bias = add(module + "." + leaf, "bias", {out}, trainable, -1, "vision");
    return use;
  }

 private:
  const Plan& plan_;
  ModelStructure& out_;
  const TargetMatcher* matcher_;
  std::vector<ModuleEntry>* catalog_;
  std::vector<std::string>* param_catalog_;
  const std::map<std::string, double> values_;
  const std::map<std::string, double>* layer_values_ = nullptr;  // see shape_values()
  std::set<std::string> seen_;
  std::string prefix_;
  std::vector<std::regex> unfrozen_;
  std::vector<std::regex> keep_fp32_;  // ArchitectureSpec::keep_in_fp32_strict
  std::vector<LinearUse> described_newline_;  // VisionLanguageSpec::model_params (image_newline)
};

}  // namespace

namespace {

// axolotl's ExpertParallelPlugin.post_model_build (integrations/expert_parallel/plugin.py, commit
// 060b4aec63d4) runs shard.py shard_expert_weights: every module with 3-D gate_up_proj and
// down_proj parameters (_detect_experts_modules: transformers' @use_experts_implementation
// layout; a ModuleList of per-expert MLPs does not match) keeps experts [ep_rank * E/ep,
// (ep_rank + 1) * E/ep) of both (and of their [E, ...] biases) as new Parameters, and names them
// in _ddp_params_and_buffers_to_ignore. No such module with ep > 1 is the plugin's ValueError.
void shard_experts_for_expert_parallelism(const Plan& plan, ModelStructure& structure) {
  const int ep = plan.engine.expert_parallel;
  if (ep <= 1) return;
  const std::string where = plan.source + ": key expert_parallel_size";
  for (const DecoderLayerUse& layer : structure.layers) {
    if (!layer.moe || !layer.experts.empty() || layer.up.weight < 0 || layer.down.weight < 0) continue;
    const Parameter& gate_up = structure.parameters[static_cast<size_t>(layer.up.weight)];
    const Parameter& down = structure.parameters[static_cast<size_t>(layer.down.weight)];
    if (gate_up.shape.size() != 3 || down.shape.size() != 3) continue;
    const int64_t experts = gate_up.shape[0];
    if (experts % ep != 0) {
      throw InputError(where, "Expert module '" + gate_up.module + "': num_experts=" + std::to_string(experts) +
                                  " not divisible by ep_size=" + std::to_string(ep) +
                                  ". Adjust the model config or ep_size. (axolotl's expert_parallel shard.py)");
    }
    for (int index : {layer.up.weight, layer.down.weight, layer.up.bias, layer.down.bias}) {
      if (index < 0) continue;
      Parameter& p = structure.parameters[static_cast<size_t>(index)];
      if (p.shape.empty() || p.shape[0] != experts) continue;
      p.shape[0] = experts / ep;
      structure.expert_parallel_shards.push_back(index);
    }
  }
  if (structure.expert_parallel_shards.empty()) {
    throw InputError(where, "expert_parallel_size > 1 but no Experts modules were detected for sharding (the model does not use "
                            "transformers' canonical 3-D gate_up_proj/down_proj experts layout). Expert parallelism cannot run on "
                            "this model; set expert_parallel_size: 1. (axolotl's ExpertParallelPlugin.post_model_build)");
  }
}

}  // namespace

ModelStructure build_model_structure(const Plan& plan) {
  // PEFT matches target_modules against every module of the base model before wrapping any, so
  // the modules are listed first (a build without adapters), then the structure is built for real.
  std::optional<TargetMatcher> matcher;
  if (plan.adapter != Adapter::None) {
    ModelStructure scratch;
    std::vector<ModuleEntry> catalog;
    std::vector<std::string> params;
    StructureBuilder(plan, scratch, nullptr, &catalog, &params).build();
    matcher.emplace(plan, catalog, params, architecture_of(plan.model));
  }
  ModelStructure structure;
  StructureBuilder(plan, structure, matcher ? &*matcher : nullptr, nullptr, nullptr).build();
  shard_experts_for_expert_parallelism(plan, structure);
  // DDP's parameter list (distributed.py _build_params_for_reducer): trainable parameters in
  // named_modules() order; shared tensors appear once because ModelStructure holds them once.
  // DDP drops the names in the module's _ddp_params_and_buffers_to_ignore (distributed.py
  // __init__: parameters_to_ignore): the expert-parallel shards.
  const std::set<int> ignored(structure.expert_parallel_shards.begin(), structure.expert_parallel_shards.end());
  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    Parameter& p = structure.parameters[i];
    if (!p.trainable || ignored.count(static_cast<int>(i))) continue;
    p.ddp_index = static_cast<int>(structure.ddp_parameters.size());
    structure.ddp_parameters.push_back(static_cast<int>(i));
  }
  return structure;
}

std::vector<int> parameters_under(const ModelStructure& structure, const std::string& module_path) {
  std::vector<int> result;
  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    const std::string& module = structure.parameters[i].module;
    if (module == module_path ||
        (module.size() > module_path.size() && module.compare(0, module_path.size(), module_path) == 0 &&
         module[module_path.size()] == '.')) {
      result.push_back(static_cast<int>(i));
    }
  }
  return result;
}

}  // namespace hookstream
