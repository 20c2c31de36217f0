#include "runtime/model_config_json.h"

#include <nlohmann/json.hpp>

namespace hookstream {

namespace {

const char* hf_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "bfloat16";
}

}  // namespace

std::string model_config_json(const ModelConfig& m) {
  nlohmann::ordered_json text;
  text["model_type"] = m.model_type;
  text["hidden_size"] = m.hidden_size;
  text["intermediate_size"] = m.intermediate_size;
  text["num_hidden_layers"] = m.num_hidden_layers;
  text["num_attention_heads"] = m.num_attention_heads;
  text["num_key_value_heads"] = m.num_key_value_heads;
  if (m.head_dim > 0) text["head_dim"] = m.head_dim;
  text["vocab_size"] = m.vocab_size;
  text["tie_word_embeddings"] = m.tie_word_embeddings;
  text["attention_bias"] = m.attention_bias;
  // Not an HF key (Qwen3's q/k norms follow from model_type); written for model types that do not
  // imply it.
  if (m.qk_norm) text["qk_norm"] = true;
  text["torch_dtype"] = hf_dtype(m.torch_dtype);
  text["rms_norm_eps"] = m.rms_norm_eps;
  text["rope_theta"] = m.rope_theta;
  text["initializer_range"] = m.initializer_range;

  nlohmann::ordered_json j;
  if (!m.vision) {
    j = text;
    if (!m.architecture.empty()) j["architectures"] = {m.architecture};
    return j.dump(2) + "\n";
  }
  // Nested layout (Qwen3-VL, Llava): text_config + vision_config.
  const VisionTowerConfig& v = *m.vision;
  j["model_type"] = m.model_type;
  if (!m.architecture.empty()) j["architectures"] = {m.architecture};
  j["tie_word_embeddings"] = m.tie_word_embeddings;
  j["torch_dtype"] = hf_dtype(m.torch_dtype);
  j["text_config"] = text;
  if (!v.model_type.empty()) {
    // A described tower (CLIP, SigLIP, Pixtral): its own config keys, less the derived num_patches.
    nlohmann::ordered_json vision;
    vision["model_type"] = v.model_type;
    for (const auto& [key, value] : v.values) {
      if (key != "num_patches") vision[key] = value == static_cast<double>(static_cast<int64_t>(value)) ? nlohmann::ordered_json(static_cast<int64_t>(value)) : nlohmann::ordered_json(value);
    }
    j["vision_config"] = vision;
    return j.dump(2) + "\n";
  }
  j["vision_config"] = {{"depth", v.depth},
                        {"hidden_size", v.hidden_size},
                        {"intermediate_size", v.intermediate_size},
                        {"num_heads", v.num_heads},
                        {"in_channels", v.in_channels},
                        {"patch_size", v.patch_size},
                        {"temporal_patch_size", v.temporal_patch_size},
                        {"spatial_merge_size", v.spatial_merge_size},
                        {"out_hidden_size", v.out_hidden_size}};
  if (v.layout == VisionLayout::Qwen2VL) {
    // Qwen2VLVisionConfig spells the ViT width embed_dim, the merger's output hidden_size and the
    // MLP width mlp_ratio * embed_dim (configuration_qwen2_vl.py).
    j["vision_config"].erase("intermediate_size");
    j["vision_config"].erase("out_hidden_size");
    j["vision_config"]["embed_dim"] = v.hidden_size;
    j["vision_config"]["hidden_size"] = v.out_hidden_size;
    j["vision_config"]["mlp_ratio"] = double(v.intermediate_size) / v.hidden_size;
  }
  if (v.num_position_embeddings > 0) j["vision_config"]["num_position_embeddings"] = v.num_position_embeddings;
  if (!v.deepstack_visual_indexes.empty()) j["vision_config"]["deepstack_visual_indexes"] = v.deepstack_visual_indexes;
  return j.dump(2) + "\n";
}

}  // namespace hookstream
