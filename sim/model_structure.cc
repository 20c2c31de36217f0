#include "sim/model_structure.h"

#include <regex>

#include "sim/data_files.h"
#include "sim/input_error.h"

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

// Accumulates parameters in named_parameters() order. The order of calls below mirrors module
// registration order in transformers' modeling files (LlamaDecoderLayer.__init__ registers
// self_attn, mlp, input_layernorm, post_attention_layernorm; Qwen3Attention registers q_proj,
// k_proj, v_proj, o_proj, q_norm, k_norm; Qwen3VLVisionBlock registers norm1, norm2, attn, mlp).
class StructureBuilder {
 public:
  StructureBuilder(const Plan& plan, ModelStructure& out) : plan_(plan), out_(out) {
    prefix_ = plan.adapter == Adapter::None ? "" : "base_model.model.";
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
    Parameter p;
    p.module = prefix_ + module;
    p.name = p.module + "." + leaf;
    p.shape = std::move(shape);
    p.dtype = plan_.model.torch_dtype;
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

  bool is_lora_target(const std::string& leaf) const {
    if (plan_.adapter == Adapter::None) return false;
    // PEFT's "all-linear" shorthand (a string, any case): every nn.Linear but the output
    // embedding (peft/tuners/tuners_utils.py _maybe_include_all_linear_layers). The builder asks
    // only about Linear modules, and lm_head is not built through linear().
    if (plan_.lora_target_modules.size() == 1 && lowercase(plan_.lora_target_modules[0]) == "all-linear") return true;
    for (const auto& t : plan_.lora_target_modules) {
      if (t == leaf) return true;
    }
    return false;
  }

  // A Linear(in, out) at `module`, wrapped by PEFT's LoraLayer when targeted: base_layer.weight,
  // base_layer.bias, lora_A.default.weight [r, in], lora_B.default.weight [out, r]
  // (peft/tuners/lora/layer.py registers base_layer first, then lora_A, lora_B).
  LinearUse linear(const std::string& module, const std::string& leaf, int64_t in, int64_t out,
                   bool bias, int layer, const std::string& group, bool full_trainable,
                   bool quantizable) {
    LinearUse use;
    use.name = leaf;
    const std::string path = module + "." + leaf;
    const bool quantized = quantizable && (plan_.load_in_4bit || plan_.load_in_8bit);
    const bool adapter_on = plan_.adapter != Adapter::None;
    if (is_lora_target(leaf)) {
      use.weight = add(path + ".base_layer", "weight", {out, in}, false, layer, group, quantized);
      if (bias) use.bias = add(path + ".base_layer", "bias", {out}, false, layer, group);
      use.lora_a = add(path + ".lora_A.default", "weight", {plan_.lora_r, in}, true, layer, group);
      use.lora_b = add(path + ".lora_B.default", "weight", {out, plan_.lora_r}, true, layer, group);
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
      use.weight = add(path, "weight", {out, in}, trainable, layer, group, quantized);
      if (bias) use.bias = add(path, "bias", {out}, trainable, layer, group);
    }
    return use;
  }

  void build() {
    const ModelConfig& m = plan_.model;
    const bool full_ft = plan_.adapter == Adapter::None;
    const std::string text = m.text_prefix;
    if (m.vision) build_vision(*m.vision);

    out_.embed = add(text + ".embed_tokens", "weight", {m.vocab_size, m.hidden_size}, full_ft, -1,
                     "embed");
    const int64_t q_out = int64_t(m.num_attention_heads) * m.head_dim;
    const int64_t kv_out = int64_t(m.num_key_value_heads) * m.head_dim;
    // Llama's attention_bias puts a bias on all four projections; Qwen2 has q/k/v biases only
    // (transformers: modeling_llama.py / modeling_qwen2.py).
    const bool o_bias = m.attention_bias && m.model_type.rfind("qwen2", 0) != 0;
    for (int i = 0; i < m.num_hidden_layers; ++i) {
      DecoderLayerUse layer;
      layer.index = i;
      const std::string path = text + ".layers." + std::to_string(i);
      layer.path = prefix_ + path;
      const std::string attn = path + ".self_attn";
      const std::string mlp = path + ".mlp";
      layer.q = linear(attn, "q_proj", m.hidden_size, q_out, m.attention_bias, i, "decoder", true, true);
      layer.k = linear(attn, "k_proj", m.hidden_size, kv_out, m.attention_bias, i, "decoder", true, true);
      layer.v = linear(attn, "v_proj", m.hidden_size, kv_out, m.attention_bias, i, "decoder", true, true);
      layer.o = linear(attn, "o_proj", q_out, m.hidden_size, o_bias, i, "decoder", true, true);
      if (m.qk_norm) {
        layer.q_norm = add(attn + ".q_norm", "weight", {m.head_dim}, full_ft, i, "decoder");
        layer.k_norm = add(attn + ".k_norm", "weight", {m.head_dim}, full_ft, i, "decoder");
      }
      layer.gate = linear(mlp, "gate_proj", m.hidden_size, m.intermediate_size, false, i, "decoder", true, true);
      layer.up = linear(mlp, "up_proj", m.hidden_size, m.intermediate_size, false, i, "decoder", true, true);
      layer.down = linear(mlp, "down_proj", m.intermediate_size, m.hidden_size, false, i, "decoder", true, true);
      layer.input_norm = add(path + ".input_layernorm", "weight", {m.hidden_size}, full_ft, i, "decoder");
      layer.post_attention_norm =
          add(path + ".post_attention_layernorm", "weight", {m.hidden_size}, full_ft, i, "decoder");
      out_.layers.push_back(std::move(layer));
    }
    out_.final_norm = add(text + ".norm", "weight", {m.hidden_size}, full_ft, -1, "final_norm");
    if (m.tie_word_embeddings) {
      // The same tensor: named_parameters() and DDP list it once, under the embedding's name.
      out_.lm_head = out_.embed;
    } else {
      out_.lm_head = add("lm_head", "weight", {m.vocab_size, m.hidden_size}, full_ft, -1, "head");
    }
  }

  void build_vision(const VisionTowerConfig& v) {
    const bool trainable = plan_.vision_tower_trainable();
    const std::string root = "model.visual";
    // Qwen3-VL's patch embedding is a Conv3d; as parameters it is one weight + bias.
    out_.vision_patch_embed.name = "patch_embed";
    out_.vision_patch_embed.weight =
        add(root + ".patch_embed.proj", "weight",
            {v.hidden_size, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size},
            trainable, -1, "vision");
    out_.vision_patch_embed.bias = add(root + ".patch_embed.proj", "bias", {v.hidden_size}, trainable, -1, "vision");
    if (v.num_position_embeddings > 0) {
      // Qwen3VLVisionModel registers pos_embed (nn.Embedding) right after patch_embed.
      out_.vision_pos_embed =
          add(root + ".pos_embed", "weight", {v.num_position_embeddings, v.hidden_size}, trainable, -1, "vision");
    }
    for (int i = 0; i < v.depth; ++i) {
      VisionBlockUse block;
      block.index = i;
      const std::string path = root + ".blocks." + std::to_string(i);
      block.path = prefix_ + path;
      block.norm1_weight = add(path + ".norm1", "weight", {v.hidden_size}, trainable, -1, "vision");
      block.norm1_bias = add(path + ".norm1", "bias", {v.hidden_size}, trainable, -1, "vision");
      block.norm2_weight = add(path + ".norm2", "weight", {v.hidden_size}, trainable, -1, "vision");
      block.norm2_bias = add(path + ".norm2", "bias", {v.hidden_size}, trainable, -1, "vision");
      block.qkv = vision_linear(path + ".attn", "qkv", v.hidden_size, 3 * int64_t(v.hidden_size), trainable);
      block.proj = vision_linear(path + ".attn", "proj", v.hidden_size, v.hidden_size, trainable);
      block.fc1 = vision_linear(path + ".mlp", "linear_fc1", v.hidden_size, v.intermediate_size, trainable);
      block.fc2 = vision_linear(path + ".mlp", "linear_fc2", v.intermediate_size, v.hidden_size, trainable);
      out_.vision_blocks.push_back(std::move(block));
    }
    const int64_t merged = int64_t(v.hidden_size) * v.spatial_merge_size * v.spatial_merge_size;
    const std::string merger = root + ".merger";
    out_.vision_merger_norm_weight = add(merger + ".norm", "weight", {v.hidden_size}, trainable, -1, "vision");
    out_.vision_merger_norm_bias = add(merger + ".norm", "bias", {v.hidden_size}, trainable, -1, "vision");
    const int64_t out_hidden = v.out_hidden_size > 0 ? v.out_hidden_size : plan_.model.hidden_size;
    out_.vision_merger_fc1 = vision_linear(merger, "linear_fc1", merged, merged, trainable);
    out_.vision_merger_fc2 = vision_linear(merger, "linear_fc2", merged, out_hidden, trainable);
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

  LinearUse vision_linear(const std::string& module, const std::string& leaf, int64_t in, int64_t out,
                          bool trainable) {
    // A LoRA target list naming vision leaves (qkv, proj, linear_fc1, ...) wraps them too, as PEFT
    // matches target_modules by module-name suffix.
    if (is_lora_target(leaf)) return linear(module, leaf, in, out, true, -1, "vision", trainable, false);
    LinearUse use;
    use.name = leaf;
    use.weight = add(module + "." + leaf, "weight", {out, in}, trainable, -1, "vision");
    use.bias = add(module + "." + leaf, "bias", {out}, trainable, -1, "vision");
    return use;
  }

 private:
  const Plan& plan_;
  ModelStructure& out_;
  std::string prefix_;
  std::vector<std::regex> unfrozen_;
};

}  // namespace

ModelStructure build_model_structure(const Plan& plan) {
  ModelStructure structure;
  StructureBuilder(plan, structure).build();
  // DDP's parameter list (distributed.py _build_params_for_reducer): trainable parameters in
  // named_modules() order; shared tensors appear once because ModelStructure holds them once.
  for (size_t i = 0; i < structure.parameters.size(); ++i) {
    Parameter& p = structure.parameters[i];
    if (!p.trainable) continue;
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
